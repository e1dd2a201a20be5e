#!/usr/bin/env python3
"""embed_file.py - turn a file into a C header holding its bytes, so the
binary serves it without reading the disk (the dashboard page).

    embed_file.py INPUT OUTPUT SYMBOL

writes `static const unsigned char SYMBOL[]` (the bytes, plus a NUL so it
is also a C string) and `#define SYMBOL_len` (the length without the NUL).
Run by the build (api/meson.build); never edit the output by hand."""
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: embed_file.py INPUT OUTPUT SYMBOL")
    src, dst, sym = sys.argv[1:]
    data = open(src, "rb").read()
    lines = []
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",")
    out = ["/* %s - generated from %s by scripts/embed_file.py; do not edit. */"
           % (dst.rsplit("/", 1)[-1], src.rsplit("/", 1)[-1]),
           "static const unsigned char %s[] = {" % sym, *lines, "    0x00,", "};",
           "#define %s_len ((size_t)%d)" % (sym, len(data)), ""]
    with open(dst, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()

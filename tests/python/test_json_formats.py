"""Every json_pack format literal in parley's C sources parses under
jansson's pack grammar (src/pack_unpack.c, 2.14).

jansson refuses a bad format at run time by returning NULL, and
json_object_set_new(o, "k", NULL) then drops the key without a word: the
jobs status lost "accuracy" that way ("s:f?": '?' follows only s, o and O).
pl_json_pack (src/base/json_pack.h) aborts on such a format, which catches it
on every path a test runs; this checks the paths no test runs as well."""
import os
import re

from conftest import ROOT

DIRS = ("api", "src", "backends", "schedulers")
CALL = re.compile(r"\b(?:pl_)?json_pack\s*\(")
LITERAL = re.compile(r'\s*"((?:[^"\\]|\\.)*)"')
IGNORED = " \t\n,:"


class FormatError(Exception):
    pass


def _tokens(fmt):
    return [c for c in fmt if c not in IGNORED]


def _string(t, i):
    """s with its modifiers: s? | s [#%] (+ s [#%])* ; the caller handles '*'."""
    i += 1
    if i < len(t) and t[i] == "?":
        return i + 1
    while True:
        if i < len(t) and t[i] in "#%":
            i += 1
        if i < len(t) and t[i] == "+":
            i += 1       # jansson then reads the next string argument
            continue
        return i


def _value(t, i, in_container):
    if i >= len(t):
        raise FormatError("unexpected end of format string")
    c = t[i]
    if c == "{":
        i += 1
        while True:
            if i >= len(t):
                raise FormatError("unexpected end of format string")
            if t[i] == "}":
                return i + 1
            if t[i] != "s":
                raise FormatError("expected format 's' for a key, got %r" % t[i])
            i = _key(t, i)
            i = _value(t, i, True)
    if c == "[":
        i += 1
        while True:
            if i >= len(t):
                raise FormatError("unexpected end of format string")
            if t[i] == "]":
                return i + 1
            i = _value(t, i, True)
    if c == "s":
        i = _string(t, i)
    elif c in "oO":
        i += 1
        if i < len(t) and t[i] == "?":
            i += 1
    elif c in "nbiIf":
        return i + 1
    else:
        raise FormatError("unexpected format character %r" % c)
    if in_container and i < len(t) and t[i] == "*":
        i += 1
    return i


def _key(t, i):
    i = _string(t, i)
    if t[i - 1] == "?":
        raise FormatError("a key cannot be nullable ('s?')")
    return i


def check_format(fmt):
    t = _tokens(fmt)
    i = _value(t, 0, False)
    if i != len(t):
        raise FormatError("garbage after the format: %r" % "".join(t[i:]))


COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _formats(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for m in CALL.finditer(text):
        pos, parts = m.end(), []
        while True:
            lm = LITERAL.match(text, pos)
            if not lm:
                break
            parts.append(bytes(lm.group(1), "utf-8").decode("unicode_escape"))
            pos = lm.end()
        line = text.count("\n", 0, m.start()) + 1
        if not parts and not path.endswith("json_pack.c"):
            raise AssertionError("%s:%d: json_pack without a literal format" % (path, line))
        if parts:
            yield line, "".join(parts)


def all_formats():
    for d in DIRS:
        for base, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith(".c"):
                    path = os.path.join(base, f)
                    for line, fmt in _formats(path):
                        yield os.path.relpath(path, ROOT), line, fmt


def test_checker_knows_the_grammar():
    for good in ["{s:s, s:s?, s:o?, s:O*, s:i, s:I, s:f, s:b, s:n}", "[s#, s%, s+s, o*]",
                 "{s:{s:[]}}", "s", "{s:s*}", "{s#:i}"]:
        check_format(good)
    for bad in ["{s:f?}", "{s:i?}", "{s?:i}", "{i:s}", "{s:s", "[s] x", "{s:b?}", "q"]:
        try:
            check_format(bad)
        except FormatError:
            continue
        raise AssertionError("accepted %r" % bad)


def test_every_json_pack_format_in_the_tree_is_valid():
    found, bad = 0, []
    for path, line, fmt in all_formats():
        found += 1
        try:
            check_format(fmt)
        except FormatError as e:
            bad.append("%s:%d: %r: %s" % (path, line, fmt, e))
    assert found > 80, "the scan found only %d formats" % found
    assert not bad, "\n".join(bad)

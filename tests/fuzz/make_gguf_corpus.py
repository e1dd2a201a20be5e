#!/usr/bin/env python3
"""make_gguf_corpus.py - writes the tiny seed corpus for fuzz_gguf.c into
tests/fuzz/gguf_corpus/ with the gguf package's GGUFWriter (an independent
writer): metadata of every type, string and number arrays, a few tensors of
different types, a non-default alignment.  Each file is well under 4 KiB.
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf_corpus")


def write(name, fill, alignment=None):
    path = os.path.join(OUT, name)
    w = GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path))


def meta(w):
    w.add_uint8("a.u8", 7)
    w.add_int8("a.i8", -7)
    w.add_uint16("a.u16", 700)
    w.add_int16("a.i16", -700)
    w.add_uint32("llama.block_count", 2)
    w.add_int32("a.i32", -70000)
    w.add_float32("a.f32", 0.5)
    w.add_uint64("a.u64", 1 << 40)
    w.add_int64("a.i64", -(1 << 40))
    w.add_float64("a.f64", 0.25)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "hello")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", ""])
    w.add_array("a.ints", [1, -2, 3])
    w.add_array("a.floats", [0.5, 1.5])


def tensors(w):
    rng = np.random.default_rng(1)
    w.add_tensor("f32", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("f16", np.ones(4, dtype=np.float16))
    x = rng.standard_normal(32).astype(np.float32)
    w.add_tensor("q4_0", quants.quantize(x, T.Q4_0), raw_dtype=T.Q4_0)
    w.add_tensor("q8_0", quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
    w.add_tensor("q6_k", rng.integers(0, 256, 210, dtype=np.uint8),
                 raw_dtype=T.Q6_K)


def main():
    os.makedirs(OUT, exist_ok=True)
    write("empty.gguf", lambda w: None)
    write("meta.gguf", meta)
    write("tensors.gguf", tensors)
    write("align64.gguf", lambda w: (meta(w), tensors(w)), alignment=64)


if __name__ == "__main__":
    main()

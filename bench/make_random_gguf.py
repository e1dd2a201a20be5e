#!/usr/bin/env python3
"""make_random_gguf.py - write a random-weight, Llama-shaped bf16 GGUF for
the GPU benchmarks.

The tokenizer metadata (tokens, types, merges, special ids, chat template)
is copied from the default model, so parley tokenizes prompts as usual;
the vocabulary is padded with unused tokens up to the shape's real size so
the LM-head GEMM has Llama's cost. Tensors are streamed one at a time
(the 8B file is ~16 GB; the largest tensor is generated in memory).

usage: make_random_gguf.py SHAPE OUT.gguf [--source MODEL.gguf|none] [--seed N]
shapes: llama-3.2-1b, llama-3-8b, tiny (a few MB, to check the writer)
"""
import argparse
import os
import sys

import numpy as np
import gguf

SHAPES = {
    # n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, ctx, rope_base, tied
    "llama-3.2-1b": dict(n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                         n_vocab=128256, ctx=131072, rope_base=500000.0, tied=True),
    "llama-3-8b": dict(n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8,
                       n_vocab=128256, ctx=8192, rope_base=500000.0, tied=False),
    "tiny": dict(n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2,
                 n_vocab=0, ctx=2048, rope_base=10000.0, tied=True),
}
DEFAULT_SOURCE = os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")
TOKENIZER_SCALARS = ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                     "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"]


def byte_tokenizer():
    """A GPT-2 byte-level vocabulary without merges (one token per byte) and
    an end-of-text token: for machines without the default model."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = [chr(c) for _, c in sorted(zip(bs, cs))] + ["<|endoftext|>"]
    types = [int(gguf.TokenType.NORMAL)] * 256 + [int(gguf.TokenType.CONTROL)]
    return dict(model="gpt2", pre="default", tokens=tokens, types=types, merges=[],
                template=None, add_bos=False, add_space=False,
                ids={"tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 256,
                     "tokenizer.ggml.unknown_token_id": None,
                     "tokenizer.ggml.padding_token_id": None})


def read_tokenizer(path):
    """Token list, types, merges and special ids of a GGUF's tokenizer
    ("none": byte_tokenizer())."""
    if path == "none":
        return byte_tokenizer()
    r = gguf.GGUFReader(path)

    def get(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()
    tok = dict(model=get("tokenizer.ggml.model"), pre=get("tokenizer.ggml.pre"),
               tokens=get("tokenizer.ggml.tokens"), types=get("tokenizer.ggml.token_type"),
               merges=get("tokenizer.ggml.merges", []),
               template=get("tokenizer.chat_template"),
               add_bos=get("tokenizer.ggml.add_bos_token"),
               add_space=get("tokenizer.ggml.add_space_prefix"))
    tok["ids"] = {k: get(k) for k in TOKENIZER_SCALARS}
    if not tok["tokens"]:
        sys.exit(f"{path}: no tokenizer.ggml.tokens")
    return tok


def write_metadata(w, shape, name, tok, n_vocab):
    s = SHAPES[shape]
    head_dim = s["n_embd"] // s["n_head"]
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    n_pad = n_vocab - len(tok["tokens"])
    w.add_tokenizer_model(tok["model"])
    if tok["pre"]:
        w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(list(tok["tokens"]) + [f"<|random_pad_{i}|>" for i in range(n_pad)])
    w.add_token_types(list(tok["types"]) + [int(gguf.TokenType.UNUSED)] * n_pad)
    if tok["merges"]:
        w.add_token_merges(list(tok["merges"]))
    adders = {"tokenizer.ggml.bos_token_id": w.add_bos_token_id,
              "tokenizer.ggml.eos_token_id": w.add_eos_token_id,
              "tokenizer.ggml.unknown_token_id": w.add_unk_token_id,
              "tokenizer.ggml.padding_token_id": w.add_pad_token_id}
    for key, add in adders.items():
        if tok["ids"][key] is not None:
            add(int(tok["ids"][key]))
    if tok["add_bos"] is not None:
        w.add_add_bos_token(bool(tok["add_bos"]))
    if tok["add_space"] is not None:
        w.add_add_space_prefix(bool(tok["add_space"]))
    if tok["template"]:
        w.add_chat_template(tok["template"])


def tensor_plan(shape, n_vocab):
    """(name, numpy shape (rows, cols) or (n,), kind) in file order."""
    s = SHAPES[shape]
    E, F = s["n_embd"], s["n_ff"]
    hd = E // s["n_head"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    plan = [("token_embd.weight", (n_vocab, E), "w")]
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", (E,), "norm"),
                 (b + "attn_q.weight", (q, E), "w"),
                 (b + "attn_k.weight", (kv, E), "w"),
                 (b + "attn_v.weight", (kv, E), "w"),
                 (b + "attn_output.weight", (E, q), "w"),
                 (b + "ffn_norm.weight", (E,), "norm"),
                 (b + "ffn_gate.weight", (F, E), "w"),
                 (b + "ffn_up.weight", (F, E), "w"),
                 (b + "ffn_down.weight", (E, F), "w")]
    plan.append(("output_norm.weight", (E,), "norm"))
    if not s["tied"]:
        plan.append(("output.weight", (n_vocab, E), "w"))
    return plan


def make_tensor(rng, shp, kind):
    if kind == "norm":
        return np.ones(shp, dtype=np.float32)
    x = rng.standard_normal(shp, dtype=np.float32) * np.float32(0.02)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits (truncated)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--source", default=DEFAULT_SOURCE,
                    help="GGUF whose tokenizer metadata is copied, or 'none' for "
                         "a byte-level vocabulary")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tok = read_tokenizer(a.source)
    n_vocab = max(SHAPES[a.shape]["n_vocab"], len(tok["tokens"]))
    w = gguf.GGUFWriter(a.out, "llama")
    write_metadata(w, a.shape, f"random-{a.shape}", tok, n_vocab)
    plan = tensor_plan(a.shape, n_vocab)
    for name, shp, kind in plan:
        dtype = np.float32 if kind == "norm" else np.uint16
        nbytes = int(np.prod(shp)) * np.dtype(dtype).itemsize
        raw = None if kind == "norm" else gguf.GGMLQuantizationType.BF16
        w.add_tensor_info(name, shp, np.dtype(dtype), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    for name, shp, kind in plan:
        w.write_tensor_data(make_tensor(rng, shp, kind))
    w.close()
    print(f"{a.out}: {a.shape}, {len(plan)} tensors, vocab {n_vocab}, "
          f"{os.path.getsize(a.out) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()

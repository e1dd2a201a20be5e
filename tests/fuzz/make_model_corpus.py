#!/usr/bin/env python3
"""make_model_corpus.py - the seed corpus of fuzz_model.c: for each
architecture of the table (llama with a sliding window, qwen2, qwen3,
gemma2, gemma3), a one-layer model as llama.cpp's converter lays it out,
with Q8_0 matrices and f32 norms (a few KB each), and a vocabulary (byte
BPE or SentencePiece with specials) - written by the gguf package's
GGUFWriter into tests/fuzz/model_corpus/.
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, TokenType, quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_corpus")
E, FF, HD, NV = 32, 32, 32, 8


def vocab(w, spm):
    if spm:
        toks = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "▁", "a", "  "]
        w.add_tokenizer_model("llama")
        w.add_token_list(toks)
        w.add_token_scores([0.0] * 5 + [-1.0, -2.0, 0.0])
        w.add_token_types([TokenType.CONTROL] * 3 + [TokenType.UNKNOWN, TokenType.CONTROL] +
                          [TokenType.NORMAL] * 2 + [TokenType.USER_DEFINED])
    else:
        toks = ["a", "b", "ab", "Ġ", "<|im_start|>", "<|im_end|>", "<think>", "c"]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(toks)
        w.add_token_types([TokenType.NORMAL] * 4 + [TokenType.CONTROL] * 2 +
                          [TokenType.USER_DEFINED, TokenType.NORMAL])
        w.add_token_merges(["a b"])


def model(name, arch, extra_keys, extra_tensors, spm=False, tied=True):
    path = os.path.join(OUT, name + ".gguf")
    w = GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(E)
    w.add_feed_forward_length(FF)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6)
    extra_keys(w)
    vocab(w, spm)
    rng = np.random.default_rng(7)

    def mat(n, rows, cols):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        w.add_tensor(n, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)

    def vec(n, k):
        w.add_tensor(n, np.ones(k, dtype=np.float32))
    mat("token_embd.weight", NV, E)
    vec("output_norm.weight", E)
    for n in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]:
        mat("blk.0.%s.weight" % n, 32, 32)
    vec("blk.0.attn_norm.weight", E)
    vec("blk.0.ffn_norm.weight", E)
    extra_tensors(vec)
    if not tied:
        mat("output.weight", NV, E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path))


def main():
    os.makedirs(OUT, exist_ok=True)
    none = lambda *a: None  # noqa: E731
    qk = lambda vec: (vec("blk.0.attn_q_norm.weight", HD), vec("blk.0.attn_k_norm.weight", HD))  # noqa: E731
    post = lambda vec: (vec("blk.0.post_attention_norm.weight", E),  # noqa: E731
                        vec("blk.0.post_ffw_norm.weight", E))
    model("llama_swa", "llama", lambda w: w.add_sliding_window(4), none, tied=False)
    model("qwen2", "qwen2", none, lambda vec: [vec("blk.0.attn_%s.bias" % x, 32) for x in "qkv"])
    model("qwen3", "qwen3", lambda w: w.add_rope_freq_base(1e6), qk)
    model("gemma2", "gemma2", lambda w: (w.add_sliding_window(4),
                                         w.add_attn_logit_softcapping(50.0),
                                         w.add_final_logit_softcapping(30.0)), post, spm=True)
    model("gemma3", "gemma3", lambda w: (w.add_sliding_window(4),
                                         w.add_sliding_window_pattern([True])),
          lambda vec: (qk(vec), post(vec)), spm=True)


if __name__ == "__main__":
    main()

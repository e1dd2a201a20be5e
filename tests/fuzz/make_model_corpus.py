#!/usr/bin/env python3
"""make_model_corpus.py - the seed corpus of fuzz_model.c: for each
architecture of the table (llama with a sliding window, qwen2, qwen3,
gemma2, gemma3, qwen3moe with Q8_0 experts, gpt-oss with MXFP4 experts), a
one-layer model as llama.cpp's converter lays it out (qwen35 and qwen35moe:
two layers, a Gated DeltaNet one and a gated attention one; gemma4: three, a sliding, a
global and a shared one, with per-layer embeddings),
with Q8_0 matrices and f32 norms (a few KB each), and a vocabulary (byte
BPE or SentencePiece with specials) - written by the gguf package's
GGUFWriter into tests/fuzz/model_corpus/.
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, RopeScalingType, TokenType, quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_corpus")
E, FF, HD, NV, X = 32, 32, 32, 8, 4


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


def model(name, arch, extra_keys, extra_tensors, spm=False, tied=True, moe=False,
          ffn_norm="ffn_norm"):
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

    def vec(n, *shape):
        w.add_tensor(n, np.ones(shape, dtype=np.float32))

    def exps(n, qt):              # 4 experts of 32 x 32
        x = rng.standard_normal((X, 32, 32)).astype(np.float32)
        w.add_tensor("blk.0.%s.weight" % n, quants.quantize(x, qt), raw_dtype=qt)
    vec.exps = exps
    mat("token_embd.weight", NV, E)
    vec("output_norm.weight", E)
    dense = [] if moe else ["ffn_gate", "ffn_up", "ffn_down"]
    for n in ["attn_q", "attn_k", "attn_v", "attn_output"] + dense:
        mat("blk.0.%s.weight" % n, 32, 32)
    vec("blk.0.attn_norm.weight", E)
    vec("blk.0.%s.weight" % ffn_norm, E)
    extra_tensors(vec)
    if not tied:
        mat("output.weight", NV, E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path))


def qwen35(moe=False):
    """A two-layer Gated DeltaNet hybrid (full_attention_interval 2: layer
    0 recurrent, layer 1 gated attention), as llama.cpp's converter writes
    Qwen3.5: the ssm.* keys, attention.recurrent_layers, rope sections;
    moe: qwen35moe's, every layer's feed-forward 4 Q8_0 experts (2 a
    token) beside a shared expert and its gate ([n_embd, 1], as the
    converter writes it)."""
    arch = "qwen35moe" if moe else "qwen35"
    path = os.path.join(OUT, arch + ".gguf")
    w = GGUFWriter(path, arch)
    a = arch + "."
    ffn = [("expert_count", X), ("expert_used_count", 2), ("expert_feed_forward_length", FF),
           ("expert_shared_feed_forward_length", FF)] if moe else [("feed_forward_length", FF)]
    keys = [("block_count", 2), ("context_length", 64), ("embedding_length", E)] + ffn + [
        ("attention.head_count", 1), ("attention.head_count_kv", 1),
        ("attention.key_length", HD), ("attention.value_length", HD),
        ("rope.dimension_count", 8), ("ssm.conv_kernel", 4), ("ssm.state_size", 16),
        ("ssm.group_count", 1), ("ssm.time_step_rank", 2), ("ssm.inner_size", 32),
        ("full_attention_interval", 2)]
    for k, v in keys:
        w.add_uint32(a + k, v)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_array(a + "rope.dimension_sections", [2, 1, 1, 0])
    w.add_array(a + "attention.recurrent_layers", [True, False])
    vocab(w, False)
    rng = np.random.default_rng(36 if moe else 35)

    def mat(n, rows, cols, q=True, n_exp=0):
        x = rng.standard_normal((n_exp, rows, cols) if n_exp else (rows, cols))
        x = x.astype(np.float32)
        if q:
            w.add_tensor(n, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(n, 0.1 * x)

    def vec(n, *shape):
        w.add_tensor(n, np.ones(shape, dtype=np.float32))
    mat("token_embd.weight", NV, E)
    vec("output_norm.weight", E)
    for l in range(2):
        b = "blk.%d." % l
        vec(b + "attn_norm.weight", E)
        vec(b + "post_attention_norm.weight", E)
        sfx = ("_exps", "_shexp") if moe else ("",)
        for x in sfx:
            for n in ("ffn_gate", "ffn_up"):
                mat(b + n + x + ".weight", FF, E, n_exp=X if x == "_exps" else 0)
            mat(b + "ffn_down" + x + ".weight", E, FF, n_exp=X if x == "_exps" else 0)
        if moe:
            mat(b + "ffn_gate_inp.weight", X, E, q=False)
            mat(b + "ffn_gate_inp_shexp.weight", 1, E, q=False)
    b = "blk.0."
    mat(b + "attn_qkv.weight", 64, E)
    mat(b + "attn_gate.weight", 32, E)
    mat(b + "ssm_beta.weight", 2, E, q=False)
    mat(b + "ssm_alpha.weight", 2, E, q=False)
    mat(b + "ssm_conv1d.weight", 64, 4, q=False)
    vec(b + "ssm_dt.bias", 2)
    w.add_tensor(b + "ssm_a", -np.ones(2, dtype=np.float32))
    vec(b + "ssm_norm.weight", 16)
    mat(b + "ssm_out.weight", E, 32)
    b = "blk.1."
    mat(b + "attn_q.weight", 2 * HD, E)
    mat(b + "attn_k.weight", HD, E)
    mat(b + "attn_v.weight", HD, E)
    mat(b + "attn_output.weight", E, HD)
    vec(b + "attn_q_norm.weight", HD)
    vec(b + "attn_k_norm.weight", HD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path))


def gemma4():
    """A three-layer Gemma 4 (sliding head 32, global head 64 with K = V
    and proportional rope_freqs, layer 2 sliding and reading layer 0's
    K/V, per-layer embeddings of 32 in Q8_0, layer output scales), as
    llama.cpp's converter writes it: parley loads and runs it."""
    path = os.path.join(OUT, "gemma4.gguf")
    w = GGUFWriter(path, "gemma4")
    a = "gemma4."
    for k, v in [("block_count", 3), ("context_length", 64), ("embedding_length", E),
                 ("feed_forward_length", FF), ("attention.head_count", 1),
                 ("attention.head_count_kv", 1), ("attention.key_length", 64),
                 ("attention.value_length", 64), ("attention.key_length_swa", HD),
                 ("attention.value_length_swa", HD), ("rope.dimension_count", 64),
                 ("rope.dimension_count_swa", HD), ("attention.sliding_window", 4),
                 ("attention.shared_kv_layers", 1), ("embedding_length_per_layer_input", 32)]:
        w.add_uint32(a + k, v)
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(a + "rope.freq_base", 1e6)
    w.add_float32(a + "rope.freq_base_swa", 1e4)
    w.add_float32(a + "final_logit_softcapping", 30.0)
    w.add_array(a + "attention.sliding_window_pattern", [True, False, True])
    vocab(w, True)
    rng = np.random.default_rng(48)

    def mat(n, rows, cols, q=True):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        if q:
            w.add_tensor(n, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(n, 0.1 * x)

    def vec(n, *shape):
        w.add_tensor(n, np.ones(shape, dtype=np.float32))
    mat("token_embd.weight", NV, E)
    mat("per_layer_token_embd.weight", NV, 3 * 32)
    mat("per_layer_model_proj.weight", 3 * 32, E)
    vec("per_layer_proj_norm.weight", 32)
    vec("output_norm.weight", E)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * 8 + [1e30] * 24, dtype=np.float32))
    for l, hd in enumerate((HD, 64, HD)):
        b = "blk.%d." % l
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"):
            vec(b + n + ".weight", E)
        vec(b + "layer_output_scale.weight", 1)
        mat(b + "attn_q.weight", hd, E)
        vec(b + "attn_q_norm.weight", hd)
        mat(b + "attn_output.weight", E, hd)
        if l < 2:
            mat(b + "attn_k.weight", hd, E)
            vec(b + "attn_k_norm.weight", hd)
        if l == 0:
            mat(b + "attn_v.weight", hd, E)
        for n in ("ffn_gate", "ffn_up"):
            mat(b + n + ".weight", FF, E)
        mat(b + "ffn_down.weight", E, FF)
        mat(b + "inp_gate.weight", 32, E)
        mat(b + "proj.weight", E, 32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path))


def main():
    os.makedirs(OUT, exist_ok=True)
    qwen35()
    qwen35(moe=True)
    gemma4()
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

    def experts(w, extra=None):
        w.add_expert_count(X)
        w.add_expert_used_count(2)
        w.add_expert_feed_forward_length(FF)
        if extra:
            extra(w)

    def exps(vec, qt, bias=False):
        vec("blk.0.ffn_gate_inp.weight", X, E)
        for n in ("gate", "up", "down"):
            vec.exps("ffn_%s_exps" % n, qt)
            if bias:
                vec("blk.0.ffn_%s_exps.bias" % n, X, 32)
        if bias:
            vec("blk.0.ffn_gate_inp.bias", X)
    model("qwen3moe", "qwen3moe", experts, lambda vec: (qk(vec), exps(vec, T.Q8_0)),
          tied=False, moe=True)

    def oss_keys(w):
        w.add_sliding_window(4)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)

    def oss_tensors(vec):
        for x in "qkv":
            vec("blk.0.attn_%s.bias" % x, 32)
        vec("blk.0.attn_output.bias", E)
        vec("blk.0.attn_sinks.weight", 1)
        exps(vec, T.MXFP4, bias=True)
    model("gpt_oss", "gpt-oss", lambda w: experts(w, oss_keys), oss_tensors, tied=False,
          moe=True, ffn_norm="post_attention_norm")


if __name__ == "__main__":
    main()

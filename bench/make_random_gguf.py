#!/usr/bin/env python3
"""make_random_gguf.py - write a random-weight, Llama-shaped GGUF (bf16,
Q8_0, or f32 for checks) with numpy only (the GPU machines have no `gguf`
package).

The tokenizer metadata (every `tokenizer.*` key: tokens, types, merges,
special ids, chat template) is copied from a source GGUF: the default
model, or the metadata-only file that `tokenizer` writes (about 1 MB, small
enough to carry to a GPU machine). The vocabulary is padded with unused
tokens up to the shape's real size, so the LM-head GEMM has Llama's cost.

The weights are a pure function of (seed, tensor name): a splitmix64 pool
of 2^24+43 uniform values, rolled by a per-tensor offset and tiled, so any
machine writes the same bytes (numpy's own generators may change between
versions) and the 8B file takes seconds of arithmetic, not minutes. Big
matrices are generated and encoded a few million values at a time (the
same bytes), so a multi-GB table needs no more RAM than a small one.
`tensors()` yields the same values in HF layout for the transformers peer.

usage: make_random_gguf.py model SHAPE OUT.gguf --tokenizer SRC.gguf
                           [--type bf16|q8_0|f32] [--seed N] [--std S]
       make_random_gguf.py tokenizer SRC.gguf OUT.gguf
shapes: llama-3.2-1b, llama-3-8b, ref (2 layers, 256-dim: the CPU/GPU
reference model), tiny; and the CUDA runner's random models of the newer
architectures, compared with the CPU runner on a GPU machine
(tests/test_cuda_families.c): ref-qwen3 (q/k norms, head_dim 64),
ref-gemma2 (GeGLU, post-norms, scaled embeddings, soft-capping that bites,
sliding window 16 on alternate layers, head_dim 256), ref-gemma3 (q/k norms,
5 local layers of window 16 per global one, 4:1 heads of 256 as Gemma 3
270M), ref-qwen3moe and ref-mixtral (the expert block: 16 experts top 4, 8
top 2), ref-gptoss (biases, sinks, a window of 16, YaRN, 8 biased experts
top 4); qwen3moe-bench (issue 37's mixture of experts: 16 layers, hidden
1024, 64 experts of width 512, top 8; ~1.8 GB in Q8_0) and qwen3moe-tiny,
experts as 3-D tensors, the router f32 as llama-quantize leaves it;
qwen35-0.8b (issue 47's benchmark: Qwen3.5-0.8B's Gated DeltaNet hybrid
shape, ~0.8 GB in Q8_0) and qwen35-tiny, the conv, A and dt bias f32;
gemma4-e2b (issue 48's benchmark: Gemma 4 E2B's text shape, 35 layers of
sliding heads of 256 and global heads of 512 with proportional RoPE, the
last 20 layers sharing K/V with double-wide MLPs, per-layer embeddings of
256 over 262,144 tokens; ~4.9 GB in Q8_0, 3.4 GB after `llama-quantize
--allow-requantize IN OUT Q4_K_M`, both token tables Q6_K there) and
gemma4-tiny (its layout at 5 layers of 128, for checking against
llama.cpp), rope_freqs f32, per_layer_model_proj bf16 (llama-quantize keeps
it as the converter wrote it). The metadata keys and tensor names, shapes
and order are those llama.cpp's converter writes.
"""
import argparse
import os
import struct
import sys

import numpy as np

SHAPES = {
    # n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab (0: the tokenizer's), ctx, rope
    "llama-3.2-1b": dict(n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                         n_vocab=128256, ctx=131072, rope_base=500000.0, tied=True),
    "llama-3-8b": dict(n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8,
                       n_vocab=128256, ctx=8192, rope_base=500000.0, tied=False),
    "ref": dict(n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2,
                n_vocab=0, ctx=4096, rope_base=10000.0, tied=False),
    "tiny": dict(n_layer=1, n_embd=128, n_ff=256, n_head=2, n_head_kv=1,
                 n_vocab=0, ctx=1024, rope_base=10000.0, tied=True),
    "ref-qwen3": dict(arch="qwen3", n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2,
                      head_dim=64, n_vocab=0, ctx=4096, rope_base=1000000.0, tied=False,
                      qk_norm=True, std=0.06),
    "ref-gemma2": dict(arch="gemma2", n_layer=3, n_embd=256, n_ff=512, n_head=2, n_head_kv=1,
                       head_dim=256, n_vocab=0, ctx=4096, rope_base=10000.0, tied=True,
                       post_norms=True, window=16, softcap=(2.5, 2.0), std=0.06),
    "ref-gemma3": dict(arch="gemma3", n_layer=6, n_embd=256, n_ff=512, n_head=4, n_head_kv=1,
                       head_dim=256, n_vocab=0, ctx=4096, rope_base=1000000.0, tied=True,
                       qk_norm=True, post_norms=True, window=16, std=0.06),
    # The CUDA runner's expert block against the CPU runner's: qwen3moe (q/k
    # norms, 16 experts of width 128, top 4) and Mixtral (llama with experts:
    # 8 of width 256, top 2), both with softmax gating renormalised over the k
    "ref-qwen3moe": dict(arch="qwen3moe", n_layer=2, n_embd=256, n_ff=128, n_head=4,
                         n_head_kv=2, head_dim=64, n_vocab=0, ctx=4096, rope_base=1000000.0,
                         tied=False, n_expert=16, n_expert_used=4, qk_norm=True, std=0.06),
    "ref-mixtral": dict(n_layer=2, n_embd=256, n_ff=256, n_head=4, n_head_kv=2, n_vocab=0,
                        ctx=4096, rope_base=1000000.0, tied=False, n_expert=8,
                        n_expert_used=2, std=0.06),
    # gpt-oss's layers for the CUDA runner (issue 51): q/k/v/o biases, a
    # sink logit per head, layer 0 sliding over 16 positions, YaRN (factor
    # 32 from 4,096: cos/sin scaled by 1.35), 8 biased experts of width
    # 128, top 4, softmax over the chosen, the clamped SwiGLU
    "ref-gptoss": dict(arch="gpt-oss", n_layer=2, n_embd=256, n_ff=128, n_head=4,
                       n_head_kv=2, head_dim=64, n_vocab=0, ctx=4096, rope_base=150000.0,
                       tied=False, n_expert=8, n_expert_used=4, window=16,
                       yarn=(32.0, 4096), std=0.06),
    # Qwen3-30B-A3B's blocks scaled to 2 cores (issue 37's benchmark):
    # 64 experts of width 512 (n_ff), 8 per token, q/k norms
    "qwen3moe-bench": dict(arch="qwen3moe", n_layer=16, n_embd=1024, n_ff=512, n_head=16,
                           n_head_kv=4, n_vocab=0, ctx=4096, rope_base=1000000.0,
                           tied=False, n_expert=64, n_expert_used=8, qk_norm=True),
    "qwen3moe-tiny": dict(arch="qwen3moe", n_layer=2, n_embd=128, n_ff=64, n_head=2,
                          n_head_kv=1, n_vocab=0, ctx=1024, rope_base=1000000.0,
                          tied=False, n_expert=8, n_expert_used=2, qk_norm=True),
    # Qwen3.5-0.8B's shape (issue 47's benchmark): a Gated DeltaNet hybrid,
    # three linear-attention layers then a gated full-attention one; linear
    # layers 16 key and 16 value heads of 128 (conv kernel 4), attention 8:2
    # heads of 256 with a quarter rotating (mrope sections 11/11/10), tied
    # embeddings, vocabulary 248,320
    "qwen35-0.8b": dict(arch="qwen35", n_layer=24, n_embd=1024, n_ff=3584, n_head=8,
                        n_head_kv=2, head_dim=256, n_vocab=248320, ctx=262144,
                        rope_base=10000000.0, tied=True, qk_norm=True, std=0.02,
                        ssm=dict(interval=4, nk=16, dk=128, nv=16, dv=128, conv=4,
                                 n_rot=64, sections=[11, 11, 10, 0])),
    "qwen35-tiny": dict(arch="qwen35", n_layer=4, n_embd=128, n_ff=256, n_head=2,
                        n_head_kv=1, head_dim=64, n_vocab=0, ctx=4096,
                        rope_base=10000000.0, tied=True, qk_norm=True, std=0.05,
                        ssm=dict(interval=4, nk=2, dk=32, nv=4, dv=32, conv=4,
                                 n_rot=16, sections=[3, 3, 2, 0])),
    # Gemma 4 E2B's text shape (issue 48's benchmark): 35 layers, (4 sliding
    # + 1 global) x 7, sliding heads of 256 (window 512, RoPE base 1e4),
    # global heads of 512 with proportional RoPE (a quarter of the pairs
    # rotating, base 1e6), 8 query heads, 1 K/V head, the last 20 layers
    # reading earlier layers' K/V with MLPs twice as wide (12288), per-layer
    # embeddings of 256, final soft-capping 30, tied embeddings
    "gemma4-e2b": dict(arch="gemma4", n_layer=35, n_embd=1536, n_ff=6144, n_head=8,
                       n_head_kv=1, head_dim=256, n_vocab=262144, ctx=131072,
                       rope_base=1000000.0, tied=True,
                       g4=dict(head_dim_global=512, pattern="SSSSG" * 7, window=512,
                               shared=20, ple=256, double_wide=True, partial=0.25,
                               rope_base_swa=10000.0, softcap=30.0)),
    # its layout at 5 layers of 128 (checked against llama.cpp): sliding,
    # sliding, global, then one of each reading layers 1's and 2's K/V;
    # weights of std 0.3 so that the logits spread over a few nats
    "gemma4-tiny": dict(arch="gemma4", n_layer=5, n_embd=128, n_ff=256, n_head=4,
                        n_head_kv=1, head_dim=32, n_vocab=0, ctx=4096,
                        rope_base=1000000.0, tied=True, std=0.3,
                        g4=dict(head_dim_global=64, pattern="SSGSG", window=16,
                                shared=2, ple=32, double_wide=True, partial=0.25,
                                rope_base_swa=10000.0, softcap=30.0)),
}
GGML_F32, GGML_Q8_0, GGML_BF16 = 0, 8, 30
FILE_TYPE = {"f32": 0, "bf16": 32, "q8_0": 7}   # general.file_type (LlamaFileType)
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = \
    range(13)
SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
          T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
ALIGN = 32
POOL = (1 << 24) + 43
TOKEN_UNUSED = 5
# Tensors kept in f32 whatever the type (as llama-quantize leaves them):
# norms, the router, a Gated DeltaNet layer's conv, A and dt bias, Gemma 4's
# RoPE factors, gpt-oss's biases and sinks; "bf16" ones (Gemma 4's per_layer_model_proj, which
# llama-quantize keeps as the converter wrote it) in bf16.
F32_KINDS = ("norm", "router", "ssm_a", "conv", "bias", "rope_freqs", "sink")
CHUNK = 1 << 24                         # elements encoded at a time (RAM)


# ---- reading metadata -----------------------------------------------------------
class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.b = f.read(64 << 20)   # metadata comes first; 64 MB is plenty
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.o:self.o + n].decode("utf-8", "surrogateescape")
        self.o += n
        return s

    def value(self, t):
        if t == T_STR:
            return self.string()
        if t == T_ARR:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def read_kv(path):
    """[(key, type, value)] of a GGUF (arrays as (elem_type, list))."""
    r = Reader(path)
    if r.b[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    r.o = 4
    ver, _n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if ver < 2:
        sys.exit(f"{path}: GGUF v{ver} unsupported")
    out = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        out.append((k, t, r.value(t)))
    return out


# ---- writing --------------------------------------------------------------------
def enc_str(s):
    b = s.encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(b)) + b


def enc_value(t, v):
    if t == T_STR:
        return enc_str(v)
    if t == T_ARR:
        et, items = v
        head = struct.pack("<IQ", et, len(items))
        if et in SCALAR:
            return head + np.asarray(items, dtype=np.dtype(SCALAR[et])).tobytes()
        return head + b"".join(enc_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def write_gguf(path, kvs, tensors, data_iter):
    """kvs: [(key, type, value)]; tensors: [(name, shape rows-first, ggml type,
    nbytes)]; data_iter yields each tensor's bytes in order (bytes, or an
    iterable of chunks of them)."""
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
        for k, t, v in kvs:
            f.write(enc_str(k) + struct.pack("<I", t) + enc_value(t, v))
        off = 0
        for name, shp, gt, nbytes in tensors:
            dims = list(reversed(shp))  # GGUF: ne[0] is the innermost
            f.write(enc_str(name) + struct.pack("<I", len(dims))
                    + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", gt, off))
            off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        f.write(b"\0" * (-f.tell() % ALIGN))
        for (name, _s, _g, nbytes), chunks in zip(tensors, data_iter):
            got = 0
            for raw in ([chunks] if isinstance(chunks, bytes) else chunks):
                f.write(raw)
                got += len(raw)
            if got != nbytes:
                sys.exit(f"internal: {name} has {got} bytes, want {nbytes}")
            f.write(b"\0" * (-nbytes % ALIGN))


# ---- deterministic weights ------------------------------------------------------
def splitmix(idx, seed):
    with np.errstate(over="ignore"):
        z = idx.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


_pools = {}


def pool(seed):
    """POOL uniform values in [-1, 1), float32."""
    if seed not in _pools:
        z = splitmix(np.arange(POOL, dtype=np.uint64), seed)
        _pools[seed] = ((z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -23)
                        - np.float32(1.0))
    return _pools[seed]


def name_hash(name):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def random_tensor(name, shp, seed, std):
    p = pool(seed)
    n = int(np.prod(shp))
    start = name_hash(name) % POOL
    idx = (np.arange(n, dtype=np.int64) + start) % POOL if n <= POOL else None
    x = p[idx] if idx is not None else np.resize(np.roll(p, -start), n)
    return (x * np.float32(std * 3.0 ** 0.5)).reshape(shp)  # uniform with that std


def random_rows(name, shp, seed, std, r0, r1):
    """Rows r0..r1 of random_tensor(name, shp, ...) seen as (-1, shp[-1]):
    the same values, without the whole tensor in memory."""
    p = pool(seed)
    cols = shp[-1]
    start = name_hash(name) % POOL
    idx = (np.arange(r0 * cols, r1 * cols, dtype=np.int64) + start) % POOL
    return (p[idx] * np.float32(std * 3.0 ** 0.5)).reshape(r1 - r0, cols)


def to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return r.astype(np.uint16)


def bf16_to_f32(b):
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_q8_0(x):
    """Blocks of 32 along each row: fp16 d = amax/127, int8 q = round(x/d)."""
    x = x.reshape(-1, x.shape[-1])
    rows, cols = x.shape
    b = x.reshape(rows, cols // 32, 32)
    d = (np.abs(b).max(axis=2) / 127.0).astype(np.float16)
    df = d.astype(np.float32)[..., None]
    q = np.where(df > 0, np.round(b / np.where(df > 0, df, 1)), 0).astype(np.int8)
    out = np.empty((rows, cols // 32, 34), dtype=np.uint8)
    out[..., :2] = d.view(np.uint8).reshape(rows, cols // 32, 2)
    out[..., 2:] = q.view(np.uint8)
    return out


def from_q8_0(raw, rows, cols):
    b = raw.reshape(rows, cols // 32, 34)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    return (b[..., 2:].view(np.int8).astype(np.float32) * d).reshape(rows, cols)


def geometry(shape, n_tok):
    s = dict(SHAPES[shape])
    s["n_vocab"] = max(s["n_vocab"], n_tok)
    s.setdefault("head_dim", s["n_embd"] // s["n_head"])
    s.setdefault("arch", "llama")
    return s


def ffn_plan(s, b):
    E, F, X = s["n_embd"], s["n_ff"], s.get("n_expert", 0)
    if not X:
        return [(b + "ffn_gate.weight", (F, E), "w"), (b + "ffn_up.weight", (F, E), "w"),
                (b + "ffn_down.weight", (E, F), "w")]
    return [(b + "ffn_gate_inp.weight", (X, E), "router"),
            (b + "ffn_gate_exps.weight", (X, F, E), "w"),
            (b + "ffn_up_exps.weight", (X, F, E), "w"),
            (b + "ffn_down_exps.weight", (X, E, F), "w")]


def recurrent(s, i):
    """Whether layer i of a hybrid is a Gated DeltaNet layer (every
    interval-th layer is full attention)."""
    return "ssm" in s and (i + 1) % s["ssm"]["interval"] != 0


def deltanet_plan(s, b):
    """A Gated DeltaNet layer's tensors as llama.cpp's converter writes them
    (qkv projection, z gate, conv over the qkv channels, alpha/beta, A, dt
    bias, the gated output norm, the output projection), then its FFN."""
    E, m = s["n_embd"], s["ssm"]
    inner = m["nv"] * m["dv"]
    qkv = 2 * m["nk"] * m["dk"] + inner
    return [(b + "attn_norm.weight", (E,), "norm"), (b + "ssm_a", (m["nv"],), "ssm_a"),
            (b + "ssm_conv1d.weight", (qkv, m["conv"]), "conv"),
            (b + "ssm_dt.bias", (m["nv"],), "bias"),
            (b + "ssm_alpha.weight", (m["nv"], E), "w"), (b + "ssm_beta.weight", (m["nv"], E), "w"),
            (b + "attn_qkv.weight", (qkv, E), "w"), (b + "attn_gate.weight", (inner, E), "w"),
            (b + "ssm_norm.weight", (m["dv"],), "norm"),
            (b + "ssm_out.weight", (E, inner), "w")] + ffn_plan(s, b) + [
            (b + "post_attention_norm.weight", (E,), "norm")]


def g4_layer(s, i):
    """Gemma 4 layer i: (sliding, head size, FFN width, shares K/V)."""
    g = s["g4"]
    swa = g["pattern"][i] == "S"
    shared = i >= s["n_layer"] - g["shared"]
    ff = s["n_ff"] * (2 if g["double_wide"] and shared else 1)
    return swa, s["head_dim"] if swa else g["head_dim_global"], ff, shared


def gemma4_plan(s):
    """Gemma 4's tensors as llama.cpp's converter writes them (the order of
    a converted checkpoint): rope_freqs for the global layers, the token and
    per-layer token tables, per layer the sandwich norms, the layer output
    scale, the GeGLU, the per-layer input gate and projection, the q/k
    norms and projections (none for K/V in the shared layers), then the
    per-layer model projection and its norm; tied output."""
    g, E, L, P = s["g4"], s["n_embd"], s["n_layer"], s["g4"]["ple"]
    V, nh, nkv = s["n_vocab"], s["n_head"], s["n_head_kv"]
    out = [("rope_freqs.weight", (g["head_dim_global"] // 2,), "rope_freqs"),
           ("token_embd.weight", (V, E), "w"), ("per_layer_token_embd.weight", (V, L * P), "w")]
    for i in range(L):
        b = f"blk.{i}."
        _swa, hd, ff, shared = g4_layer(s, i)
        out += [(b + "attn_norm.weight", (E,), "norm"),
                (b + "layer_output_scale.weight", (1,), "norm"),
                (b + "ffn_down.weight", (E, ff), "w"), (b + "ffn_gate.weight", (ff, E), "w"),
                (b + "ffn_up.weight", (ff, E), "w"), (b + "inp_gate.weight", (P, E), "w"),
                (b + "proj.weight", (E, P), "w"),
                (b + "post_attention_norm.weight", (E,), "norm"),
                (b + "post_ffw_norm.weight", (E,), "norm"), (b + "post_norm.weight", (E,), "norm"),
                (b + "ffn_norm.weight", (E,), "norm")]
        if not shared:
            out += [(b + "attn_k_norm.weight", (hd,), "norm"),
                    (b + "attn_k.weight", (nkv * hd, E), "w")]
        out += [(b + "attn_output.weight", (E, nh * hd), "w"),
                (b + "attn_q_norm.weight", (hd,), "norm"), (b + "attn_q.weight", (nh * hd, E), "w")]
        if not shared:
            out.append((b + "attn_v.weight", (nkv * hd, E), "w"))
    return out + [("output_norm.weight", (E,), "norm"),
                  ("per_layer_model_proj.weight", (L * P, E), "bf16"),
                  ("per_layer_proj_norm.weight", (P,), "norm")]


def gptoss_plan(s, b):
    """A gpt-oss layer's tensors after its projections, as llama.cpp's
    converter writes them: the q/k/v/o biases, the sinks, the FFN's norm
    (post_attention_norm), the router and experts, their biases."""
    E, F, X = s["n_embd"], s["n_ff"], s["n_expert"]
    q, kv = s["n_head"] * s["head_dim"], s["n_head_kv"] * s["head_dim"]
    return [(b + "attn_q.bias", (q,), "bias"), (b + "attn_k.bias", (kv,), "bias"),
            (b + "attn_v.bias", (kv,), "bias"), (b + "attn_output.bias", (E,), "bias"),
            (b + "attn_sinks.weight", (s["n_head"],), "sink"),
            (b + "post_attention_norm.weight", (E,), "norm")] + ffn_plan(s, b) + [
            (b + "ffn_gate_inp.bias", (X,), "bias"), (b + "ffn_gate_exps.bias", (X, F), "bias"),
            (b + "ffn_up_exps.bias", (X, F), "bias"), (b + "ffn_down_exps.bias", (X, E), "bias")]


def plan(s):
    """(name, shape, kind) in file order; q/k are in GGUF (llama.cpp) order."""
    if s["arch"] == "gemma4":
        return gemma4_plan(s)
    E, hd = s["n_embd"], s["head_dim"]
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd
    out = [("token_embd.weight", (s["n_vocab"], E), "w")]
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        if recurrent(s, i):
            out += deltanet_plan(s, b)
            continue
        if "ssm" in s:   # gated attention: the query projection carries a gate per head
            out += [(b + "attn_norm.weight", (E,), "norm"), (b + "attn_q.weight", (2 * q, E), "w"),
                    (b + "attn_k.weight", (kv, E), "w"), (b + "attn_v.weight", (kv, E), "w"),
                    (b + "attn_output.weight", (E, q), "w"),
                    (b + "attn_q_norm.weight", (hd,), "norm"),
                    (b + "attn_k_norm.weight", (hd,), "norm")] + ffn_plan(s, b) + [
                    (b + "post_attention_norm.weight", (E,), "norm")]
            continue
        out += [(b + "attn_norm.weight", (E,), "norm"), (b + "attn_q.weight", (q, E), "w"),
                (b + "attn_k.weight", (kv, E), "w"), (b + "attn_v.weight", (kv, E), "w"),
                (b + "attn_output.weight", (E, q), "w")]
        if s["arch"] == "gpt-oss":
            out += gptoss_plan(s, b)
            continue
        out += [(b + "ffn_norm.weight", (E,), "norm")] + ffn_plan(s, b)
        if s.get("qk_norm"):
            out += [(b + "attn_q_norm.weight", (hd,), "norm"),
                    (b + "attn_k_norm.weight", (hd,), "norm")]
        if s.get("post_norms"):
            out += [(b + "post_attention_norm.weight", (E,), "norm"),
                    (b + "post_ffw_norm.weight", (E,), "norm")]
    out.append(("output_norm.weight", (E,), "norm"))
    if not s["tied"]:
        out.append(("output.weight", (s["n_vocab"], E), "w"))
    return out


def rope_freqs(s):
    """Proportional RoPE as llama.cpp's converter writes it: factor 1 for
    the rotated pairs (partial of them), 1e30 for the others."""
    g = s["g4"]
    half = g["head_dim_global"] // 2
    n_rot = int(g["head_dim_global"] * g["partial"] / 2)
    return np.array([1.0] * n_rot + [1e30] * (half - n_rot), dtype=np.float32)


def tensor_value(name, shp, kind, seed, std, s=None):
    if kind == "rope_freqs":
        return rope_freqs(s)
    if kind == "sink":  # logits of the scores' size, so the sink takes a real share
        return random_tensor(name, shp, seed, 1.0)
    if kind == "norm":  # near 1, not exactly, so a wrong norm weight shows
        return 1.0 + random_tensor(name, shp, seed, 0.1)
    if kind == "ssm_a":  # A = -exp(A_log), A_log near 0: a decay per step near exp(-0.7)
        return -np.exp(random_tensor(name, shp, seed, 0.5))
    if kind == "conv":   # a short causal filter that mostly passes the current token
        x = random_tensor(name, shp, seed, 0.2)
        x[:, -1] += 1.0
        return x
    return random_tensor(name, shp, seed, std)


def ggml_type(kind, wtype):
    if kind in F32_KINDS or wtype == "f32":
        return GGML_F32
    return GGML_Q8_0 if wtype == "q8_0" and kind != "bf16" else GGML_BF16


def encode(x, kind, wtype):
    gt = ggml_type(kind, wtype)
    if gt == GGML_F32:
        return gt, x.astype(np.float32).tobytes()
    return gt, (to_q8_0(x) if gt == GGML_Q8_0 else to_bf16(x)).tobytes()


def encode_chunks(name, shp, kind, seed, std, wtype, s):
    """The tensor's bytes, CHUNK elements' worth of rows at a time for the
    big matrices (the same bytes as encode(tensor_value(...)))."""
    n = int(np.prod(shp))
    if kind not in ("w", "bf16") or n <= CHUNK:
        yield encode(tensor_value(name, shp, kind, seed, std, s), kind, wtype)[1]
        return
    rows, step = n // shp[-1], max(1, CHUNK // shp[-1])
    for r0 in range(0, rows, step):
        x = random_rows(name, shp, seed, std, r0, min(rows, r0 + step))
        yield encode(x, kind, wtype)[1]


def stored_value(x, kind, wtype):
    """The value the file holds (what a reader dequantises to), float32."""
    gt = ggml_type(kind, wtype)
    if gt == GGML_F32:
        return x.astype(np.float32)
    if gt == GGML_Q8_0:
        return from_q8_0(to_q8_0(x), *x.shape)
    return bf16_to_f32(to_bf16(x))


def unpermute(w, n_head):
    """GGUF (interleaved RoPE pairs) -> HF (rotate_half) row order."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def tensors(shape, n_tok, seed=0, std=0.02, wtype="bf16", hf=False):
    """Yield (name, float32 array as stored) for the model; hf=True gives HF
    names and layout (for transformers' LlamaForCausalLM)."""
    s = geometry(shape, n_tok)
    if hf and s["arch"] == "gemma4":
        sys.exit(f"{shape}: no HF layout for gemma4 here")
    hfname = {"token_embd.weight": "model.embed_tokens.weight",
              "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight",
              "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
              "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for name, shp, kind in plan(s):
        x = stored_value(tensor_value(name, shp, kind, seed, std, s), kind, wtype)
        if not hf:
            yield name, x
            continue
        if name in hfname:
            yield hfname[name], x
            continue
        _, i, part, _ = name.split(".")
        if part in ("attn_q", "attn_k"):
            x = unpermute(x, s["n_head"] if part == "attn_q" else s["n_head_kv"])
        yield f"model.layers.{i}.{hfname[part]}.weight", x


def tokenizer_kvs(path):
    kvs = [(k, t, v) for k, t, v in read_kv(path) if k.startswith("tokenizer.")]
    if not any(k == "tokenizer.ggml.tokens" for k, _, _ in kvs):
        sys.exit(f"{path}: no tokenizer.ggml.tokens")
    return kvs


def gemma4_kvs(shape, s, wtype):
    """The keys llama.cpp's converter writes for Gemma 4 (its
    Gemma4Model.set_gguf_parameters): the global layers' head size as
    key/value_length and rope.dimension_count (proportional RoPE rotates
    through rope_freqs), the sliding ones' as the _swa keys, the pattern
    (true: sliding), feed_forward_length per layer with double-wide MLPs."""
    a, g, L = "gemma4.", s["g4"], s["n_layer"]
    ff = [g4_layer(s, i)[2] for i in range(L)]
    hd, hdg = s["head_dim"], g["head_dim_global"]
    return [("general.architecture", T_STR, "gemma4"), ("general.name", T_STR, f"random-{shape}"),
            (a + "block_count", T_U32, L), (a + "context_length", T_U32, s["ctx"]),
            (a + "embedding_length", T_U32, s["n_embd"]),
            (a + "feed_forward_length", T_ARR, (T_I32, ff)) if g["double_wide"]
            else (a + "feed_forward_length", T_U32, s["n_ff"]),
            (a + "attention.head_count", T_U32, s["n_head"]),
            (a + "attention.head_count_kv", T_U32, s["n_head_kv"]),
            (a + "rope.freq_base", T_F32, s["rope_base"]),
            (a + "rope.freq_base_swa", T_F32, g["rope_base_swa"]),
            (a + "attention.layer_norm_rms_epsilon", T_F32, 1e-6),
            (a + "attention.key_length", T_U32, hdg), (a + "attention.value_length", T_U32, hdg),
            ("general.file_type", T_U32, FILE_TYPE[wtype]),
            (a + "final_logit_softcapping", T_F32, g["softcap"]),
            (a + "attention.sliding_window", T_U32, g["window"]),
            (a + "attention.shared_kv_layers", T_U32, g["shared"]),
            (a + "embedding_length_per_layer_input", T_U32, g["ple"]),
            (a + "attention.sliding_window_pattern", T_ARR,
             (T_BOOL, [c == "S" for c in g["pattern"]])),
            (a + "attention.key_length_swa", T_U32, hd),
            (a + "attention.value_length_swa", T_U32, hd),
            (a + "rope.dimension_count", T_U32, hdg), (a + "rope.dimension_count_swa", T_U32, hd),
            ("general.quantization_version", T_U32, 2)]


def model_kvs(shape, s, tok, wtype):
    if s["arch"] == "gemma4":
        return gemma4_kvs(shape, s, wtype) + padded_tokenizer(s, tok)
    a = s["arch"] + "."
    kvs = [("general.architecture", T_STR, s["arch"]), ("general.name", T_STR, f"random-{shape}"),
           ("general.file_type", T_U32, FILE_TYPE[wtype]),
           (a + "block_count", T_U32, s["n_layer"]), (a + "context_length", T_U32, s["ctx"]),
           (a + "embedding_length", T_U32, s["n_embd"]),
           (a + "feed_forward_length", T_U32, s["n_ff"]),
           (a + "attention.head_count", T_U32, s["n_head"]),
           (a + "attention.head_count_kv", T_U32, s["n_head_kv"]),
           (a + "rope.freq_base", T_F32, s["rope_base"]),
           (a + "rope.dimension_count", T_U32, s["head_dim"]),
           (a + "attention.layer_norm_rms_epsilon", T_F32, 1e-5),
           (a + "vocab_size", T_U32, s["n_vocab"])]
    if s.get("n_expert"):
        kvs += [(a + "expert_count", T_U32, s["n_expert"]),
                (a + "expert_used_count", T_U32, s["n_expert_used"]),
                (a + "expert_feed_forward_length", T_U32, s["n_ff"])]
    if "ssm" not in s and (s["head_dim"] != s["n_embd"] // s["n_head"] or s.get("n_expert")):
        kvs += [(a + "attention.key_length", T_U32, s["head_dim"]),
                (a + "attention.value_length", T_U32, s["head_dim"])]
    if s.get("window"):
        kvs.append((a + "attention.sliding_window", T_U32, s["window"]))
    if s.get("yarn"):
        kvs += [(a + "rope.scaling.type", T_STR, "yarn"),
                (a + "rope.scaling.factor", T_F32, s["yarn"][0]),
                (a + "rope.scaling.original_context_length", T_U32, s["yarn"][1])]
    if "ssm" in s:
        m = s["ssm"]
        kvs = [kv for kv in kvs if kv[0] != a + "rope.dimension_count"]
        kvs += [(a + "attention.key_length", T_U32, s["head_dim"]),
                (a + "attention.value_length", T_U32, s["head_dim"]),
                (a + "rope.dimension_count", T_U32, m["n_rot"]),
                (a + "rope.dimension_sections", T_ARR, (T_I32, m["sections"])),
                (a + "ssm.conv_kernel", T_U32, m["conv"]),
                (a + "ssm.state_size", T_U32, m["dk"]),
                (a + "ssm.group_count", T_U32, m["nk"]),
                (a + "ssm.time_step_rank", T_U32, m["nv"]),
                (a + "ssm.inner_size", T_U32, m["nv"] * m["dv"]),
                (a + "full_attention_interval", T_U32, m["interval"]),
                (a + "attention.recurrent_layers", T_ARR,
                 (T_BOOL, [recurrent(s, i) for i in range(s["n_layer"])]))]
        kvs = [(k, t, 1e-6 if k == a + "attention.layer_norm_rms_epsilon" else v)
               for k, t, v in kvs]
    if s.get("softcap"):
        kvs += [(a + "attn_logit_softcapping", T_F32, s["softcap"][0]),
                (a + "final_logit_softcapping", T_F32, s["softcap"][1])]
    return kvs + padded_tokenizer(s, tok)


def padded_tokenizer(s, tok):
    """The tokenizer's keys, its vocabulary padded to the shape's."""
    kvs = []
    for k, t, v in tok:
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            et, items = v
            pad = s["n_vocab"] - len(items)
            items = list(items) + ([f"<|random_pad_{i}|>" for i in range(pad)]
                                   if et == T_STR else [TOKEN_UNUSED] * pad)
            v = (et, items)
        elif k == "tokenizer.ggml.scores":
            et, items = v
            v = (et, list(items) + [0.0] * (s["n_vocab"] - len(items)))
        kvs.append((k, t, v))
    return kvs


def n_tokens(tok):
    return next(len(v[1]) for k, _, v in tok if k == "tokenizer.ggml.tokens")


def cmd_model(a):
    tok = tokenizer_kvs(a.tokenizer)
    s = geometry(a.shape, n_tokens(tok))
    specs, order = [], plan(s)
    for name, shp, kind in order:
        gt = ggml_type(kind, a.type)
        if gt == GGML_Q8_0 and shp[-1] % 32:
            sys.exit(f"{name}: {shp[-1]} columns is not a multiple of 32 (Q8_0)")
        n = int(np.prod(shp))
        nbytes = n * 4 if gt == GGML_F32 else (n // 32 * 34 if gt == GGML_Q8_0 else n * 2)
        specs.append((name, shp, gt, nbytes))
    std = a.std if a.std is not None else s.get("std", 0.02)
    data = (encode_chunks(n, shp, k, a.seed, std, a.type, s) for n, shp, k in order)
    tmp = a.out + ".part"
    write_gguf(tmp, model_kvs(a.shape, s, tok, a.type), specs, data)
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.shape} {a.type}, {len(specs)} tensors, vocab {s['n_vocab']}, "
          f"{os.path.getsize(a.out) / 2**30:.2f} GiB")


def cmd_tokenizer(a):
    tok = tokenizer_kvs(a.src)
    write_gguf(a.out, [("general.architecture", T_STR, "tokenizer")] + tok, [], iter(()))
    print(f"{a.out}: {len(tok)} tokenizer keys, {n_tokens(tok)} tokens, "
          f"{os.path.getsize(a.out) / 2**20:.2f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model", help="write a random-weight model")
    m.add_argument("shape", choices=sorted(SHAPES))
    m.add_argument("out")
    m.add_argument("--tokenizer", required=True, help="GGUF whose tokenizer.* keys are copied")
    m.add_argument("--type", choices=["f32", "bf16", "q8_0"], default="bf16",
                   help="the weight matrices' type (f32: for checks without rounding)")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--std", type=float, default=None,
                   help="weights' standard deviation (default: the shape's, else 0.02)")
    t = sub.add_parser("tokenizer", help="copy a GGUF's tokenizer.* keys into a small file")
    t.add_argument("src")
    t.add_argument("out")
    a = ap.parse_args()
    (cmd_model if a.cmd == "model" else cmd_tokenizer)(a)


if __name__ == "__main__":
    main()

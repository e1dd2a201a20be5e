#!/usr/bin/env python3
"""hf_bench.py - the HF transformers peer of bench_cuda_runner: the same
random weights (make_random_gguf.tensors, HF layout, bf16) in a
LlamaForCausalLM on the GPU, greedy `generate` of GEN new tokens (EOS
ignored) after PROMPT random ids, for each batch size. One JSON line per
batch: prefill (one forward of the batch) and decode tokens/s.

usage: hf_bench.py SHAPE --tokenizer TOK.gguf [--batches 1,64,256]
                   [--prompt 128] [--gen 128] [--type bf16|q8_0]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_random_gguf as mrg  # noqa: E402


def build(shape, n_tok, wtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    s = mrg.geometry(shape, n_tok)
    cfg = LlamaConfig(vocab_size=s["n_vocab"], hidden_size=s["n_embd"],
                      intermediate_size=s["n_ff"], num_hidden_layers=s["n_layer"],
                      num_attention_heads=s["n_head"], num_key_value_heads=s["n_head_kv"],
                      max_position_embeddings=s["ctx"], rms_norm_eps=1e-5,
                      rope_theta=s["rope_base"], tie_word_embeddings=s["tied"],
                      bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    sd = model.state_dict()
    t0 = time.monotonic()
    for name, x in mrg.tensors(shape, n_tok, wtype=wtype, hf=True):
        sd[name].copy_(torch.from_numpy(x).to(torch.bfloat16))
    if s["tied"]:
        model.tie_weights()
    model.eval()
    return model, s, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(mrg.SHAPES))
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--type", choices=["bf16", "q8_0"], default="bf16")
    a = ap.parse_args()
    n_tok = mrg.n_tokens(mrg.tokenizer_kvs(a.tokenizer))
    model, s, load_s = build(a.shape, n_tok, a.type)
    g = torch.Generator().manual_seed(1)
    for b in (int(x) for x in a.batches.split(",")):
        ids = torch.randint(0, min(s["n_vocab"], 32000), (b, a.prompt), generator=g).cuda()
        with torch.no_grad():
            model(ids[:, :8])                      # warm-up
            torch.cuda.synchronize()
            t0 = time.monotonic()
            model(ids, logits_to_keep=1)           # as generate: the last row's logits
            torch.cuda.synchronize()
            t_pf = time.monotonic() - t0
            t0 = time.monotonic()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=a.gen, pad_token_id=0)  # no EOS: all GEN
            torch.cuda.synchronize()
            t_all = time.monotonic() - t0
        gen = out.shape[1] - a.prompt
        t_dec = max(t_all - t_pf, 1e-9)
        print(json.dumps({"runner": "hf-transformers", "shape": a.shape, "type": a.type,
                          "seqs": b, "prompt": a.prompt, "gen": gen, "load_s": load_s,
                          "prefill_ms": t_pf * 1e3, "prefill_tok_s": b * a.prompt / t_pf,
                          "generate_ms": t_all * 1e3,
                          "decode_tok_s": b * (gen - 1) / t_dec,
                          "decode_step_ms": t_dec * 1e3 / max(gen - 1, 1),
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()

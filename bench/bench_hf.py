#!/usr/bin/env python3
"""bench_hf.py - a Hugging Face checkpoint against a GGUF of the same weights:
load time (warm page cache) and the CPU runner's prefill and decode speed of
a bf16 checkpoint quantised at load vs the GGUF of that type, with
llama-cpp-python on the same GGUF beside them. Alternating runs, medians,
optionally appended (--append) to bench/results/history/cpu.md, the log
behind BENCHMARKS.md's CPU table.

The checkpoint is the GGUF's weights written out as bf16 by
tests/fixtures/hf_checkpoints.py (dequantised by gguf); the GGUF of the type
holds those same bf16 weights, quantised by gguf-py (q8_0, q4_0, q4_1,
q5_0, q5_1: ggml's reference quantisers, so the same bytes parley writes at
load) or by llama.cpp's quantize (q4_k, q6_k: llama.cpp's own mix of types).

usage: /work/ref/venv/bin/python bench/bench_hf.py [--model GGUF] [--type q8_0]
           [--threads 2] [--prompt 512] [--decode 128] [--reps 3] [--work DIR] [--append]
Needs build/ (ninja -C build: tests/hf_tool; bench_cpu_runner is compiled
here) and numpy, gguf, safetensors, tokenizers, llama_cpp (the reference venv).
"""
import argparse
import datetime
import os
import re
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import bench_cpu  # noqa: E402
import hf_checkpoints as hc  # noqa: E402

TOOL = os.path.join(ROOT, "build", "tests", "hf_tool")
FTYPES = {"q4_k": 15, "q6_k": 18}          # llama.cpp: Q4_K_M, Q6_K
LLAMA_LOAD = r"""
import sys, time
from llama_cpp import Llama
t = time.perf_counter()
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=int(sys.argv[2]), verbose=False)
print(f"{time.perf_counter() - t:.4f}")
"""


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None):
    """Wall seconds the command reports (or took), and its CPU seconds."""
    c0, t0 = child_cpu(), time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    wall = time.perf_counter() - t0
    m = re.search(r"^(\d+\.\d+)$", out.strip(), re.M)
    return (float(m.group(1)) if m else wall), child_cpu() - c0


def write_typed_gguf(src_gguf, model, qtype, out):
    """The checkpoint's weights (bf16 values) as a GGUF of qtype: metadata
    from the source GGUF, matrices quantised by gguf-py or llama.cpp."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, quants
    r = GGUFReader(src_gguf)
    direct = qtype not in FTYPES
    t = GGMLQuantizationType[qtype.upper()] if direct else None
    path = out if direct else out + ".f32"
    w = GGUFWriter(path, "llama")
    for k, f in r.fields.items():
        if not k.startswith("GGUF.") and k not in ("general.architecture", "general.file_type"):
            w.add_key_value(k, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    c = model.config
    for name, x in model.weights.items():
        y = x
        if "q_proj" in name:
            y = hc.permute_rows(x, c["num_attention_heads"])
        elif "k_proj" in name:
            y = hc.permute_rows(x, c["num_key_value_heads"])
        y = y.astype(np.float32)
        g = hc.gguf_name(name, False)
        if direct and y.ndim == 2 and y.shape[1] % 32 == 0:
            w.add_tensor(g, quants.quantize(y, t), raw_dtype=t)
        else:
            w.add_tensor(g, y)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if not direct:
        import llama_cpp
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = FTYPES[qtype]
        if llama_cpp.llama_model_quantize(path.encode(), out.encode(), p) != 0:
            sys.exit(f"llama.cpp could not quantize {path} to {qtype}")
        os.remove(path)


def prepare(a):
    base = os.path.splitext(os.path.basename(a.model))[0]
    ckpt = os.path.join(a.work, base + "-bf16")
    gguf = os.path.join(a.work, f"{base}-{a.type}.gguf")
    os.makedirs(a.work, exist_ok=True)
    if not os.path.exists(os.path.join(ckpt, "model.safetensors")) or not os.path.exists(gguf):
        print(f"writing {ckpt} and {gguf} ...", file=sys.stderr)
        m = hc.from_gguf(a.model, ckpt, "bf16")
        write_typed_gguf(a.model, m, a.type, gguf)
    return ckpt, gguf


def runner(exe, model, run, env):
    """bench_cpu_runner's figures on model (a GGUF or a checkpoint)."""
    return bench_cpu.parse(subprocess.run([exe, model, *run], check=True, env=env,
                                          capture_output=True, text=True).stdout)


def median(xs, k=None):
    return statistics.median(x if k is None else x[k] for x in xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=bench_cpu.DEFAULT_MODEL)
    ap.add_argument("--type", default="q8_0", choices=["q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                                       "q4_k", "q6_k"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/parley_bench_hf")
    ap.add_argument("--append", action="store_true")
    a = ap.parse_args()
    exe = bench_cpu.build_bench()
    ckpt, gguf = prepare(a)
    env = dict(os.environ, BENCH_KV_F16="1", BENCH_WEIGHT_TYPE=a.type)
    nt = str(a.threads)
    loads, speeds = [], []
    load0 = os.getloadavg()[0]
    for cmd in ([TOOL, "load", ckpt, a.type], [TOOL, "load", gguf]):   # warm the page cache
        timed(cmd)
    for i in range(a.reps):
        loads.append((timed([TOOL, "load", ckpt, a.type]), timed([TOOL, "load", gguf]),
                      timed([sys.executable, "-c", LLAMA_LOAD, gguf, nt])))
        run = [str(a.prompt), str(a.decode), nt, "1000000000"]
        speeds.append((runner(exe, ckpt, run, env), runner(exe, gguf, run, env),
                       bench_cpu.parse(bench_cpu.run([sys.executable, "-c",
                                                      bench_cpu.LLAMA_SNIPPET, gguf, nt,
                                                      str(a.prompt), str(a.decode)]))))
        print(f"run {i}: load (s, CPU s) checkpoint {loads[-1][0]}, GGUF {loads[-1][1]}, "
              f"llama.cpp {loads[-1][2]}; prefill/decode tok/s checkpoint {speeds[-1][0][:2]}, "
              f"GGUF {speeds[-1][1][:2]}, llama.cpp {speeds[-1][2][:2]}", file=sys.stderr)
    load1 = os.getloadavg()[0]
    lw = [median([x[j][0] for x in loads]) for j in range(3)]
    lc = [median([x[j][1] for x in loads]) for j in range(3)]
    pp = [median([x[j][0] for x in speeds]) for j in range(3)]
    dd = [median([x[j][1] for x in speeds]) for j in range(3)]
    # per CPU-second: steadier than wall time when other jobs share the cores
    pc = [a.prompt / median([x[j][2] for x in speeds]) for j in range(3)]
    dc = [a.decode / median([x[j][3] for x in speeds]) for j in range(3)]
    size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt)) / 2 ** 20
    cmd = (f"/work/ref/venv/bin/python bench/bench_hf.py --model {a.model} --type {a.type} "
           f"--threads {a.threads} --prompt {a.prompt} --decode {a.decode} --reps {a.reps}")
    text = f"""
### Hugging Face checkpoint vs GGUF ({datetime.date.today()})

Command: `{cmd}`. Checkpoint: {os.path.basename(ckpt)} (bf16, {size:.0f} MiB), quantised at
load to {a.type}; GGUF: {os.path.basename(gguf)} (the same weights). Machine:
{bench_cpu.cpu_model()} (load average {load0:.1f} -> {load1:.1f}). llama.cpp:
{bench_cpu.llama_info()}. Medians of {a.reps} alternating runs, warm page cache.

| measure | checkpoint | GGUF | llama.cpp (GGUF) | checkpoint / GGUF |
|---|---|---|---|---|
| load, wall s | {lw[0]:.3f} | {lw[1]:.3f} | {lw[2]:.3f} | {lw[0] / lw[1]:.1f}x |
| load, CPU s | {lc[0]:.3f} | {lc[1]:.3f} | {lc[2]:.3f} | {lc[0] / max(lc[1], 1e-3):.1f}x |
| prefill tok/s ({a.prompt} tokens, {a.threads} threads) | {pp[0]:.1f} | {pp[1]:.1f} | {pp[2]:.1f} | {pp[0] / pp[1]:.2f}x |
| decode tok/s ({a.decode} tokens) | {dd[0]:.1f} | {dd[1]:.1f} | {dd[2]:.1f} | {dd[0] / dd[1]:.2f}x |
| prefill tok per CPU-second | {pc[0]:.1f} | {pc[1]:.1f} | {pc[2]:.1f} | {pc[0] / pc[1]:.2f}x |
| decode tok per CPU-second | {dc[0]:.1f} | {dc[1]:.1f} | {dc[2]:.1f} | {dc[0] / dc[1]:.2f}x |
"""
    print(text)
    if a.append:
        with open(os.path.join(ROOT, "bench", "results", "history", "cpu.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()

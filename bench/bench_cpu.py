#!/usr/bin/env python3
"""bench_cpu.py - single-stream prefill and decode speed of parley's CPU runner
against llama-cpp-python on the same GGUF with the same thread count, run
alternately (median of N runs each), optionally appended (--append) to
bench/results/history/cpu.md, the log behind BENCHMARKS.md's CPU table.

usage: python3 bench/bench_cpu.py [--model M] [--threads 2] [--prompt 512]
                                  [--decode 128] [--reps 3] [--append]
The targets are issue 16's for the default model, issue 37's for a mixture
of experts (a file name with moe, gpt-oss or mixtral in it: make one with
bench/make_random_gguf.py model qwen3moe-bench), issue 32's for Gemma
(--model ~/.cache/parley/models/gemma-3-270m-q4_k_m.gguf, from
scripts/fetch_model.sh gemma3).
Needs a configured build/ (ninja -C build); compiles bench/bench_cpu_runner.c.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.environ.get(
    "PARLEY_MODEL", "/root/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")

LLAMA_SNIPPET = r"""
import resource, sys, time
from llama_cpp import Llama
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
model, nt, np_, nd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=model, n_ctx=np_ + nd + 16, n_batch=np_, n_ubatch=np_,
            n_threads=nt, n_threads_batch=nt, verbose=False)
toks = [1000 + i for i in range(np_)]
t0, c0 = time.perf_counter(), cpu()
llm.eval(toks)
t1, c1 = time.perf_counter(), cpu()
for i in range(nd):
    llm.eval([2000 + i])
t2, c2 = time.perf_counter(), cpu()
print(f"prefill_tok_s={np_ / (t1 - t0):.1f} decode_tok_s={nd / (t2 - t1):.1f} "
      f"prefill_cpu_s={c1 - c0:.3f} decode_cpu_s={c2 - c1:.3f}")
"""


def build_bench():
    subprocess.run(["ninja", "-C", "build"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    exe = os.path.join(ROOT, "build", "bench_cpu_runner")
    libs = ["build/backends/libplbackends.a", "build/schedulers/libplschedulers.a",
            "build/src/base/libplbase.a", "build/src/libplcore.a"]
    libs = [l for l in libs if os.path.exists(os.path.join(ROOT, l))]
    subprocess.run(["cc", "-O2", "-I.", "-o", exe, "bench/bench_cpu_runner.c", *libs,
                    "-lopenblas", "-ljansson", "-lpcre2-8", "-levent", "-lm", "-lpthread"], cwd=ROOT,
                   check=True)
    return exe


def kernel_path(out):
    m = re.search(r"kernel_path=(\S+)", out)
    return m.group(1) if m else "unknown"


def parse(out):
    d = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", out)}
    # parley's runner also reports its pool's hand-offs per decode step:
    # parallel runs, and ms outside arithmetic summed over the threads.
    return (d["prefill_tok_s"], d["decode_tok_s"], d["prefill_cpu_s"], d["decode_cpu_s"],
            d.get("decode_runs_per_step", 0.0), d.get("decode_outside_ms_per_step", 0.0),
            d.get("decode_ms_per_step", 0.0))


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def cpu_model():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cpuinfo
    return cpuinfo.describe()


def llama_info():
    """The SIMD features llama.cpp's CPU backend was built with."""
    out = subprocess.run([sys.executable, "-c", "import llama_cpp; "
                          "print(llama_cpp.llama_print_system_info().decode())"],
                         capture_output=True, text=True).stdout
    feats = [k.strip() for k, _, v in (p.partition("=") for p in out.split("|"))
             if v.strip() == "1"]
    return "built with " + (" ".join(feats) if feats else "(unknown features)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--kv-f32", action="store_true",
                    help="parley's K/V cache in floats (parley serve --no-kv-cache-f16); "
                         "the default is halves, as parley serve and llama.cpp keep it")
    ap.add_argument("--no-batch-invariant", action="store_true",
                    help="f32 GEMM from 20 rows (parley serve --no-batch-invariant); the "
                         "default measures what parley serves: quantised kernels at every "
                         "row count")
    a = ap.parse_args()
    exe = build_bench()
    os.environ["BENCH_KV_F16"] = "0" if a.kv_f32 else "1"
    ours, ref = [], []
    args = [a.model, str(a.threads), str(a.prompt), str(a.decode)]
    load0 = os.getloadavg()[0]
    for i in range(a.reps):
        gemm_min_rows = "20" if a.no_batch_invariant else "1000000000"
        out = run([exe, a.model, str(a.prompt), str(a.decode), str(a.threads), gemm_min_rows])
        ours.append(parse(out))
        path = kernel_path(out)
        ref.append(parse(run([sys.executable, "-c", LLAMA_SNIPPET, *args])))
        print(f"run {i}: parley {ours[-1]}  llama.cpp {ref[-1][:4]} "
              "(prefill, decode tok/s; prefill, decode CPU s; parley: decode runs/step, "
              "ms outside arithmetic/step, ms/step)", file=sys.stderr)
    load1 = os.getloadavg()[0]
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    pp, pd, lp, ld = med(ours, 0), med(ours, 1), med(ref, 0), med(ref, 1)
    # Throughput per CPU second: steadier than wall time when other jobs
    # share the cores (it still counts spin-waiting threads, on both sides).
    cp, cd = a.prompt / med(ours, 2), a.decode / med(ours, 3)
    lcp, lcd = a.prompt / med(ref, 2), a.decode / med(ref, 3)
    name = os.path.basename(a.model).lower()
    gemma, moe = "gemma" in name, any(k in name for k in ("moe", "gpt-oss", "gptoss", "mixtral"))
    t_pre, t_dec = ((">= 1.0x (issue 32)", ">= 1.2x (issue 32)") if gemma else
                    (">= 1.0x (issue 37)", ">= 1.0x (issue 37)") if moe else
                    (">= 1.2x (issue 16)", ">= 1.0x (issue 16)"))
    cmd = (f"python3 bench/bench_cpu.py --model {a.model} --threads {a.threads} "
           f"--prompt {a.prompt} "
           f"--decode {a.decode} --reps {a.reps}"
           + (" --no-batch-invariant" if a.no_batch_invariant else "")
           + (" --kv-f32" if a.kv_f32 else ""))
    text = f"""
### CPU runner vs llama-cpp-python ({datetime.date.today()})

Command: `{cmd}`. Model: {os.path.basename(a.model)}. Machine: {cpu_model()}
(load average {load0:.1f} -> {load1:.1f}). parley's kernel path: {path}. llama.cpp: {llama_info()}.
Figures are medians of {a.reps} alternating runs; ratios matter more than absolutes.

| measure | parley | llama.cpp | ratio | target |
|---|---|---|---|---|
| prefill tok/s ({a.prompt}-token prompt, {a.threads} threads) | {pp:.1f} | {lp:.1f} | {pp / lp:.2f}x | {t_pre} |
| decode tok/s ({a.decode} tokens, {a.threads} threads) | {pd:.1f} | {ld:.1f} | {pd / ld:.2f}x | {t_dec} |
| prefill tok per CPU-second | {cp:.1f} | {lcp:.1f} | {cp / lcp:.2f}x | |
| decode tok per CPU-second | {cd:.1f} | {lcd:.1f} | {cd / lcd:.2f}x | |

parley decode hand-offs: {med(ours, 4):.1f} pool runs per step; {med(ours, 5):.2f} ms per step
outside arithmetic, summed over the {a.threads} threads, of a {med(ours, 6):.2f} ms step.
"""
    print(text)
    if a.append:
        with open(os.path.join(ROOT, "bench", "results", "history", "cpu.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()

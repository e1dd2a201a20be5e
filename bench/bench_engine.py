#!/usr/bin/env python3
"""bench_engine.py - the in-process CPU engine against llama.cpp on the same GGUF.

Three workloads, each measured side by side in one run (medians of repeated
runs, the servers' order alternating between repetitions):

  1. throughput: 1/8/32/64 concurrent streams, each a chat request with a
     ~100-token prompt, max_tokens 64, EOS ignored, temperature 0; parley
     against llama.cpp's llama-server (--parallel N --cont-batching, the same
     thread count) and llama-cpp-python's server (which serialises requests);
  2. multi-turn conversations that re-send their history: prompt tokens served
     from the prefix cache and time to first token, prefix caching on vs off;
  3. async vs sync step pipeline at 32 streams: /status step timing.

Prints the figures and appends them to bench/results/history/cpu.md (the log
behind BENCHMARKS.md's CPU table). Not a test.
"""
import argparse
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")
LLAMA_VER = os.environ.get("LLAMA_VER", "0.3.36")    # bench/build_llama_server.sh's
LLAMA_BUILT = os.path.join(                            # where it puts the binary
    os.environ.get("LLAMA_BUILD_DIR", "/tmp/parley-llama"),
    f"llama_cpp_python-{LLAMA_VER}/vendor/llama.cpp/build/bin/llama-server")


def llama_version(path):
    """The llama-cpp-python release a llama-server binary was built from
    (from bench/build_llama_server.sh's path), or 'unknown release'."""
    m = re.search(r"llama_cpp_python-(\d+\.\d+\.\d+)", os.path.realpath(path or ""))
    return m.group(1) if m else "unknown release"
SYSTEM = "You are a helpful assistant."
WORDS = ("river mountain engine garden signal harbor market lantern window "
         "summer winter paper silver ocean forest bridge castle letter music "
         "pencil thunder valley island kitchen planet rocket station museum "
         "teacher doctor farmer painter sailor village city desert meadow "
         "careful quiet bright ancient modern gentle rapid hidden golden simple "
         "travel build paint gather measure follow explain compare describe "
         "imagine remember wander listen answer borrow carry collect").split()


# ---------------------------------------------------------------- servers --

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on 127.0.0.1; stopped by its pid."""

    def __init__(self, name, argv, port=None, ready_line=None, env=None):
        self.name, self.argv, self.port = name, argv, port
        self.log = tempfile.NamedTemporaryFile(
            prefix=f"bench_{name.split()[0]}_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=ROOT, env=env, start_new_session=True)
        self.model = None
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: see {self.log.name}")
            if ready_line and self.port is None:
                self.port = self._port_from_log(ready_line)
            if self.port and self._healthy():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{name} did not start: see {self.log.name}")

    def _port_from_log(self, marker):
        with open(self.log.name, errors="replace") as f:
            for line in f:
                if marker in line:
                    return int(line.strip().rsplit(":", 1)[1].split("/")[0])
        return None

    def _healthy(self):
        try:
            st, _ = http_json(self.port, "GET", "/health", timeout=2)
            st, body = (st, b"") if st not in (200, 404) else http_json(
                self.port, "GET", "/v1/models", timeout=2)
            if st == 200:
                self.model = json.loads(body)["data"][0]["id"]
                return True
        except (OSError, ValueError, KeyError, IndexError, http.client.HTTPException):
            pass
        return False

    def status(self):
        st, body = http_json(self.port, "GET", "/status")
        return json.loads(body)["models"][self.model] if st == 200 else None

    def cpu_s(self):
        """CPU seconds the server process has used (all its threads)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def parley_server(args, *extra):
    argv = [args.parley, "serve", "--port", "0", "--threads", str(args.threads),
            "--model", args.model, "--log-level", "warn", *extra]
    return Server("parley " + " ".join(extra), argv, ready_line="parley listening on")


def llama_server(args, slots):
    port = free_port()
    argv = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb",
            str(args.threads), "-c", str(slots * 512), "--parallel", str(slots),
            "--cont-batching", "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    return Server(f"llama-server --parallel {slots}", argv, port=port)


def llama_cpp_python_server(args):
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", args.model,
            "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
            "--n_ctx", "2048", "--host", "127.0.0.1", "--port", str(port)]
    return Server("llama-cpp-python server", argv, port=port)


# ----------------------------------------------------------------- client --

def http_json(port, method, path, body=None, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def chat(srv, messages, max_tokens, stream=False):
    """One chat completion; returns (usage, ttft_s or None, total_s, text)."""
    body = {"model": srv.model, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "min_tokens": max_tokens}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=900)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"{srv.name}: HTTP {r.status}: {r.read()[:300]!r}")
        if not stream:
            out = json.loads(r.read())
            return (out["usage"], None, time.perf_counter() - t0,
                    out["choices"][0]["message"]["content"])
        return read_stream(r, t0)
    finally:
        conn.close()


def read_stream(r, t0):
    usage, ttft, parts = None, None, []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                parts.append(piece)
    return usage, ttft, time.perf_counter() - t0, "".join(parts)


def run_parallel(fns):
    """Runs the callables on one thread each; returns their results in order."""
    res, errs = [None] * len(fns), []

    def work(i):
        try:
            res[i] = fns[i]()
        except Exception as e:  # reported after the join
            errs.append(e)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return res


def prompt_text(rng, n_words=72):
    """~100 tokens once wrapped in the chat template; unique from the first word."""
    words = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return (f"Note {rng.randrange(10**6)}: {words}. "
            "Write a short story that uses these words.")


# ------------------------------------------------------------- workloads --

def busy_s():
    """CPU seconds all processes of the machine have used (from /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    t = os.times()
    return t.user + t.system


def throughput_run(srv, conc, per_stream, max_tokens, rng):
    """conc streams, each per_stream requests back to back; output tokens/s.
    'others' is the CPU (in cores) that processes other than the server and
    this client used meanwhile: the machine's contention during the run."""
    prompts = [[prompt_text(rng) for _ in range(per_stream)] for _ in range(conc)]
    cpu0 = (busy_s(), srv.cpu_s(), own_cpu_s())

    def stream(i):
        toks = ptoks = 0
        for p in prompts[i]:
            u, _, _, _ = chat(srv, [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": p}], max_tokens)
            toks += u["completion_tokens"]
            ptoks += u["prompt_tokens"]
        return toks, ptoks
    t0 = time.perf_counter()
    out = run_parallel([lambda i=i: stream(i) for i in range(conc)])
    wall = time.perf_counter() - t0
    srv_cpu = srv.cpu_s() - cpu0[1]
    others = (busy_s() - cpu0[0]) - srv_cpu - (own_cpu_s() - cpu0[2])
    toks = sum(o[0] for o in out)
    n_req = conc * per_stream
    return {"tok_s": toks / wall, "wall": wall, "tokens": toks,
            "others": max(others, 0.0) / wall, "server_cores": srv_cpu / wall,
            "completion_per_req": toks / n_req,
            "prompt_per_req": sum(o[1] for o in out) / n_req}


def step_delta(before, after):
    """Per-step figures of the engine between two /status snapshots."""
    d = {k: after[k] - before[k] for k in ("steps", "steps_done", "rows",
                                            "decode_rows", "prefill_rows")}
    tb, ta = before["timing"], after["timing"]
    for k in ("schedule_ms", "process_ms", "execute_ms", "idle_gap_ms"):
        d[k] = ta[k] - tb[k]
    s, sd = max(d["steps"], 1), max(d["steps_done"], 1)
    d["per_step"] = {"schedule": d["schedule_ms"] / s, "process": d["process_ms"] / sd,
                     "execute": d["execute_ms"] / sd, "idle_gap": d["idle_gap_ms"] / s,
                     "rows": d["rows"] / sd}
    return d


def bench_throughput(args, rng, log, concs, results, steps):
    """Workload 1 at concs; fills results[(peer, conc)] with a list of runs and
    steps[conc] with parley's per-step figures (partial if interrupted)."""
    for conc in concs:
        per_stream = 3 if conc == 1 else 1
        for rep in range(args.reps if conc < 32 else args.reps_big):
            order = ["parley", "llama-server"]
            if rep % 2:
                order.reverse()
            for who in order:
                if who == "llama-server" and not args.llama_server:
                    continue
                srv = args.parley_srv if who == "parley" else llama_server(args, conc)
                try:
                    if who != "parley":
                        chat(srv, [{"role": "user", "content": "Hi"}], 4)  # warm-up
                    before = srv.status() if who == "parley" else None
                    r = throughput_run(srv, conc, per_stream, args.max_tokens, rng)
                    if before:
                        steps.setdefault(conc, []).append(step_delta(before, srv.status()))
                finally:
                    if who != "parley":
                        srv.stop()
                results.setdefault((who, conc), []).append(r)
                log(f"  {who:13s} conc={conc:3d} rep={rep}: {r['tok_s']:7.1f} tok/s "
                    f"({r['tokens']} tokens in {r['wall']:.1f} s, "
                    f"{r['prompt_per_req']:.0f} prompt tok/req; server used "
                    f"{r['server_cores']:.2f} cores, other processes {r['others']:.2f})")


def bench_python_peer(args, rng, log, out):
    """llama-cpp-python's server at 1 and 8 streams: does it batch?"""
    srv = llama_cpp_python_server(args)
    try:
        chat(srv, [{"role": "user", "content": "Hi"}], 4)
        for conc in (1, 8):
            r = throughput_run(srv, conc, 3 if conc == 1 else 1, args.max_tokens, rng)
            out[conc] = r
            log(f"  llama-cpp-python conc={conc}: {r['tok_s']:.1f} tok/s "
                f"({r['completion_per_req']:.0f} tokens/request)")
    finally:
        srv.stop()


def conversation(srv, rng, turns, max_tokens, system):
    msgs = [{"role": "system", "content": system}]
    rows = []
    for t in range(turns):
        msgs.append({"role": "user", "content": " ".join(
            rng.choice(WORDS) for _ in range(24)) + ". Continue the discussion."})
        u, ttft, total, text = chat(srv, msgs, max_tokens, stream=True)
        rows.append({"turn": t, "prompt": u["prompt_tokens"],
                     "completion": u["completion_tokens"],
                     "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                     "ttft": ttft, "total": total})
        msgs.append({"role": "assistant", "content": text})
    return rows


def bench_multiturn(args, rng, log, res):
    """Workload 2 on fresh servers, prefix caching on then off."""
    system = ("You are one agent in a panel discussion. " +
              " ".join(rng.choice(WORDS) for _ in range(args.system_words)) +
              ". Keep answers short and refer to what the others said.")
    for mode, extra in (("on", ()), ("off", ("--no-prefix-caching",))):
        srv = parley_server(args, *extra)
        try:
            chat(srv, [{"role": "user", "content": "Hi"}], 4)
            before = srv.status()["kv"]
            seeds = [rng.randrange(1 << 30) for _ in range(args.convs)]
            convs = run_parallel([
                lambda s=s: conversation(srv, random.Random(s), args.turns,
                                         args.turn_tokens, system) for s in seeds])
            after = srv.status()["kv"]
        finally:
            srv.stop()
        rows = [r for c in convs for r in c]
        later = [r for r in rows if r["turn"] > 0]
        first = [r for r in rows if r["turn"] == 0]
        # The most a cache can serve: what the previous turn's request held.
        ceil = sum(min(c[i - 1]["prompt"] + c[i - 1]["completion"], c[i]["prompt"])
                   for c in convs for i in range(1, len(c)))
        res[mode] = {
            "prompt_later": sum(r["prompt"] for r in later),
            "cached_later": sum(r["cached"] for r in later),
            "ceiling_later": ceil,
            "ttft_first": statistics.median(r["ttft"] for r in first),
            "ttft_later": statistics.median(r["ttft"] for r in later),
            "total_later": statistics.median(r["total"] for r in later),
            "prompt_first": statistics.median(r["prompt"] for r in first),
            "prompt_last": statistics.median(r["prompt"] for r in rows
                                             if r["turn"] == args.turns - 1),
            "kv_queries": after["prefix_queries"] - before["prefix_queries"],
            "kv_hits": after["prefix_hits"] - before["prefix_hits"],
        }
        m = res[mode]
        log(f"  prefix caching {mode}: round 2+ cached {m['cached_later']}/"
            f"{m['prompt_later']} prompt tokens; TTFT round 1 {m['ttft_first']*1e3:.0f} ms, "
            f"round 2+ {m['ttft_later']*1e3:.0f} ms; kv hits {m['kv_hits']}/{m['kv_queries']}")


def bench_async(args, rng, log, res):
    """Workload 3: async vs sync at args.async_conc streams."""
    for rep in range(args.reps_big):
        order = [("async", ()), ("sync", ("--no-async-scheduling",))]
        if rep % 2:
            order.reverse()
        for mode, extra in order:
            srv = parley_server(args, *extra)
            try:
                chat(srv, [{"role": "user", "content": "Hi"}], 4)
                before = srv.status()
                r = throughput_run(srv, args.async_conc, 1, args.max_tokens, rng)
                r["steps"] = step_delta(before, srv.status())
            finally:
                srv.stop()
            res.setdefault(mode, []).append(r)
            p = r["steps"]["per_step"]
            log(f"  {mode:5s} rep={rep}: {r['tok_s']:.1f} tok/s; per step: schedule "
                f"{p['schedule']:.3f} ms, process {p['process']:.3f} ms, execute "
                f"{p['execute']:.2f} ms, idle gap {p['idle_gap']:.3f} ms, {p['rows']:.1f} rows")


# ---------------------------------------------------------------- report --

def med(runs, key):
    return statistics.median(r[key] for r in runs)


def med_step(deltas, key):
    return statistics.median(d["per_step"][key] for d in deltas)


def target32(args):
    """The 32-stream target: issue 32's for Gemma, issue 37's for a mixture
    of experts, the engine issue's otherwise."""
    name = os.path.basename(args.model).lower()
    if any(k in name for k in ("moe", "gpt-oss", "gptoss", "mixtral")):
        return ">= 1.5x (issue 37)"
    return ">= 1.5x (issue 32)" if "gemma" in name else ">= 1.2x"


def machine():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cpuinfo
    load = os.getloadavg()[0]
    cap = os.environ.get("PARLEY_CPU_ISA")
    return (f"{cpuinfo.describe()} (load average {load:.1f} at the end)"
            + (f"; parley's kernels capped with PARLEY_CPU_ISA={cap}" if cap else ""))


def report(args, thr, steps, py, multi, asy, elapsed, interrupted):
    L = []
    L.append(f"### Engine core: CPU engine vs llama.cpp ({time.strftime('%Y-%m-%d', time.gmtime())}"
             f"{', quick' if args.quick else ''}{', interrupted: partial' if interrupted else ''})")
    L.append("")
    argv = shlex.join(sys.argv[1:])              # as run: --only, --conc, ... included
    L.append(f"Command: `bench/bench_engine.py{' ' + argv if argv else ''}` "
             f"({elapsed/60:.1f} min). Machine: {machine()}; the clients share the "
             f"cores with the server. Model: {os.path.basename(args.model)}. "
             f"Both servers `--threads {args.threads}`; requests: ~100-token prompt "
             f"(unique per request), max_tokens {args.max_tokens}, EOS ignored, "
             f"temperature 0. Medians of {args.reps} runs ({args.reps_big} at 32+ "
             "streams), servers alternating.")
    L.append("")
    if thr:
        peer = (f"llama-server (llama.cpp of llama-cpp-python {llama_version(args.llama_server)}, "
                "--parallel N --cont-batching)")
        L.append(f"Throughput, output tokens/s (peer: {peer}):")
        L.append("")
        L.append("| streams | parley median (best) | llama-server median (best) | ratio of "
                 "medians | parley step: rows, execute ms | other processes' CPU, cores "
                 "(parley / llama runs) | target |")
        L.append("|---|---|---|---|---|---|---|")
        for conc in args.conc:
            p = thr.get(("parley", conc))
            q = thr.get(("llama-server", conc))
            pv = med(p, "tok_s") if p else None
            qv = med(q, "tok_s") if q else None
            st = steps.get(conc)
            stx = (f"{med_step(st, 'rows'):.1f}, {med_step(st, 'execute'):.1f}"
                   if st else "")
            L.append(f"| {conc} | {fmt(pv)} ({best(p)}) | {fmt(qv)} ({best(q)}) | "
                     f"{fmt(pv / qv, 2) + 'x' if pv and qv else ''} | {stx} | "
                     f"{fmt(med(p, 'others'), 2) if p else ''} / "
                     f"{fmt(med(q, 'others'), 2) if q else ''} | "
                     f"{target32(args) if conc == 32 else ''} |")
        L.append("")
    if 1 in py and 8 in py:
        one, eight = py[1]["tok_s"], py[8]["tok_s"]
        verdict = ("serialises requests (one llama context behind a lock)"
                   if eight < 1.5 * one else "batches requests")
        L.append(f"llama-cpp-python's own server (`python3 -m llama_cpp.server`, one run): "
                 f"1 stream {one:.1f} tok/s, 8 streams {eight:.1f} tok/s: it {verdict}.")
        L.append("")
    if "on" in multi and "off" in multi:
        L.append(f"Multi-turn ({args.convs} conversations x {args.turns} turns, each request "
                 f"re-sends the history; ~{args.system_words}-word system prompt, "
                 f"{args.turn_tokens} tokens per reply; streaming, TTFT = first content delta):")
        L.append("")
        L.append("| prefix caching | round 2+ prompt tokens from cache | ceiling (prev. turn's tokens) "
                 "| /status kv prefix hits/queries (tokens, all rounds) | TTFT round 1 (ms) | TTFT round 2+ (ms) | target |")
        L.append("|---|---|---|---|---|---|---|")
        for mode in ("on", "off"):
            m = multi[mode]
            frac = m["cached_later"] / max(m["prompt_later"], 1)
            ceil = m["ceiling_later"] / max(m["prompt_later"], 1)
            L.append(f"| {mode} | {m['cached_later']}/{m['prompt_later']} = {frac:.1%} | "
                     f"{ceil:.1%} | {m['kv_hits']}/{m['kv_queries']} | "
                     f"{m['ttft_first']*1e3:.0f} | {m['ttft_later']*1e3:.0f} | "
                     f"{'>= 90%' if mode == 'on' else ''} |")
        L.append(f"Prompt tokens per request: round 1 {multi['on']['prompt_first']:.0f}, "
                 f"last round {multi['on']['prompt_last']:.0f}.")
        L.append("")
    if "async" in asy and "sync" in asy:
        L.append(f"Async vs sync step pipeline, {args.async_conc} streams (per-step ms "
                 "from /status timing):")
        L.append("")
        L.append("| mode | tok/s | schedule | process | execute | idle gap | rows/step "
                 "| other processes' CPU, cores |")
        L.append("|---|---|---|---|---|---|---|---|")
        for mode in ("async", "sync"):
            rs = asy[mode]
            ds = [r["steps"] for r in rs]
            L.append(f"| {mode} | {med(rs, 'tok_s'):.1f} | {med_step(ds, 'schedule'):.3f} | "
                     f"{med_step(ds, 'process'):.3f} | {med_step(ds, 'execute'):.2f} | "
                     f"{med_step(ds, 'idle_gap'):.3f} | {med_step(ds, 'rows'):.1f} | "
                     f"{med(rs, 'others'):.2f} |")
        a, s = med(asy["async"], "tok_s"), med(asy["sync"], "tok_s")
        L.append(f"async/sync throughput: {a / s:.2f}x")
        L.append("")
    return "\n".join(L)


def best(runs):
    return fmt(max(r["tok_s"] for r in runs)) if runs else ""


def fmt(v, nd=1):
    return "" if v is None else f"{v:.{nd}f}"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 run each, 1 and 32 streams, a smaller multi-turn workload")
    ap.add_argument("--parley", default=os.path.join(ROOT, "build", "parley"))
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER") or
                    shutil.which("llama-server") or LLAMA_BUILT,
                    help="llama.cpp's llama-server binary (env LLAMA_SERVER)")
    ap.add_argument("--model", default=os.environ.get("PARLEY_MODEL", DEFAULT_MODEL))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reps-big", type=int, default=None,
                    help="runs at 32+ streams (default: --reps)")
    ap.add_argument("--conc", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 8, 32, 64])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--only", default="throughput,python,multiturn,async",
                    help="comma-separated workloads to run")
    ap.add_argument("--convs", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=48)
    ap.add_argument("--system-words", type=int, default=200)
    ap.add_argument("--async-conc", type=int, default=32)
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/results/history/cpu.md")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.conc, args.convs, args.turns = 1, [1, 32], 4, 3
    if args.reps_big is None:
        args.reps_big = args.reps
    return args


def run_throughput(args, rng, log, concs, thr, steps):
    args.parley_srv = parley_server(args)
    try:
        chat(args.parley_srv, [{"role": "user", "content": "Hi"}], 4)
        bench_throughput(args, rng, log, concs, thr, steps)
    finally:
        args.parley_srv.stop()


def run_all(args, only, rng, thr, steps, py, multi, asy):
    """The workloads, the longest (64 streams) last, filling the dicts."""
    log = lambda s: print(s, flush=True)
    if "throughput" in only:
        log("throughput:")
        run_throughput(args, rng, log, [c for c in args.conc if c < 64], thr, steps)
    if "multiturn" in only:
        log("multi-turn:")
        bench_multiturn(args, rng, log, multi)
    if "async" in only:
        log("async vs sync:")
        bench_async(args, rng, log, asy)
    if "python" in only:
        log("llama-cpp-python server:")
        try:
            bench_python_peer(args, rng, log, py)
        except (RuntimeError, OSError) as e:
            log(f"  skipped: {e}")
    if "throughput" in only and any(c >= 64 for c in args.conc):
        log("throughput, 64+ streams:")
        run_throughput(args, rng, log, [c for c in args.conc if c >= 64], thr, steps)


def main():
    # SIGTERM (timeout, kill) unwinds through the finally blocks that stop servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    only = set(args.only.split(","))
    if not os.path.exists(args.model):
        sys.exit(f"bench_engine: no model at {args.model}")
    if not os.path.exists(args.parley):
        sys.exit(f"bench_engine: build parley first (ninja -C build): {args.parley}")
    if not args.llama_server or not os.path.exists(args.llama_server):
        print("bench_engine: no llama-server (set LLAMA_SERVER or --llama-server; "
              "bench/build_llama_server.sh builds one): measuring parley alone")
        args.llama_server = None
    rng = random.Random(20261122)
    t0 = time.time()
    thr, steps, py, multi, asy = {}, {}, {}, {}, {}
    interrupted = False
    try:
        run_all(args, only, rng, thr, steps, py, multi, asy)
    except (SystemExit, KeyboardInterrupt):
        interrupted = True
    text = report(args, thr, steps, py, multi, asy, time.time() - t0, interrupted)
    print()
    print(text)
    if not args.no_append:
        with open(os.path.join(ROOT, "bench", "results", "history", "cpu.md"), "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()

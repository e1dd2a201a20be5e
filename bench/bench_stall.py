#!/usr/bin/env python3
"""bench_stall.py - do other streams stall while a request with a new
JSON schema is admitted? (issue 33: nothing heavy on the event loop)

One parley server (CPU engine, default model) per mode: --prepare-threads 0
(constraints compiled and prompts tokenised on the event loop, as before)
and the default workers. In each, --streams streaming requests generate
--tokens tokens each (ignore_eos); once they flow, --admissions requests
with a new 20-property JSON schema (fresh property names each time, so no
cache hit) are sent one after another, each a completion of a one-token
prompt and one token (`guided_json`), so what it adds to the engine's
steps is next to nothing and what remains is its admission. Each stream's
inter-token gaps are taken at the client: its median gap over the whole
run, and its largest gap among those overlapping an admission (request
sent -> reply received). The target: the largest admission gap is at most
2x the median. Beside it, load-proof: the CPU time the server's event-loop
thread spent during the admissions (from /proc, per admission), which is
the compile itself when it runs on the loop.

Prints the command, the CPU, the load, and per mode the median gap, the
largest gap during admissions, their ratio, the largest gap outside
admissions (the machine's own noise) and the loop thread's CPU per
admission; writes the raw gaps as JSON under bench/results/stall/ (--out
to change).

  bench/bench_stall.py [--bin build/parley] [--streams 4] [--tokens 400]
                       [--admissions 5] [--threads 2] [--modes 0,2]
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import cpuinfo  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KINDS = [{"type": "string", "maxLength": 40},
         {"type": "integer", "minimum": 0, "maximum": 10000},
         {"enum": ["red", "green", "blue"]},
         {"type": "boolean"},
         {"type": "number", "minimum": -100, "maximum": 100}]


def schema20(tag):
    names = [f"{tag}_field_{i:02d}" for i in range(20)]
    return {"type": "object", "additionalProperties": False, "required": names,
            "properties": {n: KINDS[i % 5] for i, n in enumerate(names)}}


def stream(host, port, model, tokens, times, started):
    """One streaming chat completion; appends each content chunk's arrival time."""
    body = {"model": model, "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "temperature": 0.7, "seed": random.randint(0, 1 << 30),
            "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"content-type": "application/json"})
    r = c.getresponse()
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        t = time.monotonic()
        d = json.loads(line[6:])
        ch = d.get("choices") or [{}]
        if ch[0].get("delta", {}).get("content"):
            times.append(t)
            if len(times) == 20:
                started.release()
    c.close()


def loop_cpu_s(pid):
    """CPU seconds of the server's main (event-loop) thread: its tid is its pid."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def admit(url, model, tag, pid):
    body = {"model": model, "max_tokens": 1, "temperature": 0, "prompt": "{",
            "guided_json": schema20(tag)}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    c0, t0 = loop_cpu_s(pid), time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()
    return t0, time.monotonic(), loop_cpu_s(pid) - c0


def gaps_of(times):
    return [(a, b) for a, b in zip(times, times[1:])]


def run_mode(a, prep):
    cmd = [a.bin, "serve", "--host", "127.0.0.1", "--port", "0", "--backend", "cpu",
           "--threads", str(a.threads), "--prepare-threads", str(prep), "--log-level", "warn"]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        url = srv.stdout.readline().split()[-1]
        host, port = url.split("//")[1].split(":")
        model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
        admit(url, model, "warm", srv.pid)  # the vocabulary trie, built once per engine
        started = threading.Semaphore(0)
        times = [[] for _ in range(a.streams)]
        ths = [threading.Thread(target=stream, args=(host, int(port), model, a.tokens, t,
                                                     started)) for t in times]
        for t in ths:
            t.start()
        for _ in ths:
            started.acquire()
        windows = []
        for i in range(a.admissions):
            time.sleep(0.4)
            windows.append(admit(url, model, f"a{prep}x{i}x{random.randint(0, 1 << 30)}",
                                 srv.pid))
        for t in ths:
            t.join()
    finally:
        srv.terminate()
        srv.wait()
    res = {"command": " ".join(cmd), "prepare_threads": prep, "streams": [],
           "loop_cpu_ms_per_admission": [w[2] * 1e3 for w in windows]}
    windows = [(w0, w1) for w0, w1, _ in windows]
    for ts in times:
        g = gaps_of(ts)
        med = statistics.median(b - a_ for a_, b in g)
        during = [b - a_ for a_, b in g if any(a_ < w1 and b > w0 for w0, w1 in windows)]
        outside = [b - a_ for a_, b in g if not any(a_ < w1 and b > w0 for w0, w1 in windows)]
        res["streams"].append({"tokens": len(ts), "median_gap_ms": med * 1e3,
                               "max_gap_admitting_ms": max(during, default=0) * 1e3,
                               "max_gap_outside_ms": max(outside, default=0) * 1e3})
    res["admission_ms"] = [(w1 - w0) * 1e3 for w0, w1 in windows]
    s = res["streams"]
    res["median_gap_ms"] = statistics.median(x["median_gap_ms"] for x in s)
    res["max_gap_admitting_ms"] = max(x["max_gap_admitting_ms"] for x in s)
    res["max_gap_outside_ms"] = max(x["max_gap_outside_ms"] for x in s)
    res["worst_ratio"] = max(x["max_gap_admitting_ms"] / x["median_gap_ms"] for x in s)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "parley"))
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--admissions", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="0,2", help="--prepare-threads values (0: before)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "stall"))
    a = ap.parse_args()
    print("command: " + " ".join([sys.argv[0]] + sys.argv[1:]))
    print("cpu: " + cpuinfo.describe())
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    report = {"date": datetime.date.today().isoformat(), "host": platform.node(),
              "cpu": cpuinfo.describe(), "load_before": load0, "modes": []}
    print(f"{'prepare-threads':>15} {'median gap ms':>14} {'max gap admitting':>18} "
          f"{'ratio':>6} {'max gap outside':>16} {'admission ms (median)':>22} "
          f"{'loop CPU ms / admission':>24}")
    for prep in [int(x) for x in a.modes.split(",")]:
        r = run_mode(a, prep)
        report["modes"].append(r)
        print(f"{prep:>15} {r['median_gap_ms']:>14.1f} {r['max_gap_admitting_ms']:>18.1f} "
              f"{r['worst_ratio']:>6.2f} {r['max_gap_outside_ms']:>16.1f} "
              f"{statistics.median(r['admission_ms']):>22.1f} "
              f"{statistics.mean(r['loop_cpu_ms_per_admission']):>24.1f}", flush=True)
    report["load_after"] = os.getloadavg()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{report['date']}-{report['host']}-{int(time.time())}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"target: max gap admitting <= 2x median gap; raw gaps in {os.path.relpath(path)}")


if __name__ == "__main__":
    main()

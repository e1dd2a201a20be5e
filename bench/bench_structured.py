#!/usr/bin/env python3
"""Throughput with a JSON-schema constraint vs unconstrained, at 1 and N
concurrent streams, on one parley server (CPU engine, default model).

Both sides generate exactly --tokens tokens per request: the unconstrained
side with ignore_eos, the constrained side under a schema whose shortest
document is longer than that (so it ends with "length" too). Runs alternate
A/B --reps times; the report gives each side's median tokens/s and the
ratio. Usage:
  bench/bench_structured.py [--streams 1,32] [--tokens 64] [--reps 3]
"""
import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

SCHEMA = {"type": "array", "minItems": 40,
          "items": {"type": "object", "properties": {
              "code": {"type": "integer", "minimum": 100000, "maximum": 999999}},
              "required": ["code"]}}


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def run(url, model, streams, tokens, constrained):
    body = {"model": model, "max_tokens": tokens, "temperature": 1.0,
            "messages": [{"role": "user", "content": "List forty codes as JSON."}]}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "codes", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(streams) as ex:
        outs = list(ex.map(lambda i: post(url, dict(body, seed=i)), range(streams)))
    dt = time.monotonic() - t0
    n = sum(o["usage"]["completion_tokens"] for o in outs)
    return n / dt, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="1,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                  "parley"))
    a = ap.parse_args()
    srv = subprocess.Popen([a.bin, "serve", "--host", "127.0.0.1", "--port", "0",
                            "--backend", "cpu", "--log-level", "warn"],
                           stdout=subprocess.PIPE, text=True)
    try:
        url = srv.stdout.readline().split()[-1]
        model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
        run(url, model, 1, 8, True)          # compile the schema once (cached)
        report = {"load_before": os.getloadavg()}
        for s in [int(x) for x in a.streams.split(",")]:
            res = {"plain": [], "json_schema": []}
            for _ in range(a.reps):
                for name, c in (("plain", False), ("json_schema", True)):
                    tps, n = run(url, model, s, a.tokens, c)
                    res[name].append(tps)
                    print(f"streams={s} {name}: {tps:.1f} tok/s ({n} tokens)", file=sys.stderr)
            med = {k: statistics.median(v) for k, v in res.items()}
            report[f"streams_{s}"] = {"plain_tok_s": med["plain"],
                                      "json_schema_tok_s": med["json_schema"],
                                      "ratio": med["json_schema"] / med["plain"],
                                      "runs": res}
        report["load_after"] = os.getloadavg()
        print(json.dumps(report, indent=1))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""echo_cost.py - the cost of prompt logprobs (completions echo) on parley.

Starts `parley serve` on the model (127.0.0.1, port 0) and times, round
after round and alternating, one request of each kind on a prompt of
--tokens ids (from /usr/share/common-licenses/GPL-3 via /tokenize):
  plain     max_tokens 1, no echo, a fresh prompt (no prefix-cache hit)
  echo      max_tokens 0, echo, logprobs 1, a fresh prompt: prefill plus
            the logits and log-softmax of every prompt row
  cached    max_tokens 1, no echo, the previous round's prompt again (the
            prefix cache serves all but its last block)
  echo-rep  echo as above on that repeated prompt: echo never reuses the
            cache, it recomputes the prompt
A fresh prompt differs in its first id, so nothing of it is cached.
Times are the server's CPU seconds (user + system, all its threads) per
request, which a loaded machine disturbs far less than wall time.
Prints the median CPU time per kind and the ratios, with the load average.
Usage: bench/echo_cost.py [--model M] [--tokens 512] [--rounds 7]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PID = None


def cpu_s():
    """User + system CPU seconds of the server so far (its threads)."""
    f = open("/proc/%d/stat" % PID).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    c0 = cpu_s() if PID else 0
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return (cpu_s() - c0 if PID else 0), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "parley"))
    a = ap.parse_args()
    p = subprocess.Popen([a.bin, "serve", "--host", "127.0.0.1", "--port", "0", "--model",
                          a.model, "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
    global PID
    try:
        url = p.stdout.readline().split()[-1]
        PID = p.pid
        name = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
        text = open("/usr/share/common-licenses/GPL-3").read()
        _, tok = post(url + "/tokenize", {"model": name, "prompt": text})
        base = tok["tokens"][1:a.tokens]
        times = {k: [] for k in ("plain", "echo", "cached", "echo-rep")}
        comp = url + "/v1/completions"
        prev = None
        for rnd in range(a.rounds + 1):
            fresh = [[100 + 2 * rnd] + base, [101 + 2 * rnd] + base]
            plain = {"model": name, "max_tokens": 1, "temperature": 0}
            echo = {"model": name, "max_tokens": 0, "echo": True, "logprobs": 1}
            t = {"plain": post(comp, dict(plain, prompt=fresh[0]))[0],
                 "echo": post(comp, dict(echo, prompt=fresh[1]))[0]}
            if prev:
                t["cached"], r = post(comp, dict(plain, prompt=prev))
                assert r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, r["usage"]
                t["echo-rep"] = post(comp, dict(echo, prompt=prev))[0]
            prev = fresh[0]
            if rnd == 0:
                continue                   # warm-up round
            for k, v in t.items():
                times[k].append(v)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print("prompt %d tokens, %d rounds, load average %s" %
              (a.tokens, a.rounds, open("/proc/loadavg").read().split()[:3]))
        for k, v in med.items():
            print("  %-9s median %8.1f ms CPU  (%s)" % (k, v, " ".join("%.0f" % (x * 1e3)
                                                                 for x in times[k])))
        print("  echo / plain     %.2f" % (med["echo"] / med["plain"]))
        print("  echo-rep / cached %.2f" % (med["echo-rep"] / med["cached"]))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


if __name__ == "__main__":
    main()

"""Keep-alive time to first token with the openai SDK: N streams on one
reused connection against a mock parley; prints the median and p90 of the
streams after the first (which opens the connection).

    python bench/ttft_keepalive.py PARLEY_BIN [N]
"""
import os
import signal
import statistics
import subprocess
import sys
import time

import openai


def run(binary, n):
    p = subprocess.Popen([binary, "serve", "--backend", "mock", "--port", "0",
                          "--log-level", "warn", "--no-access-log"],
                         stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().split()[-1]
    except IndexError:
        p.kill()
        p = subprocess.Popen([binary, "serve", "--backend", "mock", "--port", "0",
                              "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
        url = p.stdout.readline().split()[-1]
    c = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    ttft = []
    for _ in range(n):
        t0 = time.perf_counter()
        s = c.chat.completions.create(model="mock", stream=True, max_tokens=4,
                                      messages=[{"role": "user", "content": "hi"}])
        first = None
        for ch in s:
            if first is None and ch.choices and ch.choices[0].delta.content:
                first = time.perf_counter() - t0
        ttft.append(first)
    p.send_signal(signal.SIGTERM)
    p.wait()
    t = sorted(ttft[1:])
    return statistics.median(t) * 1e3, t[int(len(t) * 0.9)] * 1e3


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    med, p90 = run(sys.argv[1], n)
    print("%s: keep-alive TTFT median %.2f ms, p90 %.2f ms over %d streams (load %s)"
          % (sys.argv[1], med, p90, n - 1, os.getloadavg()[0]))

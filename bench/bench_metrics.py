#!/usr/bin/env python3
"""bench_metrics.py - the cost of a GET /metrics scrape with N streams open.

Starts `parley serve --backend mock` (capacity above N, one token a second
per stream, so the streams stay open and the loop keeps writing), opens N
streaming chat completions with bench/sse_hold, waits until /metrics counts
them in flight, then times R scrapes over one keep-alive connection. The
same is done with no stream open, alternating, so both run under the same
load. Prints the median and p90 of the client-side time of a whole scrape
(request, render, reply, read) and the exposition's size.

    bench/bench_metrics.py [--streams 2000] [--scrapes 300] [--rounds 3]
"""
import argparse
import http.client
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(n):
    p = subprocess.Popen([os.path.join(ROOT, "build", "parley"), "serve", "--backend", "mock",
                          "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                          "--mock-capacity", str(n + 16), "--mock-token-delay-ms", "1000",
                          "--max-connections", str(n + 64)] if has_max_conn() else
                         [os.path.join(ROOT, "build", "parley"), "serve", "--backend", "mock",
                          "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                          "--mock-capacity", str(n + 16), "--mock-token-delay-ms", "1000"],
                         stdout=subprocess.PIPE, text=True)
    url = p.stdout.readline().split()[-1]
    return p, int(url.rsplit(":", 1)[1])


def has_max_conn():
    out = subprocess.run([os.path.join(ROOT, "build", "parley"), "serve", "--help"],
                         capture_output=True, text=True).stdout
    return "--max-connections" in out


def scrape(conn):
    t = time.perf_counter()
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read()
    return time.perf_counter() - t, body


def in_flight(body):
    for line in body.decode().splitlines():
        if line.startswith("parley:requests_in_flight{"):
            return int(float(line.split()[-1]))
    return -1


def run(port, scrapes):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(20):
        scrape(conn)                      # warm up
    ts = []
    for _ in range(scrapes):
        dt, body = scrape(conn)
        ts.append(dt * 1e3)
    conn.close()
    ts.sort()
    return ts, len(body), in_flight(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    hold = os.path.join(ROOT, "build", "sse_hold")
    subprocess.run(["cc", "-O2", "-o", hold, os.path.join(ROOT, "bench", "sse_hold.c")],
                   check=True)
    print("load average:", open("/proc/loadavg").read().split()[:3])
    res = {0: [], a.streams: []}
    for rnd in range(a.rounds):
        for n in (0, a.streams):
            srv, port = start_server(a.streams)
            holder = None
            try:
                if n:
                    holder = subprocess.Popen([hold, "127.0.0.1", str(port), str(n), "3600"],
                                              stdout=subprocess.DEVNULL)
                    conn = http.client.HTTPConnection("127.0.0.1", port)
                    for _ in range(600):
                        _, body = scrape(conn)
                        if in_flight(body) >= n:
                            break
                        time.sleep(0.05)
                    conn.close()
                ts, size, live = run(port, a.scrapes)
                assert live == n, (live, n)
                med, p90 = statistics.median(ts), ts[int(0.9 * len(ts))]
                res[n].append(med)
                print("round %d  streams %5d  in flight %5d  scrape median %.3f ms  p90 %.3f ms"
                      "  (%d bytes)" % (rnd, n, live, med, p90, size), flush=True)
            finally:
                if holder:
                    holder.send_signal(signal.SIGKILL)
                    holder.wait()
                srv.send_signal(signal.SIGTERM)
                srv.wait()
    m0, m1 = statistics.median(res[0]), statistics.median(res[a.streams])
    print("median of medians: 0 streams %.3f ms, %d streams %.3f ms, ratio %.2f"
          % (m0, a.streams, m1, m1 / m0))
    print("load average:", open("/proc/loadavg").read().split()[:3])
    return 0 if m1 < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())

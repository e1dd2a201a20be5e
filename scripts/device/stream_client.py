#!/usr/bin/env python3
"""stream_client.py - N concurrent streaming chat completions against an
OpenAI-compatible server, with the standard library only (the GPU machines
have no openai package). Greedy; every other request also carries
frequency/presence/repetition penalties, so async and sync scheduling can
be compared with penalties on (their texts must be equal).

usage: stream_client.py --port P [--requests N] [--max-tokens T] --out F.json
       stream_client.py --compare A.json B.json
Prints one summary line: requests ok, tokens, wall s, tok/s, TTFT p50/p99,
inter-token p50/p99 (ms).
"""
import argparse
import http.client
import json
import sys
import threading
import time


def served_model(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/v1/models")
    name = json.loads(c.getresponse().read())["data"][0]["id"]
    c.close()
    return name


def one(port, model, i, max_tokens, res):
    body = {"model": model, "stream": True, "temperature": 0, "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user",
                          "content": f"Request {i}: write about the number {i * 7919 % 1000}."}]}
    if i % 2:
        body.update(frequency_penalty=0.5, presence_penalty=0.3, repetition_penalty=1.1)
    r = {"i": i, "ok": False, "text": "", "chunks": 0, "ttft": None, "gaps": [], "error": None}
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        if resp.status != 200:
            r["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
        else:
            last = None
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    r["ok"] = True
                    break
                ev = json.loads(data)
                if "error" in ev:
                    r["error"] = json.dumps(ev["error"])[:300]
                    break
                delta = ev["choices"][0].get("delta", {}).get("content") or ""
                if not delta:
                    continue
                now = time.monotonic()
                if r["ttft"] is None:
                    r["ttft"] = now - t0
                else:
                    r["gaps"].append(now - last)
                last = now
                r["text"] += delta
                r["chunks"] += 1
        c.close()
    except Exception as e:  # noqa: BLE001 - recorded per request
        r["error"] = repr(e)[:300]
    r["total"] = time.monotonic() - t0
    res[i] = r


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def run(a):
    res = {}
    model = served_model(a.port)
    threads = [threading.Thread(target=one, args=(a.port, model, i, a.max_tokens, res))
               for i in range(a.requests)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    rs = [res[i] for i in range(a.requests)]
    ok = [r for r in rs if r["ok"]]
    chunks = sum(r["chunks"] for r in ok)
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    gaps = [g for r in ok for g in r["gaps"]]
    summary = {"requests": a.requests, "ok": len(ok), "chunks": chunks, "wall_s": wall,
               "chunks_per_s": chunks / wall if wall else 0,
               "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
               "itl_p50_ms": pct(gaps, 50) * 1e3, "itl_p99_ms": pct(gaps, 99) * 1e3,
               "errors": [r["error"] for r in rs if r["error"]][:5]}
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "results": rs}, f)
    print(json.dumps(summary))
    return 0 if len(ok) == a.requests else 1


def compare(pa, pb):
    a, b = (json.load(open(p))["results"] for p in (pa, pb))
    same = sum(1 for x, y in zip(a, b) if x["ok"] and y["ok"] and x["text"] == y["text"])
    pen = [i for i in range(len(a)) if i % 2]
    same_pen = sum(1 for i in pen if a[i]["ok"] and b[i]["ok"] and a[i]["text"] == b[i]["text"])
    print(f"serve compare {pa} vs {pb}: {same}/{len(a)} texts equal "
          f"({same_pen}/{len(pen)} of those with penalties)")
    return 0 if same == len(a) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    if not a.port or not a.out:
        ap.error("--port and --out are needed")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())

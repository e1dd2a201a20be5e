#!/usr/bin/env python3
"""makespan_report.py - the table of bench_makespan.sh from its output folder:
for each strategy, STRAT.stats.json (parley run --stats) and the transcripts
under STRAT/<experiment>/transcripts/.

    bench/makespan_report.py OUT naive fcfs parley
"""
import glob
import json
import os
import sys


def transcript_figures(folder):
    """Requests, and prompt / cached tokens of rounds >= 2 (0-based >= 1)."""
    reqs = p2 = c2 = p1 = c1 = 0
    for f in glob.glob(os.path.join(folder, "*", "transcripts", "*.json")):
        t = json.load(open(f))
        for a in t.get("attempts", []):
            reqs += 1
            if a["round"] >= 1:
                p2 += a["prompt_tokens"]
                c2 += a["cached_tokens"]
            else:
                p1 += a["prompt_tokens"]
                c1 += a["cached_tokens"]
    return reqs, p2, c2, p1, c1


def main():
    out, strats = sys.argv[1], sys.argv[2:]
    rows = {}
    for s in strats:
        st = json.load(open(os.path.join(out, s + ".stats.json")))
        b = st["backends"][0]
        reqs, p2, c2, p1, c1 = transcript_figures(os.path.join(out, s))
        rows[s] = dict(ms=st["makespan_ms"], busy=b["timing"]["execute_ms"] / st["makespan_ms"],
                       ok=st["succeeded"], failed=st["failed"], n=st["questions"], reqs=reqs,
                       tok=b["tokens_out"], p2=p2, c2=c2, hit2=c2 / p2 if p2 else 0.0,
                       hit1=c1 / p1 if p1 else 0.0, evict=b["kv"]["evictions"],
                       pre=b["preemptions"])
    print("| strategy | makespan (s) | s/question | engine busy | round>=2 prompt tokens from cache | round 1 from cache | requests | tokens out | succeeded/failed | KV evictions | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in strats:
        r = rows[s]
        print("| %s | %.1f | %.2f | %.0f%% | %.1f%% (%d/%d) | %.1f%% | %d | %d | %d/%d | %d | %d |" % (
            s, r["ms"] / 1e3, r["ms"] / 1e3 / max(r["n"], 1), 100 * r["busy"], 100 * r["hit2"],
            r["c2"], r["p2"], 100 * r["hit1"], r["reqs"], r["tok"], r["ok"], r["failed"],
            r["evict"], r["pre"]))
    if "naive" in rows and "parley" in rows:
        print()
        print("parley vs naive: %.2fx faster" % (rows["naive"]["ms"] / rows["parley"]["ms"]), end="")
        if "fcfs" in rows:
            print("; parley vs fcfs: %.2fx" % (rows["fcfs"]["ms"] / rows["parley"]["ms"]), end="")
        print(".")


if __name__ == "__main__":
    main()

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


def transcript_figures(folder, block):
    """Requests; prompt / cached tokens of rounds >= 2 (0-based >= 1) and of
    round 1; and the most of the round >= 2 prompts that a cache could hold:
    each agent's history is append-only, so a prompt can reuse at most the
    agent's previous prompt and reply (exact, and whole blocks only)."""
    reqs = p2 = c2 = p1 = c1 = bound = bound_blk = 0
    for f in glob.glob(os.path.join(folder, "*", "transcripts", "*.json")):
        t = json.load(open(f))
        prev = {}
        for a in t.get("attempts", []):
            reqs += 1
            if a["round"] >= 1:
                p2 += a["prompt_tokens"]
                c2 += a["cached_tokens"]
                last = prev.get(a["agent_id"])
                if last:
                    b = min(a["prompt_tokens"] - 1, last["prompt_tokens"] + last["completion_tokens"])
                    bound += b
                    bound_blk += b // block * block
            else:
                p1 += a["prompt_tokens"]
                c1 += a["cached_tokens"]
            prev[a["agent_id"]] = a
    return reqs, p2, c2, p1, c1, bound, bound_blk


def main():
    out, strats = sys.argv[1], sys.argv[2:]
    rows = {}
    for s in strats:
        st = json.load(open(os.path.join(out, s + ".stats.json")))
        b = st["backends"][0]
        reqs, p2, c2, p1, c1, bound, bound_blk = transcript_figures(
            os.path.join(out, s), b["kv"]["block_size"])
        rows[s] = dict(ms=st["makespan_ms"], busy=b["timing"]["execute_ms"] / st["makespan_ms"],
                       ok=st["succeeded"], failed=st["failed"], n=st["questions"], reqs=reqs,
                       tok=b["tokens_out"], p2=p2, c2=c2, hit2=c2 / p2 if p2 else 0.0,
                       hit1=c1 / p1 if p1 else 0.0, evict=b["kv"]["evictions"],
                       pre=b["preemptions"], steps=b["steps_done"],
                       rows=b["rows"] / max(b["steps_done"], 1), bound=bound / p2 if p2 else 0.0,
                       bound_blk=bound_blk / p2 if p2 else 0.0)
    print("| strategy | makespan (s) | s/question | engine busy | engine steps | rows/step | round>=2 prompt tokens from cache | round 1 from cache | requests | tokens out | succeeded/failed | KV evictions | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in strats:
        r = rows[s]
        print("| %s | %.1f | %.2f | %.0f%% | %d | %.1f | %.1f%% (%d/%d) | %.1f%% | %d | %d | %d/%d | %d | %d |" % (
            s, r["ms"] / 1e3, r["ms"] / 1e3 / max(r["n"], 1), 100 * r["busy"], r["steps"], r["rows"], 100 * r["hit2"],
            r["c2"], r["p2"], 100 * r["hit1"], r["reqs"], r["tok"], r["ok"], r["failed"],
            r["evict"], r["pre"]))
    print()
    print("Round >= 2 prompts: the agent's own earlier prompt and reply (append-only history)")
    print("could supply at most " + ", ".join(
        "%s %.1f%% (%.1f%% in whole blocks)" % (s, 100 * rows[s]["bound"], 100 * rows[s]["bound_blk"])
        for s in strats) + "; the rest is other agents' new messages.")
    if "naive" in rows and "parley" in rows:
        print()
        print("parley vs naive: %.2fx faster" % (rows["naive"]["ms"] / rows["parley"]["ms"]), end="")
        if "fcfs" in rows:
            print("; parley vs fcfs: %.2fx" % (rows["fcfs"]["ms"] / rows["parley"]["ms"]), end="")
        print(".")


if __name__ == "__main__":
    main()

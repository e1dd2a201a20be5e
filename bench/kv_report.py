#!/usr/bin/env python3
"""kv_report.py - the table of bench_kv.sh: one row per strategy:layout:eviction
config, from NAME.stats.json (parley run --stats: the job's cache counters,
answers and the engine summary).

    bench/kv_report.py [--default DIR] OUT fcfs:seed:lru parley:shared_prefix:next-need ...

--default DIR: the same configs run with the default cache (no KV
pressure); "recomputed" is then the prefill tokens a config computed beyond
its own run without pressure (evicted or preempted work done again).
"""
import json
import os
import sys


def load(out, c):
    return json.load(open(os.path.join(out, c.replace(":", "_") + ".stats.json")))


def main():
    args = sys.argv[1:]
    default = None
    if args[:1] == ["--default"]:
        default, args = args[1], args[2:]
    out, configs = args[0], args[1:]
    rows = []
    for c in configs:
        st = load(out, c)
        rec = "-"
        if default and os.path.exists(os.path.join(default, c.replace(":", "_") + ".stats.json")):
            rec = "%d" % (st["backends"][0]["prefill_rows"] - load(default, c)["backends"][0]["prefill_rows"])
        rows.append((c, st, rec))
    print("| config (strategy:layout:eviction) | makespan (s) | round>=2 prompt tokens from cache | round>=2 uncached | prefill tokens computed | recomputed (vs default cache) | KV evictions | evictions by need | blocks sent to the eviction front (finished conversations, private replies) | engine steps | rows/step | preemptions | busy | correct/answered | re-prompts | succeeded/failed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c, st, rec in rows:
        e, ca, b = st["engine"], st["cache"], st["backends"][0]
        p2, c2 = ca["round2plus_prompt_tokens"], ca["round2plus_cached_tokens"]
        print("| %s | %.1f | %.1f%% (%d/%d) | %d | %d | %s | %d | %d | %d | %d | %.1f | %d | %.0f%% | %d/%d | %d | %d/%d |" % (
            c, st["makespan_ms"] / 1e3, 100.0 * c2 / p2 if p2 else 0.0, c2, p2, p2 - c2,
            b["prefill_rows"], rec, e["evictions"], e.get("need_evictions", 0), e["done_released"],
            e["steps"], e["rows_per_step"], e["preemptions"], 100 * e["busy_fraction"],
            st["correct"], st["answered"], st["reprompts"], st["succeeded"], st["failed"]))
    ms = {c: st["makespan_ms"] for c, st, _ in rows}
    steps = {c: st["engine"]["steps"] for c, st, _ in rows}
    for layout in ("seed", "shared_prefix"):
        base = "fcfs:%s:lru" % layout
        for ev in ("lru", "next-need"):
            p = "parley:%s:%s" % (layout, ev)
            if base in ms and p in ms:
                print()
                print("%s vs %s: %.2fx in makespan, %.2fx in engine steps" % (
                    p, base, ms[base] / ms[p], steps[base] / max(steps[p], 1)), end="")
    print()


if __name__ == "__main__":
    main()

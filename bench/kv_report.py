#!/usr/bin/env python3
"""kv_report.py - the table of bench_kv.sh: one row per strategy:layout:eviction
config, from NAME.stats.json (parley run --stats: the job's cache counters
and the engine summary).

    bench/kv_report.py OUT fcfs:seed:lru parley:shared_prefix:next-need ...
"""
import json
import os
import sys


def main():
    out, configs = sys.argv[1], sys.argv[2:]
    rows = []
    for c in configs:
        name = c.replace(":", "_")
        st = json.load(open(os.path.join(out, name + ".stats.json")))
        e, ca, b = st["engine"], st["cache"], st["backends"][0]
        p2, c2 = ca["round2plus_prompt_tokens"], ca["round2plus_cached_tokens"]
        rows.append((c, st, e, p2, c2, b))
    print("| config (strategy:layout:eviction) | makespan (s) | round>=2 prompt tokens from cache | prefill tokens computed | KV evictions | finished blocks moved to eviction front | engine steps | rows/step | preemptions | busy | succeeded/failed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c, st, e, p2, c2, b in rows:
        print("| %s | %.1f | %.1f%% (%d/%d) | %d | %d | %d | %d | %.1f | %d | %.0f%% | %d/%d |" % (
            c, st["makespan_ms"] / 1e3, 100.0 * c2 / p2 if p2 else 0.0, c2, p2,
            b["prefill_rows"], e["evictions"], e["done_released"], e["steps"],
            e["rows_per_step"], e["preemptions"], 100 * e["busy_fraction"],
            st["succeeded"], st["failed"]))
    ms = {c: st["makespan_ms"] for c, st, *_ in rows}
    steps = {c: e["steps"] for c, st, e, *_ in rows}
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

#!/usr/bin/env python3
"""capacity_report.py - the table of bench_capacity.sh (issue 41): one row per
configuration from its NAME.PASS.stats.json files (parley run --stats), then
the issue's targets.

    bench/capacity_report.py OUT PASSES parley_sp parley_sp_768 fcfs_seed ...
"""
import json
import os
import sys


def load(out, name, passes):
    runs = []
    for p in range(1, passes + 1):
        path = os.path.join(out, "%s.%d.stats.json" % (name, p))
        if os.path.exists(path):
            r = json.load(open(path))
            try:   # bash's time: user and system CPU seconds
                r["cpu_s"] = sum(float(x) for x in open(path[:-len("stats.json")] + "cpu")
                                 .read().split()[-2:])
            except (OSError, ValueError):
                r["cpu_s"] = float("nan")
            runs.append(r)
    return runs


def row(name, runs):
    ms = [r["makespan_ms"] / 1e3 for r in runs]
    last = runs[-1]
    b, e, ca = last["backends"][0], last["engine"], last["cache"]
    adm = (last.get("admission") or [{}])[0]
    p2, c2 = ca["round2plus_prompt_tokens"], ca["round2plus_cached_tokens"]
    pre = [r["engine"]["preemptions"] for r in runs]
    ok = all(r["failed"] == 0 and r["succeeded"] == r["questions"] for r in runs)
    return ("| %s | %s | %.1f | %s | %s | %d | %d | %s | %.1f%% | %d | %.1f | %s |" % (
        name, " / ".join("%.1f" % m for m in ms), sum(ms) / len(ms),
        " / ".join("%.1f" % r["cpu_s"] for r in runs),
        b.get("capacity_rule", "?"), b.get("max_model_len", 0),
        adm.get("peak_in_flight", 0), b.get("worst_case_capacity", "?"),
        100.0 * c2 / p2 if p2 else 0.0, e["steps"], e["rows_per_step"],
        "/".join(str(x) for x in pre) + ("" if ok else " (failures!)")),
        sum(ms) / len(ms))


def main():
    out, passes, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    print("| config | makespan (s), each pass | mean (s) | CPU s (user+sys), each pass | rule |"
          " max_model_len | peak in flight (capacity used) | seed's capacity |"
          " round>=2 from cache | engine steps | rows/step | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    mean = {}
    for n in names:
        runs = load(out, n, passes)
        if not runs:
            print("| %s | (no run) |||||||||" % n)
            continue
        line, mean[n] = row(n, runs)
        print(line)
    print()
    if "parley_sp" in mean and "parley_sp_768_worst" in mean:
        r = mean["parley_sp"] / mean["parley_sp_768_worst"]
        print("parley_sp vs the hand-tuned --max-model-len 768 run (seed's rule): %.3fx the "
              "makespan (target <= 1.05: %s)" % (r, "met" if r <= 1.05 else "NOT met"))
    if "parley_sp" in mean and "parley_sp_768" in mean:
        print("parley_sp at 768 vs the default max_model_len (the KV rule): %.3fx" % (
            mean["parley_sp_768"] / mean["parley_sp"]))
    for base in ("fcfs_seed", "fcfs_seed_worst"):
        if "parley_sp" in mean and base in mean:
            r = mean[base] / mean["parley_sp"]
            print("parley_sp vs %s: %.2fx faster (target >= 2.0: %s)" % (
                base, r, "met" if r >= 2.0 else "NOT met"))
    if "parley_sp" in mean and "parley_sp_worst" in mean:
        print("parley_sp vs the seed's rule (parley_sp_worst): %.2fx faster" % (
            mean["parley_sp_worst"] / mean["parley_sp"]))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# bench_kv.sh - conversation-aware KV (issue 17): the debate job under
# dispatch strategy x prompt layout x KV eviction, all in one run, configs
# alternating. Per config: makespan, the share of round >= 2 prompt tokens
# served from the prefix cache, KV evictions, prefill tokens computed,
# engine steps, rows per step, busy fraction (parley run --stats).
#
#   bench/bench_kv.sh [QUESTIONS [MAX_TOKENS]]          (defaults 8, 16)
# Env: BENCH_CONFIGS (default: fcfs, parley with LRU, parley with next-need,
# each with the seed and the shared-prefix layout, as
# "strategy:layout:eviction" words), BENCH_ARGS (extra `parley run` options,
# e.g. "--kv-cache-mb 160 --max-model-len 512" for KV pressure), BENCH_OUT
# (default /tmp/parley-kv), BENCH_BACKEND (default cpu), PARLEY_MODEL,
# BENCH_JOB_ARGS (make_debate_job.py options; default "--no-validation":
# every config does the same 12 requests a question; "" keeps the example's
# constrained validation, so the table's accuracy columns mean something),
# BENCH_DEFAULT (a finished BENCH_OUT of the same configs at the default
# cache size: the report adds the prefill tokens recomputed under pressure).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-8}"
MAXTOK="${2:-16}"
BACKEND="${BENCH_BACKEND:-cpu}"
OUT="${BENCH_OUT:-/tmp/parley-kv}"
PARLEY="${PARLEY_BIN:-build/parley}"
CONFIGS="${BENCH_CONFIGS:-fcfs:seed:lru parley:seed:lru parley:seed:next-need fcfs:shared_prefix:lru parley:shared_prefix:lru parley:shared_prefix:next-need}"
rm -rf "$OUT"
mkdir -p "$OUT"
for L in seed shared_prefix; do
    bench/make_debate_job.py --questions "$N" --max-tokens "$MAXTOK" --temperature 0 \
        ${BENCH_JOB_ARGS---no-validation} --prompt-layout "$L" --experiment "kv_$L" > "$OUT/job_$L.yaml"
done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/load.txt"
for c in $CONFIGS; do
    IFS=: read -r strat layout ev <<< "$c"
    name="${strat}_${layout}_${ev}"
    echo "== $name ($N questions, max_tokens $MAXTOK, backend $BACKEND, ${BENCH_ARGS:-})" >&2
    "$PARLEY" run "$OUT/job_$layout.yaml" --backend "$BACKEND" --output "$OUT/$name" \
        --strategy "$strat" --kv-eviction "$ev" --progress-interval 0 \
        --stats "$OUT/$name.stats.json" ${BENCH_ARGS:-} 2>"$OUT/$name.log" || true
    tail -1 "$OUT/$name.log" >&2
    echo "after $name: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
done
python3 bench/kv_report.py ${BENCH_DEFAULT:+--default "$BENCH_DEFAULT"} "$OUT" $CONFIGS | tee "$OUT/report.md"
cat "$OUT/load.txt"

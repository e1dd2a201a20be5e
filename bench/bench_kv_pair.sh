#!/usr/bin/env bash
# bench_kv_pair.sh - conversation-aware KV (issue 17), the issue's setup: the
# debate job (3 participants + moderator, 3 rounds, max_tokens 48,
# temperature 0, the example's constrained validation) per config
# ("strategy:layout:eviction"), each run twice in a row, under KV pressure
# (--kv-cache-mb 192: 273 blocks, capacity 4) and at the default cache
# (2048 MiB), both with --max-model-len 1024; the order of the pair
# alternates from config to config. OUT/load.txt has the load average at
# each start and end; OUT/report_press.md (with the prefill recomputed vs
# the default-cache run) and OUT/report_default.md are kv_report.py tables.
#
#   bench/bench_kv_pair.sh QUESTIONS OUT [CONFIG...]
# Env: PARLEY_BIN (default build/parley: copy it first to freeze it),
# BENCH_PRESS_MB (default 192), BENCH_SIZES ("press" or "default": only
# that cache size; the default-cache report then has no rows).
set -uo pipefail
cd "$(dirname "$0")/.."
N=$1; OUT=$2; shift 2
CONFIGS="${*:-fcfs:seed:lru parley:seed:lru parley:seed:next-need fcfs:shared_prefix:lru parley:shared_prefix:lru parley:shared_prefix:next-need}"
PARLEY=${PARLEY_BIN:-build/parley}
mkdir -p "$OUT/press" "$OUT/default"
for L in seed shared_prefix; do
    bench/make_debate_job.py --questions "$N" --max-tokens 48 --temperature 0 \
        --prompt-layout "$L" --experiment "kv_$L" > "$OUT/job_$L.yaml"
done
i=0
for c in $CONFIGS; do
    IFS=: read -r strat layout ev <<< "$c"
    name="${strat}_${layout}_${ev}"
    if [ $((i % 2)) = 0 ]; then sizes="press default"; else sizes="default press"; fi
    [ -n "${BENCH_SIZES:-}" ] && sizes=$BENCH_SIZES
    i=$((i + 1))
    for size in $sizes; do
        extra="--max-model-len 1024"
        [ "$size" = press ] && extra="--kv-cache-mb ${BENCH_PRESS_MB:-192} $extra"
        echo "$(date -u +%T) start $size/$name load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
        "$PARLEY" run "$OUT/job_$layout.yaml" --backend cpu --output "$OUT/$size/$name" \
            --strategy "$strat" --kv-eviction "$ev" --progress-interval 0 \
            --stats "$OUT/$size/$name.stats.json" $extra 2>"$OUT/$size/$name.log"
        echo "$(date -u +%T) end   $size/$name rc $? load $(cut -d' ' -f1-3 /proc/loadavg) :: $(tail -1 "$OUT/$size/$name.log")" >> "$OUT/load.txt"
    done
done
case "${BENCH_SIZES:-press default}" in
press) python3 bench/kv_report.py "$OUT/press" $CONFIGS > "$OUT/report_press.md"
       cat "$OUT/report_press.md" ;;
default) python3 bench/kv_report.py "$OUT/default" $CONFIGS > "$OUT/report_default.md"
         cat "$OUT/report_default.md" ;;
*) python3 bench/kv_report.py --default "$OUT/default" "$OUT/press" $CONFIGS > "$OUT/report_press.md"
   python3 bench/kv_report.py "$OUT/default" $CONFIGS > "$OUT/report_default.md"
   cat "$OUT/report_press.md" "$OUT/report_default.md" ;;
esac

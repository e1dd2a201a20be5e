#!/usr/bin/env bash
# bench_capacity.sh - issue 41's table: the same debate job (the example
# scaled to QUESTIONS questions, 3 participants + moderator, 3 rounds,
# max_tokens 24, temperature 0) on the CPU engine with the same small KV
# cache (--kv-cache-mb 48, 2 threads), under each capacity setting:
#
#   parley_sp            parley + shared_prefix, default max_model_len, the
#                        KV rule (the default)
#   parley_sp_768        the same with --max-model-len 768: the KV rule does
#                        not depend on it, so this should match parley_sp
#   parley_sp_worst      seed 000's rule (--capacity worst-case) at the
#                        default max_model_len: the issue's "before"
#   parley_sp_768_worst  seed 000's rule with the hand-tuned
#                        --max-model-len 768 (capacity 2): the issue's target
#                        reference
#   fcfs_seed            fcfs + seed layout, the KV rule
#   fcfs_seed_worst      fcfs + seed layout, seed 000's rule
#   fcfs_seed_768_worst  fcfs + seed layout, seed 000's rule, 768
#   parley_seed, parley_seed_worst (not run by default): parley's order with
#                        the seed layout, the default's, under either rule
#   parley_sp_nogroups   (not run by default) parley_sp with one cache group
#                        for every layer (--no-kv-cache-groups): issue 47's
#                        "before" for sliding-window models (PARLEY_MODEL=
#                        Gemma 3 270M, BENCH_CONFIGS="parley_sp parley_sp_nogroups")
#
# Each configuration runs PASSES times (default 2), the order reversed on
# every other pass so that no configuration always runs first. The report
# (OUT/report.md, capacity_report.py) gives per configuration the
# makespans, the capacity the rule gave (peak requests in flight, the
# seed's figure beside it), preemptions, the round >= 2 prompt tokens served
# from the prefix cache, engine steps and rows per step; then the issue's
# targets: parley_sp within 5 % of parley_sp_768_worst, and >= 2.0x
# fcfs_seed (and the seed's rule's fcfs_seed_worst). There is no peer here:
# the comparison is parley's capacity rules on one job. Timings mean
# something on a quiet machine only: OUT/load.txt has the load average at
# each start and end, and the report the CPU seconds of each run beside its
# makespan (on a loaded machine they tell the work apart from the wait).
#
#   bench/bench_capacity.sh [QUESTIONS [OUT [PASSES]]]   (defaults 12, /tmp/parley-capacity, 2)
# Env: PARLEY_BIN (default build/parley: copy it first to freeze it),
# PARLEY_MODEL, BENCH_CONFIGS (a subset of the names above),
# BENCH_JOB_ARGS (make_debate_job.py options; default "--no-validation":
# every configuration does the same 12 requests a question), BENCH_ARGS
# (more `parley run` options for every configuration), BENCH_MAX_TOKENS
# (each reply's max_tokens, default 24; longer replies make contexts that
# outgrow a sliding window, where cache groups save blocks).
set -uo pipefail
cd "$(dirname "$0")/.."
N="${1:-12}"
OUT="${2:-/tmp/parley-capacity}"
PASSES="${3:-2}"
PARLEY="${PARLEY_BIN:-build/parley}"
CONFIGS="${BENCH_CONFIGS:-parley_sp parley_sp_768 parley_sp_worst parley_sp_768_worst fcfs_seed fcfs_seed_worst fcfs_seed_768_worst}"
COMMON="--backend cpu --threads 2 --kv-cache-mb 48 --progress-interval 0 ${BENCH_ARGS:-}"
rm -rf "$OUT"
mkdir -p "$OUT"
for L in seed shared_prefix; do
    bench/make_debate_job.py --questions "$N" --max-tokens "${BENCH_MAX_TOKENS:-24}" --temperature 0 \
        ${BENCH_JOB_ARGS---no-validation} --prompt-layout "$L" --experiment "cap_$L" \
        > "$OUT/job_$L.yaml"
done

# name -> strategy, layout and options
config_args() {
    case "$1" in
    parley_sp) echo "parley shared_prefix" ;;
    parley_sp_768) echo "parley shared_prefix --max-model-len 768" ;;
    parley_sp_worst) echo "parley shared_prefix --capacity worst-case" ;;
    parley_sp_768_worst) echo "parley shared_prefix --capacity worst-case --max-model-len 768" ;;
    parley_sp_nogroups) echo "parley shared_prefix --no-kv-cache-groups" ;;
    parley_seed) echo "parley seed" ;;
    parley_seed_worst) echo "parley seed --capacity worst-case" ;;
    fcfs_seed) echo "fcfs seed" ;;
    fcfs_seed_768) echo "fcfs seed --max-model-len 768" ;;
    fcfs_seed_worst) echo "fcfs seed --capacity worst-case" ;;
    fcfs_seed_768_worst) echo "fcfs seed --capacity worst-case --max-model-len 768" ;;
    *) echo "bench_capacity: unknown configuration $1" >&2; exit 2 ;;
    esac
}

{
    echo "command: bench/bench_capacity.sh $N $OUT $PASSES (BENCH_ARGS='${BENCH_ARGS:-}'," \
         "BENCH_MAX_TOKENS=${BENCH_MAX_TOKENS:-24}," \
         "BENCH_JOB_ARGS='${BENCH_JOB_ARGS---no-validation}')"
    echo "common options: $COMMON"
    echo "binary: $PARLEY ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo "machine: $(python3 bench/cpuinfo.py)"
} | tee "$OUT/setup.txt"
for pass in $(seq 1 "$PASSES"); do
    order=$CONFIGS
    [ $((pass % 2)) = 0 ] && order=$(echo $CONFIGS | tr ' ' '\n' | tac | tr '\n' ' ')
    for c in $order; do
        read -r strat layout extra <<< "$(config_args "$c")"
        name="$c.$pass"
        echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
        TIMEFORMAT='%U %S'
        { time "$PARLEY" run "$OUT/job_$layout.yaml" $COMMON --strategy "$strat" $extra \
            --output "$OUT/$name" --stats "$OUT/$name.stats.json" 2>"$OUT/$name.log"; } \
            2>"$OUT/$name.cpu"
        rc=$?
        echo "$(date -u +%T) end   $name rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/load.txt"
        echo "$name: $(tail -1 "$OUT/$name.log")" >&2
    done
done
python3 bench/capacity_report.py "$OUT" "$PASSES" $CONFIGS | tee "$OUT/report.md"
cat "$OUT/load.txt"

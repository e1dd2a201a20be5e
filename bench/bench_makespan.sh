#!/usr/bin/env bash
# bench_makespan.sh - makespan of the debate example scaled up, on the real
# engine, under three dispatch strategies measured in the same run:
#   naive  one request at a time, conversation by conversation, agents in order
#   fcfs   every ready request first-come-first-served (no priority heap)
#   parley the conversation scheduler (seed 000's priority heap)
# Per strategy: makespan, engine busy fraction (engine execute time / makespan,
# from the backend's stats), and the prefix-cache share of round >= 2 prompts
# (cached prompt tokens / prompt tokens, from the transcripts).
# Appends a section to bench/results/history/jobs_kv.md (BENCH_NO_APPEND=1 to
# skip), the log behind BENCHMARKS.md's jobs table.
#
#   bench/bench_makespan.sh [QUESTIONS [MAX_TOKENS]]   (defaults 12, 48)
# Env: PARLEY_MODEL, BENCH_BACKEND (default cpu), BENCH_STRATEGIES
# (default "naive fcfs parley"), BENCH_OUT (default /tmp/parley-makespan),
# BENCH_VALIDATION=1 to keep answer validation (and its re-prompts and
# failures, which make the work differ between strategies), BENCH_ARGS:
# extra `parley run` options (e.g. "--kv-cache-mb 256").
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-12}"
MAXTOK="${2:-48}"
BACKEND="${BENCH_BACKEND:-cpu}"
STRATS="${BENCH_STRATEGIES:-naive fcfs parley}"
OUT="${BENCH_OUT:-/tmp/parley-makespan}"
PARLEY="${PARLEY_BIN:-build/parley}"
rm -rf "$OUT"
mkdir -p "$OUT"
JOB="$OUT/debate_$N.yaml"
VALIDATION=--no-validation
[ "${BENCH_VALIDATION:-0}" = 1 ] && VALIDATION=
bench/make_debate_job.py --questions "$N" --max-tokens "$MAXTOK" --temperature 0 \
    $VALIDATION --experiment debate_scaled > "$JOB"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for s in $STRATS; do
    echo "== $s ($N questions, max_tokens $MAXTOK, backend $BACKEND)" >&2
    "$PARLEY" run "$JOB" --backend "$BACKEND" --output "$OUT/$s" --strategy "$s" \
        --stats "$OUT/$s.stats.json" ${BENCH_ARGS:-} 2>"$OUT/$s.log" || true
    tail -1 "$OUT/$s.log" >&2
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/makespan_report.py "$OUT" $STRATS > "$OUT/report.md"
cat "$OUT/report.md"
if [ "${BENCH_NO_APPEND:-0}" != 1 ]; then
    {
        echo
        echo "### Makespan of the debate job by dispatch strategy ($(date -u +%F))"
        echo
        echo "Command: \`bench/bench_makespan.sh $N $MAXTOK\` (backend $BACKEND; the debate"
        echo "example scaled to $N questions by bench/make_debate_job.py, 3 participants +"
        echo "moderator, 3 rounds, max_tokens $MAXTOK, temperature 0, validation" \
             "$([ -n "$VALIDATION" ] && echo off || echo on)${BENCH_ARGS:+, options: $BENCH_ARGS})."
        echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, shared"
        echo "with other work (load average $LOAD0 at the start, $LOAD1 at the end)."
        echo
        cat "$OUT/report.md"
    } >> bench/results/history/jobs_kv.md
fi

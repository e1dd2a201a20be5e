#!/usr/bin/env bash
# issue51_call1.sh - the first device call of issues 51 and 38: every CUDA
# test (the expert kernels and the CUDA runner's mixture-of-experts block
# on qwen3moe, Mixtral and gpt-oss against the CPU runner among them, and
# the attention sinks in every kernel kind, issue 51),
# then correctness of every attention kernel kind and of the runner with
# each (bf16 and fp8 caches); memcheck of the expert tests; each attention
# kernel alone (bench_cuda_attn); compute-sanitizer on the attention tests.
# About 7 minutes on an H100 (BUDGET 380 s of stages).
# The 8B and 1B random models for call 2 are written in the background
# (setsid: they outlive this command while the machine stays warm).
#
# device tool: run {command: "bash .device/calls/issue51_call1.sh",
#                   carry: [".device"], timeout_s: 420}
# then at once (within the 30 s the machine stays warm):
#              run {command: "bash .device/calls/issue51_call2.sh", ...}
set -uo pipefail
source "$(dirname "$0")/common.sh"
BUDGET=${BUDGET:-380}
W=/tmp/parley-call1                  # kept on the machine: call 2 reads bench_attn.jsonl
rm -rf "$W"
mkdir -p "$W"
"$D/run.sh" unpack || { echo "unpack failed"; exit 1; }
# (CALL_DRY=1: a dry run of the script's mechanics on a machine without a GPU)
[ "${CALL_DRY:-0}" = 1 ] || setsid nohup bash -c \
    "'$D/run.sh' model 8b /tmp/parley-models; '$D/run.sh' model 1b /tmp/parley-models" \
    >/tmp/parley-models.log 2>&1 </dev/null &
stage 20 env
stage 200 test
stage 60 sanitize moe
stage 100 attn
stage 120 sanitize attn
send_back
echo "==== summary"
cat "$W/summary.txt"
echo "==== bench_cuda_attn"
grep '^#' "$W/bench_attn.txt" 2>/dev/null | tail -75

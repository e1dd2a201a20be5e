#!/usr/bin/env bash
# bench_gateway.sh - the cost of parley as a gateway: non-streaming chat
# completions (max_tokens 16) at 64 connections (wrk) against a parley mock
# upstream directly, and through a parley gateway (--upstream) in front of
# the same upstream. Runs alternate (direct, gateway, direct, ...), N each;
# medians. Prints a section for bench/results/history/gateway.md. Not a test.
#   bench/bench_gateway.sh [RUNS] (BENCH_SECONDS per run, default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench_gateway: needs wrk (apt-get install wrk)"; exit 2; }
ninja -C build >/dev/null
runs=${1:-3}
dur=${BENCH_SECONDS:-10}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start() { # OUTFILE ARGS... -> sets url
    local out=$1; shift
    build/parley serve --port 0 --log-level warn "$@" > "$out" &
    pids+=($!)
    for _ in $(seq 200); do grep -q listening "$out" && break; sleep 0.05; done
    url=$(grep -o 'http://[^ ]*' "$out" | head -1)
}
start build/bench_up.out --backend mock --served-model-name mock --mock-capacity 100000
up=$url
start build/bench_gw.out --upstream "$up/v1" --max-num-seqs 65536
gw=$url
upid=${pids[0]}; gpid=${pids[1]}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # utime + stime, clock ticks
tck=$(getconf CLK_TCK)
# one URL PID...: the wrk line plus the CPU microseconds per request the
# given processes spent (load-independent, unlike the latency figures).
one() {
    local url=$1; shift
    local before=0 after=0 p
    for p in "$@"; do before=$((before + $(cpu "$p"))); done
    local line; line=$(wrk -t1 -c64 -d"${dur}s" --latency -s bench/chat.lua "$url/v1/chat/completions" | grep RESULT)
    for p in "$@"; do after=$((after + $(cpu "$p"))); done
    local n; n=$(echo "$line" | sed 's/.*requests=\([0-9]*\).*/\1/')
    echo "$line cpu_us=$(echo "scale=1; ($after - $before) * 1000000 / $tck / $n" | bc)"
}
d=(); g=()
for i in $(seq "$runs"); do
    d+=("$(one "$up" "$upid")"); echo "direct  $i: ${d[-1]}  load $(cut -d' ' -f1 /proc/loadavg)"
    g+=("$(one "$gw" "$gpid" "$upid")"); echo "gateway $i: ${g[-1]}  load $(cut -d' ' -f1 /proc/loadavg)"
done
med() { sed "s/.*$1=\([0-9.]*\).*/\1/" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for k in rps p50_ms p99_ms cpu_us; do
    eval "d_$k=$(printf '%s\n' "${d[@]}" | med $k)"
    eval "g_$k=$(printf '%s\n' "${g[@]}" | med $k)"
done
errs=$(printf '%s\n' "${g[@]}" | sed 's/.*errors=\([0-9]*\).*/\1/' | paste -sd+ | bc)
echo
echo "| measure | mock directly | gateway -> mock | added |"
echo "|---|---|---|---|"
echo "| req/s | $d_rps | $g_rps | $(echo "scale=2; $g_rps / $d_rps" | bc)x |"
echo "| p50 ms | $d_p50_ms | $g_p50_ms | +$(echo "$g_p50_ms - $d_p50_ms" | bc) |"
echo "| p99 ms | $d_p99_ms | $g_p99_ms | +$(echo "$g_p99_ms - $d_p99_ms" | bc) |"
echo "| CPU us per request (server processes) | $d_cpu_us | $g_cpu_us (gateway + upstream) | +$(echo "$g_cpu_us - $d_cpu_us" | bc) |"
echo "gateway errors: $errs; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

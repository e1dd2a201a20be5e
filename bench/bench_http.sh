#!/usr/bin/env bash
# bench_http.sh - the gateway on the mock backend (zero delay), over loopback:
#  1. non-streaming chat completions (max_tokens 16) at 64 connections (wrk);
#  2. 2,000 concurrent SSE streams with a token every 50 ms: the server's
#     peak RSS.
# Prints the figures and appends them to bench/results/history/gateway.md (the
# log behind BENCHMARKS.md's gateway table). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench_http: needs wrk (apt-get install wrk)"; exit 2; }
ninja -C build >/dev/null
cc -O2 -o build/sse_hold bench/sse_hold.c

dur=${BENCH_SECONDS:-10}
start_server() {
    build/parley serve --port 0 --backend mock --log-level warn "$@" > build/bench_srv.out &
    pid=$!
    for _ in $(seq 100); do grep -q listening build/bench_srv.out && break; sleep 0.05; done
    url=$(grep -o 'http://[^ ]*' build/bench_srv.out)
    port=${url##*:}
}
stop_server() { kill "$pid"; wait "$pid" || true; }

# 1. non-streaming throughput: 3 runs, median.
start_server --mock-capacity 100000
runs=()
for i in 1 2 3; do
    line=$(wrk -t1 -c64 -d"${dur}s" --latency -s bench/chat.lua "$url/v1/chat/completions" | grep RESULT)
    echo "run $i: $line"
    runs+=("$line")
done
stop_server
median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
rps=$(median $(printf '%s\n' "${runs[@]}" | sed 's/.*rps=\([0-9.]*\).*/\1/'))
p50=$(median $(printf '%s\n' "${runs[@]}" | sed 's/.*p50_ms=\([0-9.]*\).*/\1/'))
p99=$(median $(printf '%s\n' "${runs[@]}" | sed 's/.*p99_ms=\([0-9.]*\).*/\1/'))

# 2. 2,000 concurrent streams, 50 ms per token, 40 tokens each (~2 s).
start_server --mock-capacity 100000 --mock-token-delay-ms 50
peak=0
( while kill -0 "$pid" 2>/dev/null; do
      r=$(awk '/VmHWM/{print $2}' /proc/$pid/status 2>/dev/null || echo 0)
      echo "$r" > build/bench_rss; sleep 0.2; done ) &
watcher=$!
sse=$(build/sse_hold 127.0.0.1 "$port" 2000 40 | grep RESULT)
peak=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
kill $watcher 2>/dev/null || true
stop_server
echo "$sse"

machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
{
    echo
    echo "### Gateway on the mock backend ($(date -u +%Y-%m-%d))"
    echo
    echo "Command: \`bench/bench_http.sh\` (wrk -t1 -c64 -d${dur}s, 3 runs, median). Machine: $machine."
    echo "wrk shares the 2 cores with the server."
    echo
    echo "| measure | value | target |"
    echo "|---|---|---|"
    echo "| non-stream chat, 64 conns, max_tokens 16: req/s | $rps | >= 20,000 |"
    echo "| p50 latency (ms) | $p50 | |"
    echo "| p99 latency (ms) | $p99 | < 5 |"
    echo "| 2,000 concurrent SSE streams, 50 ms/token: $(echo "$sse" | sed 's/RESULT //') | peak RSS $((peak / 1024)) MiB | report |"
} | tee -a bench/results/history/gateway.md

#!/usr/bin/env bash
# bench_http_ab.sh A_BIN B_BIN [ROUNDS] - bench_http.sh's two measures for
# two parley binaries (e.g. a commit before a change and after it), run
# alternately A B A B ... so both see the same load on a shared machine:
#  1. non-streaming chat completions (max_tokens 16), wrk -t1 -c64;
#  2. 2,000 concurrent SSE streams, 50 ms/token, 40 tokens: wall time and
#     the server's peak RSS.
# Prints every run with the load average, then medians and B/A ratios.
# Not a test; nothing is appended anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/bench_http_ab.sh A_BIN B_BIN [ROUNDS]"; exit 2; }
command -v wrk >/dev/null || { echo "bench_http_ab: needs wrk"; exit 2; }
bins=("$1" "$2")
rounds=${3:-5}
dur=${BENCH_SECONDS:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/sse_hold" bench/sse_hold.c

start_server() {   # bin, extra args...
    local bin=$1; shift
    # 2,000 streams need more than the default 1,000 connections (503 past it).
    "$bin" serve --port 0 --backend mock --log-level warn --max-connections 4000 "$@" \
        > "$tmp/srv.out" &
    pid=$!
    for _ in $(seq 200); do grep -q listening "$tmp/srv.out" && break; sleep 0.05; done
    url=$(grep -o 'http://[^ ]*' "$tmp/srv.out")
    port=${url##*:}
}
stop_server() { kill "$pid"; wait "$pid" || true; }
load() { cut -d' ' -f1 /proc/loadavg; }

for r in $(seq "$rounds"); do
    for k in 0 1; do
        name=$([ $k = 0 ] && echo A || echo B)
        start_server "${bins[$k]}" --mock-capacity 100000
        l0=$(load)
        line=$(wrk -t1 -c64 -d"${dur}s" --latency -s bench/chat.lua \
               "$url/v1/chat/completions" | grep RESULT)
        stop_server
        start_server "${bins[$k]}" --mock-capacity 100000 --mock-token-delay-ms 50
        sse=$("$tmp/sse_hold" 127.0.0.1 "$port" 2000 40 | grep RESULT |
              sed 's/RESULT //; s/\([a-z]*\)=/sse_\1=/g')
        peak=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
        stop_server
        echo "round $r $name load=$l0 ${line#RESULT } $sse rss_kib=$peak" \
            | tee -a "$tmp/runs"
    done
done

med() {   # field, A|B
    grep " $2 " "$tmp/runs" | sed -n "s/.* $1=\([0-9.]*\).*/\1/p" | sort -n |
        awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'
}
echo
echo "medians over $rounds alternated rounds (load average 1 min: $(med load A) A, $(med load B) B)"
printf '%-22s %12s %12s %8s\n' measure A B B/A
for f in rps p50_ms p99_ms sse_seconds rss_kib; do
    a=$(med "$f" A); b=$(med "$f" B)
    printf '%-22s %12s %12s %8s\n' "$f" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a ? b / a : 0}')"
done

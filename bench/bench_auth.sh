#!/usr/bin/env bash
# bench_auth.sh - the cost of API keys: the gateway on the mock backend,
# non-streaming chat (max_tokens 16) at 64 connections, with no key and with
# --api-key (10 keys configured, the request's key last, so the constant-
# time check walks them all). Runs alternate (off, on) x RUNS on the same
# machine; prints medians of req/s and p99 side by side with the load
# average. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench_auth: needs wrk (apt-get install wrk)"; exit 2; }
ninja -C build >/dev/null
dur=${BENCH_SECONDS:-8}
runs=${RUNS:-3}
keys=()
for i in $(seq 9); do keys+=(--api-key "sk-parley-bench-key-number-$i-0123456789abcdef"); done
key="sk-parley-bench-key-the-right-one-0123456789abcdef"

start_server() {
    build/parley serve --port 0 --backend mock --log-level warn --no-access-log \
        --mock-capacity 100000 "$@" > build/bench_auth_srv.out &
    pid=$!
    for _ in $(seq 100); do grep -q listening build/bench_auth_srv.out && break; sleep 0.05; done
    url=$(grep -o 'http://[^ ]*' build/bench_auth_srv.out)
}
stop_server() { kill "$pid"; wait "$pid" || true; }

one() {  # $1 = off|on
    if [ "$1" = on ]; then
        start_server "${keys[@]}" --api-key "$key"
        PARLEY_BENCH_KEY=$key wrk -t1 -c64 -d"${dur}s" --latency -s bench/chat.lua \
            "$url/v1/chat/completions" | grep RESULT
    else
        start_server
        PARLEY_BENCH_KEY= wrk -t1 -c64 -d"${dur}s" --latency -s bench/chat.lua \
            "$url/v1/chat/completions" | grep RESULT
    fi
    stop_server
}

off=(); on=()
for i in $(seq "$runs"); do
    l=$(one off); echo "off run $i: $l (load $(cut -d' ' -f1 /proc/loadavg))"; off+=("$l")
    l=$(one on); echo "on  run $i: $l (load $(cut -d' ' -f1 /proc/loadavg))"; on+=("$l")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { printf '%s\n' "${@:2}" | sed "s/.*$1=\([0-9.]*\).*/\1/"; }
for k in rps p99_ms errors; do
    printf '%-7s off %s  on %s\n' "$k" "$(med $(field $k "${off[@]}"))" "$(med $(field $k "${on[@]}"))"
done
echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg)"

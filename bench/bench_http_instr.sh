#!/usr/bin/env bash
# bench_http_instr.sh BIN [BIN...] - instructions the server runs per
# non-streaming chat completion on the mock backend, counted by callgrind:
# the same body as bench/chat.lua, 2,000 requests over 8 keep-alive
# connections, minus a run that serves none (start-up and shutdown).
# Counts do not depend on what else loads the machine, so this compares
# binaries where wrk's req/s swings by 30 % between rounds. Not a test.
# Needs valgrind. Prints one line per binary and the ratio to the first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/bench_http_instr.sh BIN [BIN...]"; exit 2; }
command -v valgrind >/dev/null || { echo "bench_http_instr: needs valgrind"; exit 2; }
n=${BENCH_REQUESTS:-2000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() {   # bin, requests -> instructions executed by the whole server run
    local bin=$1 reqs=$2
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        "$bin" serve --port 0 --backend mock --log-level warn --mock-capacity 100000 \
        > "$tmp/srv.out" 2> "$tmp/vg.err" &
    local pid=$!
    for _ in $(seq 600); do grep -q listening "$tmp/srv.out" && break; sleep 0.1; done
    local url port
    url=$(grep -o 'http://[^ ]*' "$tmp/srv.out")
    port=${url##*:}
    python3 bench/http_fixed_client.py "$port" 8 $((reqs / 8)) >&2
    kill "$pid"
    wait "$pid" || true
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/vg.err"
}

first=""
printf '%-40s %14s %10s\n' binary instr/request ratio
for bin in "$@"; do
    base=$(count "$bin" 0)
    total=$(count "$bin" "$n")
    per=$(( (total - base) / n ))
    [ -n "$first" ] || first=$per
    printf '%-40s %14d %10.3f\n' "$bin" "$per" "$(echo "$per / $first" | bc -l)"
done

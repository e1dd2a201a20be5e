#!/usr/bin/env bash
# bench_remote_debate.sh - the debate example (scaled by make_debate_job.py)
# run by a parley gateway (`parley run --upstream`) against upstream parley
# CPU engines: 1 upstream, 2 upstreams with conversation affinity, 2 without
# (--no-upstream-affinity), and `llama`: llama.cpp's llama-server (the
# peer, LLAMA_SERVER) serving the same file as the one upstream, with
# --parallel slots (BENCH_LLAMA_NP, default 8) of BENCH_LLAMA_CTX tokens
# each (default 2048) and its own prompt cache; and `local`: no gateway,
# parley's in-process engine running the job itself (--backend cpu, the
# engine's options as the upstreams'), as a user who drops the peer runs
# it. Each configuration gets freshly started
# upstreams (cold prefix caches). Reports makespan, the 1 vs 2 ratio, and
# the share of round >= 2 prompt tokens the upstreams served from their
# prefix cache (cached_tokens in the usage they return, from the
# transcripts). Not a test.
#   bench/bench_remote_debate.sh [QUESTIONS [MAX_TOKENS]]   (defaults 6, 24)
# Env: PARLEY_MODEL, BENCH_OUT (default /tmp/parley-remote-debate),
#      BENCH_CONFIGS (default "one two two_noaff"), BENCH_THREADS (1 per engine),
#      PARLEY_BIN (default build/parley: the gateway and the engines),
#      BENCH_KV_MB (each engine's --kv-cache-mb, default 256: its capacity),
#      LLAMA_SERVER (the `llama` configuration's binary, default
#      bench/build_llama_server.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-6}
MAXTOK=${2:-24}
OUT=${BENCH_OUT:-/tmp/parley-remote-debate}
CONFIGS=${BENCH_CONFIGS:-one two two_noaff}
BIN=${PARLEY_BIN:-build/parley}
MODEL=${PARLEY_MODEL:-$HOME/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf}
rm -rf "$OUT"; mkdir -p "$OUT"
JOB="$OUT/debate_$N.yaml"
bench/make_debate_job.py --questions "$N" --max-tokens "$MAXTOK" --temperature 0 \
    --no-validation --experiment debate_remote > "$JOB"
# engine() runs in a command substitution (a subshell), so it records its
# engine's pid in a file for cleanup().
PIDS="$OUT/engine.pids"
cleanup() {
    [ -f "$PIDS" ] || return 0
    while read -r p; do
        kill "$p" 2>/dev/null || true
        while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    done < "$PIDS"
    rm -f "$PIDS"
}
trap cleanup EXIT
engine() { # -> url
    local out; out=$(mktemp "$OUT/engine.XXXX")
    "$BIN" serve --port 0 --backend cpu --model "$MODEL" --threads "${BENCH_THREADS:-1}" \
        --served-model-name smollm --kv-cache-mb "${BENCH_KV_MB:-256}" --log-level warn > "$out" 2>&1 &
    echo $! >> "$PIDS"
    for _ in $(seq 600); do grep -q listening "$out" && break; sleep 0.1; done
    grep -o 'http://[^ ]*' "$out" | head -1
}
llama() { # -> url
    local out port; out=$(mktemp "$OUT/llama.XXXX")
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    local np=${BENCH_LLAMA_NP:-8}
    "${LLAMA_SERVER:-$(bench/build_llama_server.sh)}" -m "$MODEL" --host 127.0.0.1 --port "$port" \
        -t "${BENCH_THREADS:-1}" -tb "${BENCH_THREADS:-1}" --parallel "$np" \
        -c $((np * ${BENCH_LLAMA_CTX:-2048})) --alias smollm --no-webui > "$out" 2>&1 &
    echo $! >> "$PIDS"
    for _ in $(seq 1200); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 0.1
    done
    echo "http://127.0.0.1:$port"
}
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for c in $CONFIGS; do
    if [ "$c" = local ]; then      # the in-process engine, no gateway: parley as it runs a job
        echo "== local: --backend cpu (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        "$BIN" run "$JOB" --backend cpu --model "$MODEL" --threads "${BENCH_THREADS:-1}" \
            --kv-cache-mb "${BENCH_KV_MB:-256}" --output "$OUT/$c" --stats "$OUT/$c.stats.json" \
            --log-level warn 2> "$OUT/$c.log" || true
        tail -1 "$OUT/$c.log" >&2
        continue
    fi
    if [ "$c" = llama ]; then e1=$(llama); else e1=$(engine); fi
    ups=(--upstream "$e1/v1"); extra=()
    if [ "$c" = two ] || [ "$c" = two_noaff ]; then e2=$(engine); ups+=(--upstream "$e2/v1"); fi
    [ "$c" = two_noaff ] && extra=(--no-upstream-affinity)
    echo "== $c: ${ups[*]} ${extra[*]} (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    "$BIN" run "$JOB" "${ups[@]}" "${extra[@]}" --output "$OUT/$c" \
        --stats "$OUT/$c.stats.json" --log-level warn 2> "$OUT/$c.log" || true
    tail -1 "$OUT/$c.log" >&2
    cleanup
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" $CONFIGS <<'PY'
import glob, json, os, sys
out, cfgs = sys.argv[1], sys.argv[2:]
rows = {}
for c in cfgs:
    st = json.load(open(os.path.join(out, c + ".stats.json")))
    p2 = c2 = p1 = c1 = reqs = 0
    for f in glob.glob(os.path.join(out, c, "*", "transcripts", "*.json")):
        for a in json.load(open(f)).get("attempts", []):
            reqs += 1
            if a["round"] >= 1:
                p2 += a["prompt_tokens"]; c2 += a["cached_tokens"]
            else:
                p1 += a["prompt_tokens"]; c1 += a["cached_tokens"]
    be = (st.get("backends") or [{}])[0]
    caps = "/".join(str(r.get("capacity")) for r in be.get("replicas", []))
    rows[c] = dict(ms=st["makespan_ms"], ok=st["succeeded"], failed=st["failed"], reqs=reqs,
                   hits=be.get("affinity_hits", 0), moves=be.get("affinity_moves", 0), caps=caps,
                   hit2=c2 / p2 if p2 else 0, c2=c2, p2=p2, hit1=c1 / p1 if p1 else 0)
print("| upstreams | makespan (s) | round>=2 prompt tokens from upstream prefix cache | round 1 | requests | succeeded/failed | affinity hits/moves | replica capacity |")
print("|---|---|---|---|---|---|---|---|")
names = {"one": "1 CPU engine", "llama": "1 llama-server", "local": "none: the in-process engine", "two": "2 CPU engines, affinity on", "two_noaff": "2 CPU engines, affinity off"}
for c in cfgs:
    r = rows[c]
    print("| %s | %.1f | %.1f%% (%d/%d) | %.1f%% | %d | %d/%d | %d/%d | %s |" % (names.get(c, c),
          r["ms"] / 1e3, 100 * r["hit2"], r["c2"], r["p2"], 100 * r["hit1"], r["reqs"], r["ok"],
          r["failed"], r["hits"], r["moves"], r["caps"]))
if "one" in rows and "two" in rows:
    print("\nmakespan 1 upstream / 2 upstreams: %.2fx" % (rows["one"]["ms"] / rows["two"]["ms"]), end="")
    if "two_noaff" in rows:
        print("; affinity off / on: %.2fx" % (rows["two_noaff"]["ms"] / rows["two"]["ms"]), end="")
    print(".")
if "one" in rows and "llama" in rows:
    print("\nmakespan llama-server / parley engine behind the remote backend: %.2fx" %
          (rows["llama"]["ms"] / rows["one"]["ms"]))
if "local" in rows and "llama" in rows:
    print("\nmakespan llama-server behind the remote backend / parley's in-process engine: %.2fx" %
          (rows["llama"]["ms"] / rows["local"]["ms"]))
PY
echo "load average: $LOAD0 at the start, $LOAD1 at the end"

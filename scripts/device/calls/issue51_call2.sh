#!/usr/bin/env bash
# issue51_call2.sh [KIND KIND] - the second device call (issue 38's benchmarks):
# bench_cuda_runner at 256 sequences (prompt 512 / output 256) on the 8B
# shape (default, prefill on tensor cores, the two best decode kinds, the
# fp8 cache, one --cuda-profile run) and the 1B shape (the same without
# the profile), then the 1,000-question debate with prompt_layout
# shared_prefix beside the seed layout if the budget allows. About 4-5
# minutes with the models call 1 wrote (+2 minutes when they are absent).
# KIND: split, split16, mma or rows; default: the two fastest decode kinds
# that passed their checks in call 1's bench_cuda_attn (8B, bf16, 256 rows,
# both contexts), else split16 and mma.
#
# device tool: run {command: "bash .device/calls/issue51_call2.sh",
#                   carry: [".device"], timeout_s: 480}
set -uo pipefail
source "$(dirname "$0")/common.sh"
BUDGET=${BUDGET:-440}
W=/tmp/parley-call2
rm -rf "$W"
mkdir -p "$W"
flag() {
    case "$1" in split) echo default ;; split16) echo --split16 ;; mma) echo --decode-mma ;;
                 rows) echo --rows-attn ;; *) echo "issue51_call2: kind $1?" >&2; echo default ;;
    esac
}
kinds="${*:-}"
if [ -z "$kinds" ] && [ -f /tmp/parley-call1/bench_attn.jsonl ]; then
    kinds="$(python3 - /tmp/parley-call1/bench_attn.jsonl <<'PY'
import json, sys
ms = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if (r["bench"], r["shape"], r["kv"], r["rows"]) != ("decode", "8b", "bf16", 256):
        continue
    if r["kernel"] == "rows":
        continue
    ms.setdefault(r["kernel"], 0.0)
    ms[r["kernel"]] += r["ms"] if r["check"] == "ok" else 1e9
print(" ".join(sorted(ms, key=ms.get)[:2]))
PY
)"
fi
[ -n "$kinds" ] || kinds="split16 mma"
echo "== decode kinds benchmarked beside the default: $kinds" | tee -a "$W/summary.txt"
variants="default --prefill-mma --kv-fp8"
for k in $kinds; do
    f="$(flag "$k")"
    [ "$f" = default ] || variants="$variants $f"
done
BENCH_SEQS=256 BENCH_VARIANTS="$variants" BENCH_PROFILE=1 stage 330 bench 8b
BENCH_SEQS=256 BENCH_VARIANTS="$variants" stage 120 bench 1b
if [ "$(left)" -gt 240 ]; then         # each layout gets half of what is left
    each=$(( ($(left) - 30) / 2 ))
    for layout in shared_prefix seed; do
        DEBATE_LAYOUT=$layout DEBATE_STRATEGIES=parley DEBATE_TIMEOUT=$(( each - 10 )) \
            stage "$each" debate 1000
    done
fi
send_back
echo "==== summary"
cat "$W/summary.txt"
for s in 8b 1b; do
    echo "==== bench $s (seqs 256)"
    python3 - "$W/bench_$s.jsonl" <<'PY' 2>/dev/null
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    ph = r.get("decode_phases_ms", {})
    print(f'{r["decode_attn"]:8s} prefill_mma={str(r["prefill_mma"]):5s} kv={r["kv_cache_dtype"]:4s}'
          f' graphs={str(r["graphs"]):5s} prefill {r["prefill_tok_s"]:9.0f} tok/s'
          f' decode {r["decode_tok_s"]:8.0f} tok/s step {r["decode_step_ms"]:7.3f} ms'
          f' gap {r["decode_idle_gap_ms"]:6.3f} ms blocks {r["kv_blocks"]}'
          + (f' attn_dec {ph.get("attn_decode", 0):.0f} ms of {sum(ph.values()):.0f}' if ph else ""))
PY
done

#!/usr/bin/env bash
# run.sh - the GPU machine's side of the device bundle (made by
# scripts/device_bundle.sh; copied to .device/run.sh). Each stage fits one
# 10-minute command and writes its logs and JSON figures under OUTDIR.
#
# usage: .device/run.sh STAGE [OUTDIR] [ARGS]
#   unpack           unpack payload.tar.xz into .device/bin and .device/lib
#                    (done by every stage when needed)
#   env              GPU, driver, CUDA, cuBLAS, python packages -> env.txt
#   test             every CUDA test: kernels vs their C references, the
#                    runner vs the CPU reference figures (test_cuda_ref),
#                    graph-capture fallback, NaN guard, ... -> tests.log;
#                    then test_cuda_ref with every other kernel kind and the
#                    fp8 cache, test_cuda_runner with the tensor-core kinds
#                    and fp8 (TEST_VARIANTS narrows the second part)
#   sanitize [attn|moe] compute-sanitizer memcheck + racecheck on the kernel
#                    and runner tests, memcheck on a short serving run; attn:
#                    the attention kernel tests only (their small cases); moe:
#                    memcheck of test_cuda_moe and of the qwen3moe runner test
#   attn             bench_cuda_attn: each attention kernel alone (8B and 1B
#                    shapes, bf16 and fp8 caches) -> bench_attn.jsonl
#   serve [N] [SHAPE] parley serve --backend cuda on a random 1B (or 8B) model;
#                    N (256) concurrent streaming chat requests (stdlib
#                    client), async then sync scheduling; outputs compared
#   bench SHAPE      1b or 8b: bench_cuda_runner at 1/64/256 sequences,
#                    prompt $PROMPT (512) / output $GEN (256): prefill and
#                    decode tok/s, step time, idle gap; the defaults (graphs,
#                    async, split-KV attention), split16 and row attention,
#                    tensor-core decode and prefill attention (--decode-mma,
#                    --prefill-mma), the fp8 cache (--kv-fp8),
#                    sync scheduling, and eager (1b only). BENCH_SEQS and
#                    BENCH_VARIANTS narrow it; BENCH_PROFILE=1 adds one
#                    --no-graphs --cuda-profile run per sequence count.
#   hf SHAPE         the HF transformers peer: generate at batch 1/64/256
#                    with the same random weights (bf16)
#   debate [N]       parley run on the debate example at N (1000) questions,
#                    random 1B model, parley then fcfs: --stats JSON;
#                    DEBATE_LAYOUT=shared_prefix sets the job's prompt_layout
#   model SHAPE      write the random model of SHAPE (1b, 8b) for later stages
# serve also runs the official openai client (usage exact; constrained JSON
# replies) when SDK_SITE names a folder holding the openai package.
#   all              env test (the quick ones)
# OUTDIR defaults to ./device-out. Models are written to $PARLEY_DEVICE_MODELS
# (default /tmp/parley-models) and kept for later stages of the same machine.
set -uo pipefail
D="$(cd "$(dirname "$0")" && pwd)"
STAGE="${1:?usage: $0 unpack|env|test|sanitize|serve|bench|hf|all [OUTDIR] [ARGS]}"
OUT="${2:-device-out}"
shift $(( $# >= 2 ? 2 : $# ))
MODELS="${PARLEY_DEVICE_MODELS:-/tmp/parley-models}"
PROMPT="${PROMPT:-512}"   # the issue's shape: prompt 512, output 256
GEN="${GEN:-256}"
PY="${PYTHON:-python3}"

log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

unpack() {
    if [ -x "$D/bin/parley" ] && [ "$D/bin/parley" -nt "$D/payload.tar.xz" ]; then
        return 0
    fi
    [ -f "$D/payload.tar.xz" ] || { echo "run.sh: $D/payload.tar.xz missing" >&2; return 1; }
    # python's lzma: no xz binary needed
    "$PY" - "$D" <<'EOF' || return 1
import sys, tarfile
d = sys.argv[1]
with tarfile.open(d + "/payload.tar.xz", "r:xz") as t:
    t.extractall(d)
EOF
    touch "$D/bin"/*
}

# cuBLAS is dlopen()ed (libcublas.so.13): the toolkit's, else the one the
# python CUDA wheels carry.
find_cublas() {
    local d
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 \
             /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/libcublas.so.13" ] && { echo "$d"; return; }
    done
    "$PY" - <<'EOF' 2>/dev/null
import glob, os, site, sys
for sp in site.getsitepackages() + [os.path.dirname(os.path.dirname(os.__file__))]:
    for p in glob.glob(sp + "/nvidia/**/libcublas.so.13", recursive=True):
        print(os.path.dirname(p)); sys.exit(0)
EOF
}

prepare() {
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    unpack || exit 1
    local cb
    cb="$(find_cublas)"
    if [ -n "$cb" ]; then
        export LD_LIBRARY_PATH="$cb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    command -v compute-sanitizer >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
    mkdir -p "$MODELS"
}

# The file appears whole (written aside, then renamed) and one writer at a
# time makes it (a stage started while another writes it waits: a model
# written in the background by an earlier call is used when it is done).
make_model() {  # shape type -> path
    local p="$MODELS/random-$1-$2.gguf"
    (
        flock 9
        [ -f "$p" ] || { "$PY" "$D/py/make_random_gguf.py" model "$1" "$p.part" --type "$2" \
                             --tokenizer "$D/models/tokenizer.gguf" >&2 && mv "$p.part" "$p"; }
    ) 9>"$p.lock" || return 1
    [ -f "$p" ] && echo "$p"
}

stage_env() {
    { date -u; uname -a; nvidia-smi || echo "nvidia-smi: not found"
      nvcc --version 2>/dev/null || echo "nvcc: not on PATH"
      echo "cuBLAS: $(find_cublas || true)"
      "$D/bin/parley" --version
      "$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
      "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1
      compute-sanitizer --version 2>&1 | tail -1
      nproc; free -g; df -h /tmp; } >"$OUT/env.txt" 2>&1
    log "env: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no GPU'); cuBLAS at $(find_cublas || echo none)"
}

# One Criterion binary; its summary line into the summary.
run_test() {  # binary [args]
    local b="$1" rc
    shift
    "$D/bin/$b" --verbose "$@" >"$OUT/$b.log" 2>&1
    rc=$?
    log "test $b: rc=$rc; $(grep -o 'Tested: .*' "$OUT/$b.log" | tail -1)$(grep -h 'vs cpu' "$OUT/$b.log" | sed 's/^/; /' | tr '\n' ' ')"
    return $rc
}

stage_test() {
    local st=0 ref
    export PARLEY_REF_FIXTURE="$D/fixtures/cpu_ref.txt"
    ref="$(make_model ref bf16)" || { log "test: ref model generation FAILED"; return 1; }
    if [ "$(sha256sum "$ref" | awk '{print $1}')" != "$(cat "$D/fixtures/ref-bf16.sha256")" ]; then
        log "test: $ref differs from the model the CPU figures were computed on"
        return 1
    fi
    export PARLEY_REF_MODEL="$ref" PARLEY_MODEL="$ref"   # test_cuda_runner: any model
    for b in test_cuda_kernels test_cuda_io test_cuda_weights test_cuda_ref test_cuda_runner \
             test_cuda_constrain test_cuda_moe test_cuda_moe_host test_cuda_encode test_cuda_ssm test_cuda_gemma4; do
        PARLEY_SRC="$(dirname "$D")" run_test "$b" || st=1   # test_cuda_moe*: the tree's tests/fixtures
    done
    # The newer architectures (qwen3, gemma2, gemma3) and the mixtures of
    # experts (qwen3moe, Mixtral, gpt-oss) against the CPU runner, on random
    # models written here (bench/make_random_gguf.py ref-*).
    if [ -x "$D/bin/test_cuda_families" ]; then
        for a in ref-qwen3 ref-gemma2 ref-gemma3 ref-qwen3moe ref-mixtral ref-gptoss; do
            make_model "$a" bf16 >/dev/null || { log "test: $a model generation FAILED"; st=1; }
        done
        PARLEY_FAMILY_MODELS="$MODELS" run_test test_cuda_families || st=1
    fi
    # The runner again with the other attention kernels and the fp8 cache
    # (split-KV decode, tiled prefill and bf16 are the defaults): test_cuda_ref
    # (fast) with each, test_cuda_runner with the candidates for a default.
    local a b
    for a in ${TEST_VARIANTS:-ref:PARLEY_CUDA_DECODE_ATTN=rows ref:PARLEY_CUDA_DECODE_ATTN=split16
             both:PARLEY_CUDA_DECODE_ATTN=mma both:PARLEY_CUDA_PREFILL_ATTN=mma
             both:PARLEY_KV_CACHE_DTYPE=fp8}; do
        for b in test_cuda_ref test_cuda_runner; do
            [ "${a%%:*}" = ref ] && [ $b = test_cuda_runner ] && continue
            local v="${a#*:}" tag="${a#*:PARLEY_}"
            env "$v" "$D/bin/$b" --verbose --jobs 1 >"$OUT/${b}_$tag.log" 2>&1 || st=1
            log "test $b ($v): $(grep -o 'Tested: .*' "$OUT/${b}_$tag.log" | tail -1)$(grep -h 'vs cpu' "$OUT/${b}_$tag.log" | sed 's/^/; /' | tr '\n' ' ')"
        done
    done
    # Skipped tests are counted by Criterion as passing; list them.
    log "test: $(cat "$OUT"/test_cuda_*.log | grep -c '\[SKIP\]') tests skipped (no GPU or no fixture)"
    return $st
}

# The attention kernel tests under memcheck and racecheck: their small
# cases (the long contexts and the 65,535-sequence grid take minutes there).
stage_sanitize_attn() {
    local st=0 tool rc cs="compute-sanitizer --error-exitcode 99"
    for tool in memcheck racecheck; do
        timeout "${SANITIZE_TIMEOUT:-150}" $cs --tool $tool "$D/bin/test_cuda_kernels" --jobs 1 \
            --filter 'cuda_attn/@(base_cases_every_kind|unmapped_blocks_are_left_out|fp8_cache_every_kind)' \
            >"$OUT/${tool}_attn.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && st=1
        log "sanitize $tool attention: rc=$rc; $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/${tool}_attn.log" | sort | uniq -c | tr '\n' ' ')$(grep -o 'Tested: .*' "$OUT/${tool}_attn.log" | tail -1)"
    done
    return $st
}

# memcheck of the expert kernels (test_cuda_moe) and of the CUDA runner's
# expert block end to end (test_cuda_families on ref-qwen3moe).
stage_sanitize_moe() {
    local st=0 rc cs="compute-sanitizer --error-exitcode 99 --tool memcheck"
    PARLEY_SRC="$(dirname "$D")" timeout "${SANITIZE_TIMEOUT:-100}" $cs "$D/bin/test_cuda_moe" \
        --jobs 1 >"$OUT/memcheck_moe.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && st=1
    log "sanitize memcheck test_cuda_moe: rc=$rc; $(grep -h 'ERROR SUMMARY' "$OUT/memcheck_moe.log" | sort | uniq -c | tr '\n' ' ')$(grep -o 'Tested: .*' "$OUT/memcheck_moe.log" | tail -1)"
    if [ -x "$D/bin/test_cuda_families" ] && make_model ref-qwen3moe bf16 >/dev/null; then
        PARLEY_FAMILY_MODELS="$MODELS" timeout "${SANITIZE_TIMEOUT:-100}" $cs \
            "$D/bin/test_cuda_families" --jobs 1 --filter 'cuda_families/qwen3moe_matches_cpu_runner' \
            >"$OUT/memcheck_families_moe.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && st=1
        log "sanitize memcheck qwen3moe runner: rc=$rc; $(grep -h 'ERROR SUMMARY' "$OUT/memcheck_families_moe.log" | sort | uniq -c | tr '\n' ' ')$(grep -o 'Tested: .*' "$OUT/memcheck_families_moe.log" | tail -1)"
    fi
    return $st
}

stage_sanitize() {
    [ "${1:-}" = attn ] && { stage_sanitize_attn; return; }
    [ "${1:-}" = moe ] && { stage_sanitize_moe; return; }
    local st=0 cs="compute-sanitizer --error-exitcode 99 --target-processes all"
    export PARLEY_REF_FIXTURE="$D/fixtures/cpu_ref.txt"
    PARLEY_REF_MODEL="$(make_model ref bf16)" || return 1
    export PARLEY_REF_MODEL PARLEY_MODEL="$PARLEY_REF_MODEL"
    for tool in memcheck racecheck; do
        for b in test_cuda_kernels test_cuda_constrain test_cuda_moe test_cuda_ref test_cuda_runner; do
            PARLEY_SRC="$(dirname "$D")" $cs --tool $tool "$D/bin/$b" --jobs 1 >"$OUT/${tool}_$b.log" 2>&1 || st=1
            # the kernels named in reports (cuBLAS's own are nvjet*/sm90_*)
            log "sanitize $tool $b: $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/${tool}_$b.log" | sort | uniq -c | tr '\n' ' ')$(grep -ho 'access at [A-Za-z0-9_]*' "$OUT/${tool}_$b.log" | sort -u | sed 's/access at /; kernel /' | tr '\n' ' ')"
        done
    done
    # A short serving run under memcheck: 8 streaming requests.
    serve_run "$PARLEY_REF_MODEL" memcheck_serve 8 16 "$cs --tool memcheck" || st=1
    log "sanitize serve: $(grep -h 'ERROR SUMMARY' "$OUT/memcheck_serve.server.log" | tail -1)"
    return $st
}

# Start parley serve (port 0), run the client, stop the server.
serve_run() {  # model tag n_requests max_tokens [wrapper] [extra parley args...]
    local model="$1" tag="$2" n="$3" maxtok="$4" wrap="${5:-}" port pid i
    shift 5 2>/dev/null || shift $#
    $wrap "$D/bin/parley" serve --backend cuda --model "$model" --host 127.0.0.1 --port 0 \
        --max-num-seqs 256 --max-model-len 4096 "$@" >"$OUT/$tag.server.log" 2>&1 &
    pid=$!
    for i in $(seq 1 600); do
        port="$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$OUT/$tag.server.log" | grep -o '[0-9]*$')"
        [ -n "$port" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.5
    done
    if [ -z "$port" ]; then
        log "serve $tag: the server did not start (see $tag.server.log)"
        kill $pid 2>/dev/null; wait $pid 2>/dev/null
        return 1
    fi
    "$PY" "$D/py/stream_client.py" --port "$port" --requests "$n" --max-tokens "$maxtok" \
        --out "$OUT/$tag.json" >"$OUT/$tag.client.log" 2>&1
    local rc=$?
    if [ -n "${SDK_SITE:-}" ]; then   # the official openai client: usage exact, constrained
        PYTHONPATH="$SDK_SITE" "$PY" "$D/py/sdk_client.py" --port "$port" --requests "$n" \
            --max-tokens "$maxtok" --out "$OUT/$tag.sdk.json" >>"$OUT/$tag.client.log" 2>&1 || rc=1
        PYTHONPATH="$SDK_SITE" "$PY" "$D/py/sdk_client.py" --port "$port" --requests "$n" \
            --max-tokens 64 --constrained --out "$OUT/$tag.sdk_json.json" \
            >>"$OUT/$tag.client.log" 2>&1 || rc=1
        log "serve $tag sdk: $(grep -h '"client"' "$OUT/$tag.client.log" | tr '\n' ' ')"
    fi
    kill -INT $pid 2>/dev/null
    wait $pid 2>/dev/null
    log "serve $tag: client rc=$rc; $(tail -1 "$OUT/$tag.client.log")"
    return $rc
}

stage_serve() {  # [N] [SHAPE: 1b (default) or 8b]
    local n="${1:-256}" full m st=0
    full="$(shape_name "${2:-1b}")" || return 2
    m="$(make_model "$full" bf16)" || { log "serve: model generation FAILED"; return 1; }
    serve_run "$m" serve_async "$n" 128 "" --async-scheduling || st=1
    serve_run "$m" serve_sync "$n" 128 "" --no-async-scheduling || st=1
    "$PY" "$D/py/stream_client.py" --compare "$OUT/serve_async.json" "$OUT/serve_sync.json" \
        >>"$OUT/summary.txt" 2>&1 || st=1
    if [ -n "${SDK_SITE:-}" ]; then
        "$PY" "$D/py/stream_client.py" --compare "$OUT/serve_async.sdk_json.json" \
            "$OUT/serve_sync.sdk_json.json" >>"$OUT/summary.txt" 2>&1 || st=1
    fi
    tail -2 "$OUT/summary.txt"
    return $st
}

# The debate example scaled to N questions (3 participants + moderator, 3
# rounds, constrained answer lines, max_tokens 64) on the random 1B model:
# makespan, engine busy fraction and prefix-cache share from --stats; then
# the fcfs baseline on the same job when time allows. --max-model-len 4096:
# at the model's 131072 the KV cache holds only 16 full-length sequences,
# and the engine admits no more than that (seen on an H100).
stage_debate() {
    local q="${1:-1000}" m strat tag="${DEBATE_LAYOUT:-seed}"
    m="$(make_model llama-3.2-1b bf16)" || { log "debate: model generation FAILED"; return 1; }
    "$PY" "$D/py/make_debate_job.py" --example "$D/py/debate.yaml" --questions "$q" \
        --max-tokens 64 --max-num-seqs 256 --experiment "debate_${q}_$tag" \
        ${DEBATE_LAYOUT:+--prompt-layout $DEBATE_LAYOUT} >"$OUT/debate_${q}_$tag.yaml" \
        || { log "debate: job generation FAILED"; return 1; }
    for strat in ${DEBATE_STRATEGIES:-parley fcfs}; do
        timeout "${DEBATE_TIMEOUT:-300}" "$D/bin/parley" run "$OUT/debate_${q}_$tag.yaml" \
            --backend cuda --model "$m" --strategy $strat --max-num-seqs 256 \
            --max-model-len 4096 \
            --output "$OUT/debate-$strat" --stats "$OUT/debate_${q}_${tag}_$strat.json" \
            --progress-interval 30 >"$OUT/debate_${q}_${tag}_$strat.log" 2>&1
        log "debate $q $tag $strat: rc=$?; $(tail -3 "$OUT/debate_${q}_${tag}_$strat.log" | tr '\n' ' ')"
        rm -rf "$OUT/debate-$strat"
    done
}

# Write (once per machine) the random model of a shape, for later stages.
stage_model() {
    local full
    full="$(shape_name "${1:-1b}")" || return 2
    make_model "$full" bf16 >/dev/null && log "model ${1:-1b}: $(make_model "$full" bf16)"
}

shape_name() {  # 1b|8b -> make_random_gguf shape
    case "$1" in
        1b) echo llama-3.2-1b ;;
        8b) echo llama-3-8b ;;
        *) echo "bench: shape 1b or 8b" >&2; return 2 ;;
    esac
}

stage_bench() {
    local shape="${1:-1b}" full m seqs g variants
    full="$(shape_name "$shape")" || return 2
    m="$(make_model "$full" bf16)" || { log "bench $shape: model generation FAILED"; return 1; }
    # "" = graphs, async, split-KV decode attention (the defaults)
    # ";" joins the flags of one variant, "default" is none
    # (BENCH_VARIANTS="default --decode-mma;--kv-fp8 ...")
    variants=(${BENCH_VARIANTS:-"" --split16 --decode-mma --prefill-mma --kv-fp8 --rows-attn
               --sync --no-graphs})
    [ "$shape" = 8b ] && [ -z "${BENCH_VARIANTS:-}" ] \
        && variants=("" --split16 --decode-mma --prefill-mma --kv-fp8 --sync)
    [ "${BENCH_PROFILE:-0}" = 1 ] && variants+=("--no-graphs;--cuda-profile")
    for seqs in ${BENCH_SEQS:-1 64 256}; do
        for g in "${variants[@]}"; do
            [ "$g" = default ] && g=""
            "$D/bin/bench_cuda_runner" "$m" --seqs $seqs --prompt "$PROMPT" --gen "$GEN" ${g//;/ } \
                --max-rows 8192 >>"$OUT/bench_$shape.jsonl" 2>>"$OUT/bench_$shape.err" \
                || log "bench $shape seqs $seqs $g: FAILED (see bench_$shape.err)"
        done
    done
    log "bench $shape parley: $(wc -l <"$OUT/bench_$shape.jsonl") results in bench_$shape.jsonl"
}

stage_attn() {
    "$D/bin/bench_cuda_attn" "$@" >"$OUT/bench_attn.txt" 2>"$OUT/bench_attn.err"
    local rc=$?
    grep '^{' "$OUT/bench_attn.txt" >"$OUT/bench_attn.jsonl"
    log "attn: rc=$rc; $(wc -l <"$OUT/bench_attn.jsonl") results; $(tail -1 "$OUT/bench_attn.txt")"
    return $rc
}

stage_hf() {
    local shape="${1:-1b}" full
    full="$(shape_name "$shape")" || return 2
    "$PY" "$D/py/hf_bench.py" "$full" --batches 1,64,256 --prompt "$PROMPT" --gen "$GEN" \
        --tokenizer "$D/models/tokenizer.gguf" >>"$OUT/hf_$shape.jsonl" 2>"$OUT/hf_$shape.err" \
        || log "hf $shape: FAILED (see hf_$shape.err)"
    log "hf $shape: $(wc -l <"$OUT/hf_$shape.jsonl" 2>/dev/null) results in hf_$shape.jsonl"
}

if [ "$STAGE" = unpack ]; then
    unpack
    exit
fi
prepare
case "$STAGE" in
    env) stage_env ;;
    test) stage_test ;;
    sanitize) stage_sanitize "$@" ;;
    attn) stage_attn "$@" ;;
    model) stage_model "$@" ;;
    serve) stage_serve "$@" ;;
    bench) stage_bench "$@" ;;
    hf) stage_hf "$@" ;;
    debate) stage_debate "$@" ;;
    all) stage_env; stage_test ;;
    *) echo "unknown stage: $STAGE" >&2; exit 2 ;;
esac

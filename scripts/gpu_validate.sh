#!/usr/bin/env bash
# gpu_validate.sh - on a machine with an NVIDIA GPU: build with CUDA, run the
# GPU tests, compute-sanitizer memcheck on short runs, and the runner
# benchmark; every log and result goes under the output folder $1.
#
# usage: scripts/gpu_validate.sh OUT_DIR [STAGE...]
#   stages: env build test memcheck bench1b bench8b   (default: all, in order)
#   Each stage fits a 10-minute call; run them one call each if needed.
#
# Needs: nvcc (CUDA 12.x/13), meson, ninja, the Debian dev packages of
# scripts/setup.sh, and for bench*: python3 with numpy + gguf.
# The default model (for test_cuda_runner) is read from $PARLEY_MODEL
# (default ~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf); without
# it that test skips. It is 94 MB: to move it to a machine that only takes
# 64 MB per transfer, split it (split -b 60M) into two git-ignored paths,
# carry one per call, and `cat` the parts back on the GPU machine.
# Benchmark models are random-weight GGUFs made on the spot
# (bench/make_random_gguf.py), kept in $PARLEY_BENCH_MODELS (default
# /tmp/parley-bench-models).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: $0 OUT_DIR [STAGE...]}"
shift
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env build test memcheck bench1b bench8b)
BUILD="${PARLEY_GPU_BUILD:-build-gpu}"
MODELS="${PARLEY_BENCH_MODELS:-/tmp/parley-bench-models}"
export PARLEY_MODEL="${PARLEY_MODEL:-$HOME/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
JOBS="$(nproc)"
status=0

log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
have() { command -v "$1" >/dev/null 2>&1; }

stage_env() {
    { date -u; uname -a; nvidia-smi || echo "nvidia-smi: not found";
      nvcc --version || echo "nvcc: not found";
      meson --version || echo "meson: not found";
      python3 -c 'import numpy, gguf; print("numpy", numpy.__version__, "gguf ok")' \
        || echo "python numpy/gguf: missing";
      ls -l "$PARLEY_MODEL" || true; } >"$OUT/env.txt" 2>&1
    log "env: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
}

stage_build() {
    local t0=$SECONDS
    if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dcuda=enabled --buildtype=release >"$OUT/build.log" 2>&1 \
            || { log "build: meson setup FAILED (see build.log)"; return 1; }
    fi
    ninja -C "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1 \
        || { log "build: FAILED (see build.log)"; return 1; }
    log "build: ok in $((SECONDS - t0)) s"
}

stage_test() {
    # Verbose Criterion output keeps the printed figures (agreement, max dlogit).
    meson test -C "$BUILD" --suite cuda --print-errorlogs --verbose \
        >"$OUT/tests.log" 2>&1
    local rc=$?
    grep -E '^\[(PASS|FAIL|SKIP)|Synthesis|cuda vs cpu' "$OUT/tests.log" >"$OUT/tests_summary.txt"
    meson test -C "$BUILD" --print-errorlogs test_cpu_forward >"$OUT/tests_cpu.log" 2>&1 || true
    log "test: rc=$rc ($(grep -c '^\[PASS' "$OUT/tests.log") pass, $(grep -c '^\[FAIL' "$OUT/tests.log") fail, $(grep -c '^\[SKIP' "$OUT/tests.log") skip)"
    return $rc
}

stage_memcheck() {
    local cs=compute-sanitizer
    have $cs || cs=/usr/local/cuda/bin/compute-sanitizer
    if ! have $cs && [ ! -x $cs ]; then log "memcheck: compute-sanitizer not found"; return 1; fi
    # --jobs 1 and one fork per test; the sanitizer follows the children.
    $cs --tool memcheck --target-processes all --error-exitcode 99 \
        "$BUILD/tests/test_cuda_kernels" --jobs 1 >"$OUT/memcheck_kernels.log" 2>&1
    local a=$?
    $cs --tool memcheck --target-processes all --error-exitcode 99 \
        "$BUILD/tests/test_cuda_runner" --jobs 1 --filter 'cuda_runner/copy_block*' \
        >"$OUT/memcheck_runner.log" 2>&1
    local b=$?
    log "memcheck: kernels rc=$a, runner rc=$b ($(grep -h 'ERROR SUMMARY' "$OUT"/memcheck_*.log | tr '\n' ' '))"
    [ $a -eq 0 ] && [ $b -eq 0 ]
}

make_model() {  # shape -> path
    local p="$MODELS/random-$1.gguf" src=()
    mkdir -p "$MODELS"
    [ -f "$PARLEY_MODEL" ] || src=(--source none)
    [ -f "$p" ] || python3 bench/make_random_gguf.py "$1" "$p" "${src[@]}" >&2 || return 1
    echo "$p"
}

bench() {  # shape, then "seqs prompt gen" triples
    local shape=$1 m
    shift
    m="$(make_model "$shape")" || { log "bench $shape: model generation FAILED"; return 1; }
    for cfg in "$@"; do
        set -- $cfg
        for g in "" --no-graphs; do
            "$BUILD/tests/bench_cuda_runner" "$m" --seqs "$1" --prompt "$2" --gen "$3" $g \
                >>"$OUT/bench.jsonl" 2>>"$OUT/bench.err" \
                || log "bench $shape $cfg $g: FAILED (see bench.err)"
        done
    done
    log "bench $shape: $(grep -c "random-$shape" "$OUT/bench.jsonl") results in bench.jsonl"
}

stage_bench1b() { bench llama-3.2-1b "1 128 128" "16 512 128" "64 512 128" "256 256 64"; }
stage_bench8b() { bench llama-3-8b "1 128 128" "32 512 128" "128 512 64"; }
# TODO(GPU session): add the gateway-level benchmark (parley serve --backend cuda
# + bench/ clients) once the CLI wires the CUDA runner, and record figures in
# BENCHMARKS.md.

for s in "${STAGES[@]}"; do
    if ! declare -F "stage_$s" >/dev/null; then
        echo "unknown stage: $s" >&2
        exit 2
    fi
    "stage_$s" || status=1
done
log "done: status $status; results in $OUT"
exit $status

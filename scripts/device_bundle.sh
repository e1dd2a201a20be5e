#!/usr/bin/env bash
# device_bundle.sh - build, on a CPU machine with nvcc, everything a bare
# GPU machine (CUDA driver, python with torch/transformers/numpy; no
# libevent, jansson, yaml, pcre2, curl, OpenBLAS or Criterion; nothing can
# be installed; at most 64 MiB travels) needs to test and benchmark the
# CUDA runner, into the git-ignored folder .device/:
#
#   .device/run.sh             stages env, test, sanitize, serve, bench, attn (see it)
#   .device/calls/             the prepared device calls (scripts/device/calls/:
#                              one script per call, each within its budget)
#   .device/payload.tar.xz     bin/ (parley, the CUDA tests, bench_cuda_runner,
#                              bench_cuda_attn; sm_90 code) and lib/ (every
#                              shared library they need but glibc, libstdc++
#                              and libgcc; the binaries' RPATH is
#                              $ORIGIN/../lib, the libraries' $ORIGIN).
#                              run.sh unpacks it in place on first use: the
#                              unpacked tree (OpenBLAS alone is 36 MB) would
#                              not fit in the 60 MiB budget.
#   .device/py/                make_random_gguf.py (numpy only), the stdlib
#                              streaming client, the HF transformers peer
#   .device/models/tokenizer.gguf   the default model's tokenizer keys (1.7 MB)
#   .device/fixtures/          the CPU runner's reference figures on the
#                              random "ref" model (bench/runner_ref.c) and
#                              that model's sha256
#
# Then it proves, here: every bundled ELF resolves only to the bundle and
# glibc/libstdc++/libgcc (ldd, with an empty environment); `env -i
# PATH=/usr/bin:/bin .device/bin/parley --version` works; `.device/run.sh
# test` runs with every GPU test skipped; the size is at most 60 MiB.
# Finally the unpacked bin/ and lib/ are removed again (--keep keeps them).
#
# usage: scripts/device_bundle.sh [--keep]
#   PARLEY_DEVICE_BUILD: build folder (default build-device; configured
#   here with -Dcuda=enabled if absent). PARLEY_MODEL: the default model
#   (its tokenizer is copied). PYTHON: a python with numpy (default
#   .venv/bin/python, else python3). XZ_LEVEL: payload compression (6).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
BUILD="${PARLEY_DEVICE_BUILD:-build-device}"
MODEL="${PARLEY_MODEL:-$HOME/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
PY="${PYTHON:-}"
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
D=.device
MAX_MIB=60
BINS=(parley tests/test_cuda_kernels tests/test_cuda_runner tests/test_cuda_io
      tests/test_cuda_ref tests/test_cuda_weights tests/test_cuda_constrain tests/test_cuda_moe
      tests/test_cuda_moe_host tests/test_cuda_encode tests/test_cuda_ssm tests/test_cuda_gemma4 tests/bench_cuda_runner tests/bench_cuda_attn)
# The newer architectures' runner test, once the model table has them.
grep -q "'test_cuda_families'" tests/meson.build && BINS+=(tests/test_cuda_families)
# glibc's libraries, libstdc++ and libgcc: present on every Linux machine.
SYSTEM_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libstdc\+\+\.so|libgcc_s\.so)'

die() { echo "device_bundle: $*" >&2; exit 1; }
command -v patchelf >/dev/null || die "patchelf is missing (apt-get install patchelf)"
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit in /usr/local/cuda?)"
"$PY" -c 'import numpy' 2>/dev/null || die "$PY has no numpy (python3 -m venv .venv && .venv/bin/pip install numpy)"
[ -f "$MODEL" ] || die "$MODEL: absent (scripts/setup.sh fetches it; its tokenizer is copied)"

# 1. Build (release, CUDA for sm_90).
# The GPU machines are H100/H200: sm_90 machine code only (no sm_80, no PTX
# to JIT), a third of the payload.
if [ ! -f "$BUILD/build.ninja" ]; then
    CC="${CC:-gcc}" meson setup "$BUILD" --buildtype=release -Dcuda=enabled -Dtests=enabled \
        -Dgpu_code=sm90
fi
meson configure "$BUILD" -Dcuda=enabled -Dtests=enabled -Dgpu_code=sm90 >/dev/null
ninja -C "$BUILD" "${BINS[@]}" bench/runner_ref

# 2. Stage bin/ and lib/ in a scratch folder, then pack.
STAGE="$BUILD/device-stage"
rm -rf "$STAGE" "$D"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$D/py" "$D/models" "$D/fixtures"
for b in "${BINS[@]}"; do
    cp "$BUILD/$b" "$STAGE/bin/"
done
# Every non-system library of every binary (ldd lists the whole closure).
for b in "$STAGE"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
    [[ "$soname" =~ $SYSTEM_RE ]] && continue
    cp -L "$path" "$STAGE/lib/$soname"
done
chmod u+w "$STAGE"/bin/* "$STAGE"/lib/*
strip --strip-debug "$STAGE"/bin/* "$STAGE"/lib/* 2>/dev/null || true
for b in "$STAGE"/bin/*; do
    patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"   # DT_RPATH: transitive too
done
for l in "$STAGE"/lib/*; do
    patchelf --force-rpath --set-rpath '$ORIGIN' "$l"
done

# 3. The ldd check: with an empty environment, each ELF resolves only to
#    the bundle or to glibc/libstdc++/libgcc.
check_ldd() {  # folder holding bin/ and lib/
    local dir bad=0 f line soname path
    dir="$(cd "$1" && pwd)"
    for f in "$dir"/bin/* "$dir"/lib/*; do
        while read -r line; do
            soname="${line%% *}"
            if [[ "$line" == *"not found"* ]]; then
                echo "ldd: $f: $soname not found" >&2; bad=1; continue
            fi
            path="$(echo "$line" | awk '$2 == "=>" {print $3}')"
            [ -z "$path" ] && continue   # vdso, the loader itself
            path="$(realpath -m "$path")"
            if [[ "$path" == "$dir"/lib/* ]]; then continue; fi
            if [[ "$soname" =~ $SYSTEM_RE ]]; then continue; fi
            echo "ldd: $f: $soname resolves outside the bundle ($path)" >&2; bad=1
        done < <(env -i PATH=/usr/bin:/bin ldd "$f" | sed 's/^[[:space:]]*//')
    done
    [ $bad -eq 0 ] && echo "ldd check: $(ls "$dir"/bin | wc -l) binaries and $(ls "$dir"/lib | wc -l) libraries resolve only to the bundle and glibc/libstdc++/libgcc"
    return $bad
}
check_ldd "$STAGE" || die "ldd check failed"
tar -C "$STAGE" -cf - bin lib | xz -T2 -"${XZ_LEVEL:-6}" >"$D/payload.tar.xz"

# 4. Scripts, tokenizer, reference figures.
cp scripts/device/run.sh "$D/run.sh"
mkdir -p "$D/calls"
cp scripts/device/calls/*.sh "$D/calls/"
cp bench/make_random_gguf.py bench/make_debate_job.py examples/debate.yaml \
   scripts/device/stream_client.py scripts/device/sdk_client.py scripts/device/hf_bench.py "$D/py/"
chmod +x "$D/run.sh" "$D"/py/*.py "$D"/calls/*.sh
"$PY" bench/make_random_gguf.py tokenizer "$MODEL" "$D/models/tokenizer.gguf"
REF="$BUILD/ref-bf16.gguf"
"$PY" bench/make_random_gguf.py model ref "$REF" --tokenizer "$D/models/tokenizer.gguf"
"$BUILD/bench/runner_ref" "$REF" "$D/fixtures/cpu_ref.txt"
sha256sum "$REF" | awk '{print $1}' >"$D/fixtures/ref-bf16.sha256"
git rev-parse HEAD >"$D/COMMIT" 2>/dev/null || echo unknown >"$D/COMMIT"

SIZE=$(du -sb "$D" | awk '{print $1}')
MIB=$(awk -v s="$SIZE" 'BEGIN {printf "%.1f", s / 1048576}')
[ "$(awk -v s="$SIZE" -v m=$MAX_MIB 'BEGIN {print (s <= m * 1048576)}')" = 1 ] \
    || die ".device is $MIB MiB, over $MAX_MIB MiB"

# 5. Prove it here: unpack as the GPU machine will, then the checks.
"$D/run.sh" unpack
check_ldd "$D" || die "ldd check of the unpacked bundle failed"
env -i PATH=/usr/bin:/bin "$D/bin/parley" --version || die "parley --version failed with an empty environment"
OUT="$BUILD/device-selftest"
rm -rf "$OUT"
PYTHON="$PY" "$D/run.sh" test "$OUT" || die "run.sh test failed here (see $OUT)"
grep -q '' "$OUT/summary.txt" && cat "$OUT/summary.txt"
if [ $KEEP -eq 0 ]; then
    rm -rf "$D/bin" "$D/lib"
fi
echo "device bundle: $D is $MIB MiB ($SIZE bytes; at most $MAX_MIB MiB travels)"
echo "GPU machine: device run with carry [\".device\"], command: .device/run.sh test \$OUT"

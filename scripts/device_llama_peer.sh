#!/usr/bin/env bash
# device_llama_peer.sh - the llama.cpp CUDA peer for the GPU benchmark, in
# its own git-ignored folder .device-llama/ (carried beside .device/ when
# both fit in 64 MiB, else in a call of its own): llama-batched-bench and
# llama-bench built here from the llama-cpp-python sdist's vendored
# llama.cpp with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90. None of its
# code is committed; the sdist is fetched with pip from PyPI.
#
# Building ggml-cuda takes a long time on a small machine: this runs niced.
#
# usage: scripts/device_llama_peer.sh            build + bundle
#        .device-llama/run.sh SHAPE OUTDIR       on the GPU machine (needs .device
#                                                 too, for the model writer)
#   SHAPE: 1b or 8b. Writes llama_SHAPE.txt (batched-bench at 1/64/256
#   parallel sequences, prompt $PROMPT (512), $GEN (256) generated, as
#   .device/run.sh bench). Statically linked, the
#   binary is 42 MB; llama-bench would be another 41 MB, so it stays out.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.16}"
WORK="${PARLEY_LLAMA_BUILD:-build-llama-cuda}"
D=.device-llama
JOBS="${JOBS:-2}"
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$WORK"
if [ ! -d "$WORK/src" ]; then
    python3 -m pip download --no-deps --no-binary :all: -d "$WORK" \
        "llama-cpp-python==$VERSION"
    mkdir -p "$WORK/src"
    tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK/src" --strip-components=1
fi
cmake -S "$WORK/src/vendor/llama.cpp" -B "$WORK/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF
nice -n 19 cmake --build "$WORK/cmake" -j "$JOBS" --target llama-batched-bench

rm -rf "$D"
mkdir -p "$D/bin" "$D/lib"
cp "$WORK/cmake/bin/llama-batched-bench" "$D/bin/"
strip "$D"/bin/*
# CUDA's own libraries (cudart, cublas) come from the GPU machine; any
# other non-system library goes into the bundle.
for b in "$D"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
    case "$soname" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|\
        libcuda.so*|libcudart.so*|libcublas*|ld-linux*) continue ;;
    esac
    cp -L "$path" "$D/lib/$soname"
done
for b in "$D"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"; done
tar -C "$D" -cf - bin lib | xz -T"$JOBS" -6 >"$D/payload.tar.xz"
rm -rf "$D/bin" "$D/lib"
cat >"$D/run.sh" <<'EOF'
#!/usr/bin/env bash
# .device-llama/run.sh SHAPE OUTDIR: llama.cpp CUDA peer benchmark.
set -uo pipefail
L="$(cd "$(dirname "$0")" && pwd)"
DEV="$(cd "$L/../.device" && pwd)"
SHAPE="${1:?1b|8b}"; OUT="${2:?outdir}"
mkdir -p "$OUT"
[ -x "$L/bin/llama-batched-bench" ] || python3 -c 'import sys, tarfile
tarfile.open(sys.argv[1] + "/payload.tar.xz", "r:xz").extractall(sys.argv[1])' "$L" || exit 1
case "$SHAPE" in 1b) full=llama-3.2-1b ;; 8b) full=llama-3-8b ;; *) exit 2 ;; esac
M="${PARLEY_DEVICE_MODELS:-/tmp/parley-models}/random-$full-bf16.gguf"
mkdir -p "$(dirname "$M")"
[ -f "$M" ] || python3 "$DEV/py/make_random_gguf.py" model "$full" "$M" --type bf16 \
    --tokenizer "$DEV/models/tokenizer.gguf" || exit 1
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
P="${PROMPT:-512}"; G="${GEN:-256}"
# This llama.cpp holds at most 64 sequences in one context (LLAMA_MAX_SEQ):
# 64 parallel is its best at 256 concurrent requests.
"$L/bin/llama-batched-bench" -m "$M" -ngl 99 -c $((64 * (P + G) + 256)) -b 2048 -ub 512 \
    -npp "$P" -ntg "$G" \
    -npl "${NPL:-1,64}" >"$OUT/llama_$SHAPE.txt" 2>"$OUT/llama_$SHAPE.err"
tail -20 "$OUT/llama_$SHAPE.txt"
EOF
chmod +x "$D/run.sh"
echo "llama.cpp peer: $D is $(du -sh "$D" | cut -f1) (with .device: $(du -shc .device "$D" | tail -1 | cut -f1))"

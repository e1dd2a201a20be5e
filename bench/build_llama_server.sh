#!/usr/bin/env bash
# build_llama_server.sh - builds llama.cpp's llama-server, the peer of
# bench/bench_engine.py, from the llama.cpp vendored in llama-cpp-python's
# source distribution (the same llama.cpp the Python references use).
# Only the llama-server target, CPU only, -j2 under nice; ~15-25 min on 2 cores.
# Prints the binary's path. Usage: bench/build_llama_server.sh [DIR]
set -euo pipefail
ver=0.3.16
dir=${1:-${LLAMA_BUILD_DIR:-/tmp/parley-llama}}
bin="$dir/llama_cpp_python-$ver/vendor/llama.cpp/build/bin/llama-server"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
cd "$dir"
[ -f "llama_cpp_python-$ver.tar.gz" ] ||
    pip download --no-binary :all: --no-deps "llama-cpp-python==$ver" >&2
[ -d "llama_cpp_python-$ver" ] || tar xzf "llama_cpp_python-$ver.tar.gz"
cd "llama_cpp_python-$ver/vendor/llama.cpp"
nice -n 10 cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DGGML_BLAS=OFF >&2
nice -n 10 cmake --build build --target llama-server -j2 >&2
echo "$bin"

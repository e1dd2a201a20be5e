#!/usr/bin/env bash
# build_llama_server.sh - builds llama.cpp's llama-server, the peer of
# bench/bench_engine.py, from the llama.cpp vendored in llama-cpp-python's
# source distribution (the same llama.cpp the Python references use).
# The llama-server target and the shared libllama that llama-cpp-python's
# llama_cpp/ package loads (LLAMA_CPP_LIB_PATH=<build>/bin, PYTHONPATH=<sdist>),
# CPU only, the machine's own instruction set, -j2 under nice; ~15-25 min on
# 2 cores. LLAMA_VER picks the release (default 0.3.36, today's; 0.3.16 for
# continuity with the older figures).
# Prints the binary's path. Usage: bench/build_llama_server.sh [DIR]
set -euo pipefail
ver=${LLAMA_VER:-0.3.36}
dir=${1:-${LLAMA_BUILD_DIR:-/tmp/parley-llama}}
bin="$dir/llama_cpp_python-$ver/vendor/llama.cpp/build/bin/llama-server"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
cd "$dir"
# pip download prepares the sdist's metadata with its build backend.
py=${PYTHON:-python3}
[ -f "llama_cpp_python-$ver.tar.gz" ] || {
    "$py" -m pip install -q scikit-build-core >&2
    "$py" -m pip download --no-binary :all: --no-deps --no-build-isolation \
        "llama-cpp-python==$ver" >&2
}
[ -d "llama_cpp_python-$ver" ] || tar xzf "llama_cpp_python-$ver.tar.gz"
cd "llama_cpp_python-$ver/vendor/llama.cpp"
nice -n 10 cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DGGML_BLAS=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON >&2
nice -n 10 cmake --build build --target llama-server llama -j2 >&2
echo "$bin"

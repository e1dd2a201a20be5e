#!/usr/bin/env bash
# test.sh - set everything up, then run the whole test suite: the Criterion
# suite, the Python client tests with the official openai SDK, and the same
# Criterion suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PARLEY_MODEL="${PARLEY_MODEL:-$(scripts/fetch_model.sh)}"
export PARLEY_GEMMA_MODEL="${PARLEY_GEMMA_MODEL:-$(scripts/fetch_model.sh gemma3)}"

echo "== Layering (scripts/check_layers.sh)"
scripts/check_layers.sh

echo "== Formats by vtable, never by name (scripts/check_formats.sh)"
scripts/check_formats.sh

echo "== One file per model family (scripts/check_families.sh)"
scripts/check_families.sh && echo "check_families: ok"

echo "== Sizes (scripts/check_sizes.sh)"
scripts/check_sizes.sh

echo "== The engine's files call one way (scripts/check_engine_calls.sh)"
scripts/check_engine_calls.sh build

echo "== Criterion suite (release build)"
meson test -C build --print-errorlogs --num-processes 2

echo "== Python tests (openai SDK, /metrics, /status schema, dashboard in Chromium, notebook)"
PARLEY_BIN="$PWD/build/parley" .venv/bin/python -m pytest -q tests/python

echo "== Criterion suite under ASan + UBSan"
if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined \
        -Db_lundef=false
fi
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    PARLEY_SANITIZED=1 meson test -C build-asan --print-errorlogs --num-processes 2 \
    --timeout-multiplier 3

#!/usr/bin/env bash
# setup.sh - install what is missing (Debian packages, a Python venv), build
# parley into build/, and fetch the default model. Idempotent.
#   scripts/setup.sh           build + model
#   scripts/setup.sh --test    also the test tools (pytest, openai SDK, clang)
#                              and the tests' other models (Gemma 3 270M,
#                              all-MiniLM-L6-v2)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

pkgs=(build-essential pkg-config meson ninja-build python3 python3-venv python3-pip
      libevent-dev libjansson-dev libyaml-dev libcurl4-openssl-dev libpcre2-dev
      libopenblas-dev libcriterion-dev patchelf)  # patchelf: scripts/device_bundle.sh
[ $want_test = 1 ] && pkgs+=(clang libclang-rt-14-dev libmicrohttpd-dev)
# The dashboard is tested in a real browser (tests/python/test_dashboard.py).
[ $want_test = 1 ] && pkgs+=(chromium)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A private venv for the model download and the Python tests.
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if [ $want_test = 1 ]; then
    .venv/bin/python -c "import openai, pytest" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check openai pytest
    # /metrics is checked with prometheus_client's parser, /status against
    # openapi.yaml (pyyaml), and examples/debate.ipynb is executed (nbclient).
    .venv/bin/python -c "import prometheus_client, yaml, nbclient, nbformat, ipykernel, pandas, matplotlib, tqdm" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check prometheus_client pyyaml \
            nbclient nbformat ipykernel pandas matplotlib tqdm
    # Structured outputs are checked with jsonschema and pydantic models.
    .venv/bin/python -c "import jsonschema, pydantic" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check jsonschema pydantic
    # Hugging Face checkpoints are written at test time with the independent
    # libraries (tests/fixtures/hf_checkpoints.py): safetensors, tokenizers
    # (small wheels) and gguf (pure Python).
    .venv/bin/python -c "import safetensors, tokenizers, gguf" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check safetensors tokenizers gguf
    # Clients as users run them (tests/python/test_clients.py): litellm and
    # langchain-openai beside the openai SDK; lm-evaluation-harness scores a
    # task through parley end to end (test_lm_eval_eos.py; 0.4 needs no torch).
    .venv/bin/python -c "import litellm, langchain_openai, lm_eval" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check litellm langchain-openai \
            "lm_eval>=0.4"
    # Anthropic's SDK against /v1/messages (tests/python/test_anthropic.py).
    .venv/bin/python -c "import anthropic" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check "anthropic==2.10.0"
    # The contract test: schemathesis against api/openapi.yaml.
    .venv/bin/python -c "import schemathesis" 2>/dev/null ||
        .venv/bin/pip install -q --disable-pip-version-check schemathesis
fi

if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
fi
ninja -C build

scripts/fetch_model.sh
if [ $want_test = 1 ]; then
    scripts/fetch_model.sh gemma3 >/dev/null
    # all-MiniLM-L6-v2 (issue 50): its WordPiece vocabulary is checked
    # against the tokenizers library (tests/python/test_wordpiece.py).
    scripts/fetch_model.sh minilm >/dev/null
fi

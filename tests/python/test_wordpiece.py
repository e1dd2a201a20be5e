"""WordPiece (BERT) tokenisation against the tokenizers library: the real
vocabulary of all-MiniLM-L6-v2 (scripts/fetch_model.sh minilm), through
build/tests/hf_tool tokenize, on 200 varied texts and on every code point
(in runs of text), with and without [CLS]/[SEP]."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, parley_bin

tokenizers = pytest.importorskip("tokenizers")
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import embed_texts  # noqa: E402

TOOL = os.path.join(os.path.dirname(parley_bin()), "tests", "hf_tool")
MINILM = os.environ.get("PARLEY_MINILM", os.path.expanduser(
    "~/.cache/parley/models/all-MiniLM-L6-v2"))


@pytest.fixture(scope="module")
def ref():
    if not os.path.exists(os.path.join(MINILM, "tokenizer.json")):
        pytest.skip("all-MiniLM-L6-v2 not fetched (scripts/fetch_model.sh minilm)")
    t = tokenizers.Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    t.no_truncation()
    t.no_padding()
    return t


def parley_ids(texts):
    r = subprocess.run([TOOL, "tokenize", MINILM], input=json.dumps(texts),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check(ref, texts):
    got = parley_ids(texts)
    for i, s in enumerate(texts):
        assert got["special"][i] == ref.encode(s).ids, (i, s[:200])
        assert got["plain"][i] == ref.encode(s, add_special_tokens=False).ids, (i, s[:200])


def test_varied_texts(ref):
    texts = embed_texts.texts()
    assert len(texts) == 200
    check(ref, texts)


def test_every_code_point(ref):
    # Runs of 40 code points between ordinary letters, each run a text:
    # every normalisation, punctuation and whitespace rule of the library.
    cps = [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]
    cps = [c for c in cps if c < 0x30000 or c >= 0xE0000]
    texts = []
    for i in range(0, len(cps), 40):
        texts.append("ab" + "".join(chr(c) + ("x" if j % 3 else " ")
                                    for j, c in enumerate(cps[i:i + 40])) + "ba")
    for k in range(0, len(texts), 2000):
        check(ref, texts[k:k + 2000])

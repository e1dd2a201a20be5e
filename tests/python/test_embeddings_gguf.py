"""POST /v1/embeddings on all-MiniLM-L6-v2 as llama.cpp 0.3.36's
convert_hf_to_gguf.py writes it (f32 and f16): the bert GGUF's WordPiece
vocabulary (tokenizer.ggml.model "bert", its U+2581 form), pooling_type
and positions read from the file. Two independent references: the
sentence-transformers vectors of tests/fixtures/embed_ref.npz (texts in,
so the GGUF tokenizer is checked too) and llama-server 0.3.36
--embeddings --pooling mean on the same files
(tests/fixtures/gen_embed_gguf_ref.py, embed_gguf_ref.npz; the
tokenizers library's ids in). The converter needs torch, which CI has not: without
~/.cache/parley/models/all-MiniLM-L6-v2-<type>.gguf (or
$PARLEY_MINILM_GGUF_DIR) the file is rebuilt from MiniLM's
model.safetensors with numpy alone and tests/fixtures/embed_gguf_head.json
(the converter's bytes before the tensor data and where each tensor goes;
gen_embed_gguf_head.py). Either way its sha256 must be the one
gen_embed_gguf_ref.py recorded for the converter's output."""
import hashlib
import json
import os
import sys
import urllib.request

import numpy as np
import pytest

from conftest import ROOT, Server
from test_embeddings import cosines, post

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import embed_texts  # noqa: E402
import gen_embed_gguf_head as head  # noqa: E402

MINILM = os.environ.get("PARLEY_MINILM", os.path.expanduser(
    "~/.cache/parley/models/all-MiniLM-L6-v2"))
GGUF_DIR = os.environ.get("PARLEY_MINILM_GGUF_DIR", os.path.expanduser(
    "~/.cache/parley/models"))
ST = np.load(os.path.join(ROOT, "tests", "fixtures", "embed_ref.npz"))
LL = np.load(os.path.join(ROOT, "tests", "fixtures", "embed_gguf_ref.npz"))


def rebuilt(outtype, tmp_dir):
    """The converter's file made again from model.safetensors (numpy)."""
    st = os.path.join(MINILM, "model.safetensors")
    if not os.path.exists(st):
        pytest.skip("all-MiniLM-L6-v2 not fetched (scripts/fetch_model.sh minilm)")
    with open(os.path.join(ROOT, "tests", "fixtures", "embed_gguf_head.json")) as f:
        res = json.load(f)
    blob = head.rebuild(res[outtype], head.heads(res)[outtype], head.safetensors(st))
    path = os.path.join(tmp_dir, "all-MiniLM-L6-v2-%s.gguf" % outtype)
    with open(path, "wb") as f:
        f.write(blob)
    return path


def gguf(outtype, tmp_dir):
    path = os.path.join(GGUF_DIR, "all-MiniLM-L6-v2-%s.gguf" % outtype)
    if not os.path.exists(path):
        path = rebuilt(outtype, tmp_dir)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    assert h.hexdigest() == str(LL["sha256_" + outtype]), \
        "%s is not the converter output the references were made from" % path
    return path


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_gguf_matches_both_references(outtype, tmp_path):
    path = gguf(outtype, str(tmp_path))
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    # the GGUF has 512 positions and no max_seq_length: 256 as sentence-transformers
    s = Server("--model", path, "--log-level", "warn", "--max-model-len", "256",
               "--max-embed-inputs", "300")
    try:
        m = json.load(urllib.request.urlopen(s.url + "/v1/models"))["data"][0]
        assert m["capabilities"]["pooling"] == "mean"          # bert.pooling_type 1
        assert m["capabilities"]["dimensions"] == 384
        texts = embed_texts.texts()
        inputs = [t if t else tok.encode(t).ids for t in texts]
        st, r = post(s.url, {"model": m["id"], "input": inputs, "truncate_prompt_tokens": -1})
        assert st == 200, r
        v = np.array([d["embedding"] for d in r["data"]])
        cos = cosines(v, ST["v256"])
        assert cos.min() > 0.9999, (outtype, cos.argmin(), cos.min())
        want = sum(min(len(tok.encode(t).ids), 256) for t in texts)
        assert r["usage"]["prompt_tokens"] == want
        tok.enable_truncation(256)
        ids = [tok.encode(t).ids for t in texts]
        st, r = post(s.url, {"model": m["id"], "input": ids})
        assert st == 200, r
        cos = cosines([d["embedding"] for d in r["data"]], LL[outtype])
        assert cos.min() > 0.9999, (outtype, cos.argmin(), cos.min())
    finally:
        assert s.stop() == 0

"""POST /v1/embeddings on all-MiniLM-L6-v2 as llama.cpp 0.3.36's
convert_hf_to_gguf.py writes it (f32 and f16): the bert GGUF's WordPiece
vocabulary (tokenizer.ggml.model "bert", its U+2581 form), pooling_type
and positions read from the file. Two independent references: the
sentence-transformers vectors of tests/fixtures/embed_ref.npz (texts in,
so the GGUF tokenizer is checked too) and llama-server 0.3.36
--embeddings --pooling mean on the same files
(tests/fixtures/gen_embed_gguf_ref.py, embed_gguf_ref.npz; the
tokenizers library's ids in). The converted files are not in CI (the
converter needs torch): each case skips, saying so, unless
~/.cache/parley/models/all-MiniLM-L6-v2-<type>.gguf (or
$PARLEY_MINILM_GGUF_DIR) holds the converter's bytes, checked by the
sha256 the generator recorded."""
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

MINILM = os.environ.get("PARLEY_MINILM", os.path.expanduser(
    "~/.cache/parley/models/all-MiniLM-L6-v2"))
GGUF_DIR = os.environ.get("PARLEY_MINILM_GGUF_DIR", os.path.expanduser(
    "~/.cache/parley/models"))
ST = np.load(os.path.join(ROOT, "tests", "fixtures", "embed_ref.npz"))
LL = np.load(os.path.join(ROOT, "tests", "fixtures", "embed_gguf_ref.npz"))


def gguf(outtype):
    path = os.path.join(GGUF_DIR, "all-MiniLM-L6-v2-%s.gguf" % outtype)
    if not os.path.exists(path):
        pytest.skip("%s absent: convert it with tests/fixtures/gen_embed_gguf_ref.py "
                    "(llama.cpp's converter needs torch, so CI skips this)" % path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    assert h.hexdigest() == str(LL["sha256_" + outtype]), \
        "%s is not the converter output the references were made from" % path
    return path


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_gguf_matches_both_references(outtype):
    path = gguf(outtype)
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

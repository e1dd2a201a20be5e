"""Decoder models as embedders (--pooling last|mean|cls, vLLM's --runner
pooling): POST /v1/embeddings on the tiny transformers checkpoints of
tests/fixtures/hf_transformers (qwen3, llama; model.safetensors rebuilt from
the seed, numpy only) must give transformers' own float32 base-model
vectors (last_hidden_state after the final norm, pooled and normalised;
tests/fixtures/gen_decoder_embed_ref.py made decoder_embed_ref.json with
torch) within cosine 0.9999, all inputs of a request in one batched step.
Without --pooling the decoder stays a chat model and /v1/embeddings is a
400 naming it."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

from conftest import ROOT, Server

FIX = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, FIX)
import gen_hf_transformers as gen  # noqa: E402
from test_embeddings import cosines, post  # noqa: E402

with open(os.path.join(FIX, "decoder_embed_ref.json")) as f:
    REF = json.load(f)


def folder(family, tmp_path):
    d = tmp_path / family
    shutil.copytree(os.path.join(FIX, "hf_transformers", family), d)
    gen.rebuild(str(d))
    return d


def serve(d, *args):
    return Server("--model", str(d), "--served-model-name", "emb", "--log-level", "warn",
                  "--cpu-weight-type", "f32", "--threads", "2", *args)


@pytest.mark.parametrize("family", sorted(REF["families"]))
@pytest.mark.parametrize("pooling", ["last", "mean", "cls"])
def test_pooled_hidden_states_equal_transformers(family, pooling, tmp_path):
    ref = REF["families"][family]
    s = serve(folder(family, tmp_path), "--pooling", pooling)
    try:
        st, r = post(s.url, {"model": "emb", "input": ref["ids"]})
        assert st == 200, r
        v = np.array([d["embedding"] for d in r["data"]])
        assert v.shape == (len(ref["ids"]), ref["dim"])
        cos = cosines(v, ref[pooling])
        assert cos.min() >= 0.9999, (cos.argmin(), cos.min())
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
        assert r["usage"]["prompt_tokens"] == sum(len(x) for x in ref["ids"])
        import urllib.request
        with urllib.request.urlopen(s.url + "/v1/models", timeout=60) as mr:
            caps = json.load(mr)["data"][0]["capabilities"]
        assert caps == {"embeddings": True, "generation": False, "dimensions": ref["dim"],
                        "pooling": pooling, "normalized": True}
        # one input at a time gives the same vectors as the batch
        st, r1 = post(s.url, {"model": "emb", "input": ref["ids"][-1]})
        assert st == 200, r1
        assert cosines([r1["data"][0]["embedding"]], v[-1:])[0] > 0.999999
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][:2] * 50})
        assert st == 200 and len(r["data"]) == 100, r   # more inputs than one step holds
        got = np.array([d["embedding"] for d in r["data"]])
        assert cosines(got, np.array(ref[pooling][:2] * 50)).min() >= 0.9999
    finally:
        assert s.stop() == 0


def test_decoder_embedder_refuses_chat_and_long_inputs(tmp_path):
    ref = REF["families"]["qwen3"]
    s = serve(folder("qwen3", tmp_path), "--pooling", "last", "--max-model-len", "32")
    try:
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][-1]})   # 40 tokens
        assert st == 400 and "32" in r["error"]["message"], r
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][-1],
                             "truncate_prompt_tokens": -1})
        assert st == 200, r
        assert r["usage"]["prompt_tokens"] == 32
        import urllib.request
        import urllib.error
        req = urllib.request.Request(
            s.url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "emb", "messages": [{"role": "user", "content": "hi"}]})
            .encode())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        assert e.value.code == 400
        assert "embedding model" in json.load(e.value)["error"]["message"]
    finally:
        assert s.stop() == 0


def test_decoder_without_pooling_does_not_embed(tmp_path):
    s = serve(folder("qwen3", tmp_path))
    try:
        st, r = post(s.url, {"model": "emb", "input": "hello"})
        assert st == 400, r
        assert r["error"]["code"] == "model_not_embedding"
        assert "'emb'" in r["error"]["message"] and "--pooling" in r["error"]["message"]
    finally:
        assert s.stop() == 0

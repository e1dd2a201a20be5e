"""The remote backend passes POST /v1/embeddings to an upstream that serves
it: a parley upstream embedding with the tiny qwen3 checkpoint (--pooling
last, config.json's matryoshka_dimensions) behind a gateway (--upstream).
Through the gateway: transformers' vectors (decoder_embed_ref.json, cosine
0.9999) and the upstream's own, byte for byte; the official openai SDK;
dimensions cut by the listed lengths; the upstream's errors passed on; a
chat upstream's model refused with the model named."""
import json
import os

import numpy as np
import pytest

from conftest import Server
from test_embeddings import cosines, post
from test_embeddings_decoder import REF, matryoshka_folder, unit_prefix

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = matryoshka_folder(tmp_path_factory.mktemp("up"), matryoshka_dimensions=[8, 16])
    up = Server("--model", str(d), "--served-model-name", "emb", "--log-level", "warn",
                "--cpu-weight-type", "f32", "--threads", "1", "--pooling", "last",
                "--max-model-len", "32")
    gw = Server("--upstream", up.url + "/v1", "--log-level", "warn")
    yield gw, up
    assert gw.stop() == 0
    assert up.stop() == 0


def test_vectors_equal_the_upstream_and_transformers(servers):
    gw, up = servers
    ids = REF["families"]["qwen3"]["ids"][:-1]    # the 40-token one is over the limit
    st, r = post(gw.url, {"model": "emb", "input": ids})
    assert st == 200, r
    st, direct = post(up.url, {"model": "emb", "input": ids})
    assert st == 200, direct
    assert r["data"] == direct["data"]
    assert r["usage"] == direct["usage"] and r["model"] == "emb"
    v = np.array([d["embedding"] for d in r["data"]])
    assert cosines(v, REF["families"]["qwen3"]["last"][:-1]).min() >= 0.9999


def test_openai_sdk_and_dimensions(servers):
    gw, _ = servers
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused")
    ids = REF["families"]["qwen3"]["ids"][:4]
    r = c.embeddings.create(model="emb", input=ids, dimensions=8)
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (4, 8)
    assert cosines(v, unit_prefix(REF["families"]["qwen3"]["last"][:4], 8)).min() >= 0.9999
    m = [x for x in c.models.list().data if x.id == "emb"][0]
    assert m.model_extra["capabilities"]["embeddings"] is True
    assert m.model_extra["capabilities"]["matryoshka_dimensions"] == [8, 16]
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="emb", input=ids, dimensions=12)
    assert "[8, 16]" in str(e.value)


def test_upstream_errors_pass(servers):
    gw, up = servers
    long = REF["families"]["qwen3"]["ids"][-1]
    st, r = post(gw.url, {"model": "emb", "input": long})
    st2, r2 = post(up.url, {"model": "emb", "input": long})
    assert st == st2 == 400
    assert r["error"]["message"] == "upstream: " + r2["error"]["message"]   # as chat errors
    st, r = post(gw.url, {"model": "emb", "input": long, "truncate_prompt_tokens": -1})
    assert st == 200 and r["usage"]["prompt_tokens"] == 32, r


def test_chat_upstream_does_not_embed():
    up = Server("--backend", "mock", "--served-model-name", "mock", "--log-level", "warn")
    gw = Server("--upstream", up.url + "/v1", "--log-level", "warn")
    try:
        st, r = post(gw.url, {"model": "mock", "input": "hi"})
        assert st == 400 and r["error"]["code"] == "model_not_embedding", r
        assert "'mock'" in r["error"]["message"]
    finally:
        assert gw.stop() == 0
        assert up.stop() == 0


def test_declared_upstream_dimensions(servers):
    """--upstream-embed-dimensions: an upstream whose /v1/models does not
    say it embeds (vLLM, llama-server) is trusted at that length; vectors of
    another length from it are a 502 naming the upstream."""
    _, up = servers
    ids = REF["families"]["qwen3"]["ids"][:3]
    for dim, want in ((32, 200), (16, 502)):
        gw = Server("--upstream", up.url + "/v1", "--log-level", "warn",
                    "--upstream-embed-dimensions", str(dim))
        try:
            st, r = post(gw.url, {"model": "emb", "input": ids})
            assert st == want, r
            if want == 200:
                v = np.array([d["embedding"] for d in r["data"]])
                assert cosines(v, REF["families"]["qwen3"]["last"][:3]).min() >= 0.9999
            else:
                assert "16 dimensions" in r["error"]["message"]
                assert up.url.split("//")[1] in r["error"]["message"]
        finally:
            assert gw.stop() == 0

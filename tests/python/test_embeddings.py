"""POST /v1/embeddings on all-MiniLM-L6-v2 (scripts/fetch_model.sh minilm)
against independent references: sentence-transformers' vectors of the 200
texts of tests/fixtures/embed_texts.py (tests/fixtures/gen_embed_ref.py
made embed_ref.npz with torch; float16), the tokenizers library's token
counts; the official openai SDK (float and base64), LangChain's
OpenAIEmbeddings with an in-memory vector store, and the bad inputs, each
an OpenAI error JSON. A chat model beside it in one --config."""
import base64
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import MODEL_PATH, ROOT, Server

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import embed_texts  # noqa: E402

MINILM = os.environ.get("PARLEY_MINILM", os.path.expanduser(
    "~/.cache/parley/models/all-MiniLM-L6-v2"))
NAME = "all-minilm-l6-v2"
REF = np.load(os.path.join(ROOT, "tests", "fixtures", "embed_ref.npz"))

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(MINILM, "model.safetensors")),
    reason="all-MiniLM-L6-v2 not fetched (scripts/fetch_model.sh minilm)")


@pytest.fixture(scope="module")
def server():
    s = Server("--model", MINILM, "--log-level", "warn", "--max-embed-inputs", "300")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def tok():
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    t.no_padding()
    t.no_truncation()
    return t


def post(url, body):
    req = urllib.request.Request(url + "/v1/embeddings", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def inputs_for(texts, tok, limit):
    """Each text as itself; the empty text (which the endpoint refuses, as
    OpenAI does) as the tokenizers library's ids for it."""
    return [t if t else tok.encode(t).ids for t in texts]


def test_matches_sentence_transformers(server, tok):
    texts = embed_texts.texts()
    st, r = post(server.url, {"model": NAME, "input": inputs_for(texts, tok, 256),
                              "truncate_prompt_tokens": -1})
    assert st == 200, r
    assert [d["index"] for d in r["data"]] == list(range(200))
    v = np.array([d["embedding"] for d in r["data"]])
    assert v.shape == (200, 384)
    cos = cosines(v, REF["v256"])
    assert cos.min() > 0.9999, (cos.argmin(), cos.min())
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)   # Normalize module
    want = sum(min(len(tok.encode(t).ids), 256) for t in texts)
    assert r["usage"] == {"prompt_tokens": want, "total_tokens": want}


def test_token_counts_equal_tokenizers(server, tok):
    texts = [t for t in embed_texts.texts() if t][:60]
    for t in texts:
        n = len(tok.encode(t).ids)
        st, r = post(server.url, {"model": NAME, "input": t, "truncate_prompt_tokens": -1})
        assert st == 200, r
        assert r["usage"]["prompt_tokens"] == min(n, 256), t[:80]


def test_long_texts_at_512():
    s = Server("--model", MINILM, "--log-level", "warn", "--max-model-len", "512")
    try:
        texts = embed_texts.texts()
        idx = REF["long512"]
        assert len(idx) > 0
        st, r = post(s.url, {"model": NAME, "input": [texts[i] for i in idx],
                             "truncate_prompt_tokens": 512})
        assert st == 200, r
        cos = cosines([d["embedding"] for d in r["data"]], REF["v512"])
        assert cos.min() > 0.9999, cos.min()
    finally:
        assert s.stop() == 0


def test_openai_sdk_float_and_base64(server):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    texts = [t for t in embed_texts.texts()[:40] if t]
    f = c.embeddings.create(model=NAME, input=texts, extra_body={"truncate_prompt_tokens": -1})
    b = c.embeddings.create(model=NAME, input=texts, encoding_format="base64",
                            extra_body={"truncate_prompt_tokens": -1})
    ref = REF["v256"][[i for i, t in enumerate(embed_texts.texts()[:40]) if t]]
    vf = np.array([d.embedding for d in f.data])
    # The SDK leaves base64 as the server's string when asked for it.
    vb = np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4")
                   for d in b.data])
    assert cosines(vf, ref).min() > 0.9999
    assert np.array_equal(vb.astype(np.float32), vf.astype(np.float32))
    assert f.usage.prompt_tokens == b.usage.prompt_tokens > 0
    one = c.embeddings.create(model=NAME, input="hello world")   # SDK default: base64
    assert len(one.data) == 1 and len(one.data[0].embedding) == 384


DOCS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The Great Wall of China stretches thousands of kilometres across northern China.",
    "Python is a programming language known for its readable syntax.",
    "Mount Everest is the highest mountain above sea level, in the Himalayas.",
    "The mitochondria is the powerhouse of the cell, producing ATP.",
    "Jazz music originated in New Orleans in the late 19th century.",
    "The stock market crashed in 1929, starting the Great Depression.",
    "Penguins are flightless birds living mostly in the Southern Hemisphere.",
    "A black hole is a region of spacetime where gravity prevents light escaping.",
    "The Mona Lisa was painted by Leonardo da Vinci.",
    "Coffee is brewed from roasted coffee beans.",
    "The Amazon rainforest is the largest tropical rainforest on Earth.",
    "Chess is a board game for two players on a checkered board of 64 squares.",
    "Vaccines train the immune system to recognise a pathogen.",
    "The Pacific Ocean is the largest and deepest ocean.",
    "Bitcoin is a decentralised digital currency.",
    "Shakespeare wrote Hamlet, Macbeth and Romeo and Juliet.",
    "The speed of light in vacuum is about 299,792 kilometres per second.",
    "Sushi is a Japanese dish of vinegared rice with fish or vegetables.",
]
QUERIES = [
    "famous landmark in Paris", "how do plants make energy from sunlight",
    "ancient fortification in China", "a language for writing software",
    "tallest peak in the world", "which organelle makes ATP", "origins of jazz",
    "1929 financial collapse", "birds that cannot fly in Antarctica",
    "gravity so strong light cannot escape", "who painted the Mona Lisa",
    "a hot drink made from beans", "largest jungle on the planet",
    "a strategy game with kings and queens", "how immunisation works",
    "the biggest ocean", "cryptocurrency", "author of Hamlet", "how fast does light travel",
    "Japanese rice and raw fish",
]


def test_langchain_vector_store(server):
    pytest.importorskip("langchain_openai")
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import OpenAIEmbeddings
    emb = OpenAIEmbeddings(model=NAME, base_url=server.url + "/v1", api_key="unused",
                           check_embedding_ctx_length=False)
    store = InMemoryVectorStore.from_texts(DOCS, emb)
    for i, q in enumerate(QUERIES):
        hit = store.similarity_search(q, k=1)[0].page_content
        assert hit == DOCS[i], (q, hit)


def error_of(url, body, status, param=None):
    st, r = post(url, body)
    assert st == status, r
    e = r["error"]
    assert e["type"] == "invalid_request_error" and e["message"]
    if param:
        assert e["param"] == param, e
    return e


def test_bad_inputs(server):
    u = server.url
    error_of(u, {"model": NAME}, 400, "input")
    error_of(u, {"model": NAME, "input": []}, 400, "input")
    error_of(u, {"model": NAME, "input": ""}, 400, "input")
    error_of(u, {"model": NAME, "input": [[]]}, 400, "input")
    error_of(u, {"model": NAME, "input": [1, "a"]}, 400, "input")
    error_of(u, {"model": NAME, "input": {"a": 1}}, 400, "input")
    e = error_of(u, {"model": NAME, "input": ["x"] * 10000}, 400, "input")
    assert "10000" in e["message"] and "300" in e["message"]
    e = error_of(u, {"model": NAME, "input": [[101, 30522, 102]]}, 400)
    assert "30522" in e["message"]
    error_of(u, {"model": NAME, "input": [[101, -1, 102]]}, 400)
    e = error_of(u, {"model": NAME, "input": "word " * 400}, 400, "input")
    assert "256" in e["message"] and e["code"] == "context_length_exceeded"
    st, r = post(u, {"model": NAME, "input": "word " * 400, "truncate_prompt_tokens": 100})
    assert st == 200 and r["usage"]["prompt_tokens"] == 100
    error_of(u, {"model": NAME, "input": "a", "truncate_prompt_tokens": 1000}, 400,
             "truncate_prompt_tokens")
    error_of(u, {"model": NAME, "input": "a", "truncate_prompt_tokens": 0}, 400,
             "truncate_prompt_tokens")
    error_of(u, {"model": NAME, "input": "a", "encoding_format": "int8"}, 400,
             "encoding_format")
    error_of(u, {"model": NAME, "input": "a", "dimensions": 128}, 400, "dimensions")
    st, r = post(u, {"model": NAME, "input": "a", "dimensions": 384})
    assert st == 200 and len(r["data"][0]["embedding"]) == 384
    assert error_of(u, {"model": "nope", "input": "a"}, 404)["code"] == "model_not_found"
    # a generative request of an embedding model
    req = urllib.request.Request(u + "/v1/chat/completions", data=json.dumps(
        {"model": NAME, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(req, timeout=60)
    assert ei.value.code == 400
    assert "embedding model" in json.load(ei.value)["error"]["message"]


def test_models_say_which_embed(server):
    m = json.load(urllib.request.urlopen(server.url + "/v1/models"))["data"][0]
    assert m["id"] == NAME and m["task"] == "embed"
    assert m["capabilities"] == {"embeddings": True, "generation": False, "dimensions": 384,
                                 "pooling": "mean", "normalized": True}
    assert m["max_model_len"] == 256


def test_chat_and_embedding_side_by_side(tmp_path):
    if not os.path.exists(MODEL_PATH):
        pytest.skip("the default chat model is not fetched (scripts/fetch_model.sh)")
    cfg = tmp_path / "two.yaml"
    cfg.write_text("models:\n"
                   "  chat:\n    backend: cpu\n    model: %s\n    kv_cache_mb: 64\n"
                   "  embed:\n    backend: cpu\n    model: %s\n" % (MODEL_PATH, MINILM))
    s = Server("--config", str(cfg), "--log-level", "warn")
    try:
        models = {m["id"]: m for m in
                  json.load(urllib.request.urlopen(s.url + "/v1/models"))["data"]}
        assert models["chat"]["task"] == "generate" and models["embed"]["task"] == "embed"
        st, r = post(s.url, {"model": "embed", "input": "The quick brown fox jumps over the "
                                                         "lazy dog."})
        assert st == 200
        assert cosines([r["data"][0]["embedding"]], REF["v256"][:1])[0] > 0.9999
        e = error_of(s.url, {"model": "chat", "input": "a"}, 400, "model")
        assert "does not embed" in e["message"]
        req = urllib.request.Request(s.url + "/v1/chat/completions", data=json.dumps(
            {"model": "chat", "messages": [{"role": "user", "content": "hi"}],
             "max_tokens": 4}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] >= 1
    finally:
        assert s.stop() == 0


def metric(url, name, model=NAME):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    want = {'%s{model_name="%s"}' % (name, model), '%s{endpoint="%s"}' % (name, model)}
    for line in text.splitlines():
        key, _, val = line.rpartition(" ")
        if key in want:
            return float(val)
    raise AssertionError("%s not in /metrics" % name)


def test_metrics_count_embeddings(server, tok):
    """/metrics: the requests of /v1/embeddings and parley:embedding_* per
    model move by what was asked, token counts by the tokenizers library's."""
    texts = ["The quick brown fox.", "Zwölf Boxkämpfer jagen Viktor quer über den Sylter Deich",
             "def f(x):\n    return x * 2"]
    names = ["parley:embedding_requests_total", "parley:embedding_inputs_total",
             "parley:embedding_tokens_total", "parley:embedding_requests_failed_total"]
    before = [metric(server.url, n) for n in names]
    hits = metric(server.url, "parley:http_requests_total", "/v1/embeddings")
    assert post(server.url, {"model": NAME, "input": texts})[0] == 200
    assert post(server.url, {"model": NAME, "input": [[5, 999999999]]})[0] == 400
    after = [metric(server.url, n) for n in names]
    n_tok = sum(len(tok.encode(t).ids) for t in texts)
    assert [a - b for a, b in zip(after, before)] == [1, 3, n_tok, 1]   # ids are checked in the backend
    assert metric(server.url, "parley:http_requests_total", "/v1/embeddings") == hits + 2

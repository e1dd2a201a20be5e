"""Decoder models as embedders (--pooling last|mean|cls, vLLM's --runner
pooling): POST /v1/embeddings on the tiny transformers checkpoints of
tests/fixtures/hf_transformers (every family but the bf16 copies;
model.safetensors rebuilt from the seed, numpy only) must give transformers' own float32 base-model
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


def matryoshka_folder(tmp_path, **keys):
    d = folder("qwen3", tmp_path)
    with open(d / "config.json") as f:
        cfg = json.load(f)
    cfg.update(keys)
    with open(d / "config.json", "w") as f:
        json.dump(cfg, f)
    return d


def unit_prefix(v, k):
    v = np.asarray(v, np.float64)[:, :k]
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_matryoshka_dimensions_listed(tmp_path):
    """config.json's matryoshka_dimensions (vLLM's key): a listed length is
    the first dimensions renormalised (numpy float64 on transformers'
    vectors); another is a 400 naming the allowed ones."""
    ref = REF["families"]["qwen3"]
    s = serve(matryoshka_folder(tmp_path, matryoshka_dimensions=[8, 16]), "--pooling", "last")
    try:
        for fmt in ("float", "base64"):
            st, r = post(s.url, {"model": "emb", "input": ref["ids"], "dimensions": 16,
                                 "encoding_format": fmt})
            assert st == 200, r
            if fmt == "float":
                v = np.array([d["embedding"] for d in r["data"]])
            else:
                import base64
                v = np.array([np.frombuffer(base64.b64decode(d["embedding"]), "<f4")
                              for d in r["data"]])
            assert v.shape == (len(ref["ids"]), 16)
            assert cosines(v, unit_prefix(ref["last"], 16)).min() >= 0.9999
            assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][:1], "dimensions": 32})
        assert st == 200 and len(r["data"][0]["embedding"]) == 32, r   # its own length
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][:1], "dimensions": 12})
        assert st == 400 and r["error"]["param"] == "dimensions", r
        assert "[8, 16]" in r["error"]["message"] and "'emb'" in r["error"]["message"]
        import urllib.request
        with urllib.request.urlopen(s.url + "/v1/models", timeout=60) as mr:
            caps = json.load(mr)["data"][0]["capabilities"]
        assert caps["matryoshka_dimensions"] == [8, 16]
    finally:
        assert s.stop() == 0


def test_matryoshka_any_length_and_refusals(tmp_path):
    ref = REF["families"]["qwen3"]
    s = serve(matryoshka_folder(tmp_path, is_matryoshka=True), "--pooling", "mean")
    try:
        st, r = post(s.url, {"model": "emb", "input": ref["ids"], "dimensions": 5})
        assert st == 200, r
        v = np.array([d["embedding"] for d in r["data"]])
        assert cosines(v, unit_prefix(ref["mean"], 5)).min() >= 0.9999
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
        st, r = post(s.url, {"model": "emb", "input": ref["ids"][:1], "dimensions": 33})
        assert st == 400 and "at most 32" in r["error"]["message"], r
    finally:
        assert s.stop() == 0
    s = serve(folder("llama", tmp_path), "--pooling", "last")   # not Matryoshka
    try:
        st, r = post(s.url, {"model": "emb", "input": [1, 2], "dimensions": 16})
        assert st == 400 and r["error"]["param"] == "dimensions", r
        assert "not a Matryoshka model" in r["error"]["message"]
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("value, says", [
    ([0, 8], "item 0"), ("16", "a list"), ([8, 64], "item 1")])
def test_matryoshka_bad_config_named(value, says, tmp_path):
    import subprocess
    from conftest import parley_bin
    d = matryoshka_folder(tmp_path, matryoshka_dimensions=value)
    r = subprocess.run([parley_bin(), "serve", "--port", "0", "--model", str(d), "--pooling",
                        "last"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "config.json" in r.stderr and "matryoshka_dimensions" in r.stderr, r.stderr
    assert says in r.stderr, r.stderr


def test_texts_are_tokenised_as_the_tokenizers_library_does(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    d = folder("llama", tmp_path)
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = ["hello world", "a b c d e f", "the quick brown fox"]
    ids = [tok.encode(t).ids for t in texts]
    s = serve(d, "--pooling", "mean")
    try:
        st, a = post(s.url, {"model": "emb", "input": texts})
        assert st == 200, a
        st, b = post(s.url, {"model": "emb", "input": ids})
        assert st == 200, b
        assert a["usage"]["prompt_tokens"] == sum(map(len, ids))
        assert cosines([x["embedding"] for x in a["data"]],
                       [x["embedding"] for x in b["data"]]).min() > 0.999999
    finally:
        assert s.stop() == 0


def test_qwen3_embedding_style_closing_token(tmp_path):
    """Qwen3-Embedding's tokenizer.json appends <|endoftext|> (a
    TemplateProcessing post-processor) and its vectors are that token's
    hidden state: a text's vector is the vector of the tokenizers library's
    ids for it, closing token included, and a truncated text keeps it."""
    tokenizers = pytest.importorskip("tokenizers")
    d = folder("qwen3", tmp_path)
    with open(d / "tokenizer.json") as f:
        tj = json.load(f)
    eos = [a for a in tj["added_tokens"] if a["content"] == "<|endoftext|>"][0]["id"]
    tj["post_processor"] = {"type": "Sequence", "processors": [
        tj["post_processor"],
        {"type": "TemplateProcessing",
         "single": [{"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                  {"Sequence": {"id": "B", "type_id": 1}},
                  {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
         "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eos],
                                              "tokens": ["<|endoftext|>"]}}}]}
    with open(d / "tokenizer.json", "w") as f:
        json.dump(tj, f)
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = ["what is the capital of France", "hello"]
    ids = [tok.encode(t).ids for t in texts]
    assert all(x[-1] == eos for x in ids)
    s = serve(d, "--pooling", "last")
    try:
        st, a = post(s.url, {"model": "emb", "input": texts})
        assert st == 200, a
        st, b = post(s.url, {"model": "emb", "input": ids})
        assert st == 200, b
        assert a["usage"]["prompt_tokens"] == sum(map(len, ids))
        assert cosines([x["embedding"] for x in a["data"]],
                       [x["embedding"] for x in b["data"]]).min() > 0.999999
        st, c = post(s.url, {"model": "emb", "input": texts[0], "truncate_prompt_tokens": 3})
        assert st == 200 and c["usage"]["prompt_tokens"] == 3, c
        st, e = post(s.url, {"model": "emb", "input": [ids[0][:2] + [eos]]})
        assert cosines([c["data"][0]["embedding"]], [e["data"][0]["embedding"]])[0] > 0.999999
    finally:
        assert s.stop() == 0

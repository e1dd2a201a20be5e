"""The gemma4 family behind the whole server, on the tiny E2B-like model of
tests/fixtures/gen_gemma4.py (transformers' checkpoint through llama.cpp
0.3.36's converter: per-layer embeddings, shared-KV layers, a window of 8
under 40-token prompts) and its 26B-A4B-like one (experts beside the dense
FFN in every layer), from their GGUFs and their Hugging Face folders:

- prompt logprobs (completions echo, token-id prompts, max_tokens 0)
  within 0.02 nats mean of transformers' float32 logits
  (tiny_gemma4_ref.json), and of llama-cpp-python 0.3.36's on the GGUF;
- several greedy streams at once: each stream's tokens are the ones its
  request gets alone, streaming equals the whole reply.

- tokenisation (/tokenize, BOS added) equal to the Hugging Face tokenizers
  library's from the folders and to llama-cpp-python 0.3.36's from the
  GGUFs (tokenizer.ggml.model "gemma4": SentencePiece-style BPE on raw
  UTF-8 with byte fallback) on tiny_gemma4_tokens.json's strings
  (gen_gemma4_tokens.py); the one string where they part (the converter
  typed <start_of_turn> a normal token: llama.cpp spells it out) each
  format follows its own reference.
"""
import concurrent.futures
import http.client
import json
import math
import os
import subprocess
import urllib.parse

import pytest

from conftest import ROOT, Server, parley_bin

FIX = os.path.join(ROOT, "tests", "fixtures")
REFS = json.load(open(os.path.join(FIX, "tiny_gemma4_ref.json")))["models"]
TOKENS = json.load(open(os.path.join(FIX, "tiny_gemma4_tokens.json")))["cases"]


def serve(model, extra=()):
    openai = pytest.importorskip("openai")
    s = Server("--model", model, "--served-model-name", "g4", "--log-level", "warn",
               "--max-model-len", "256", *extra)
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    return s


@pytest.fixture(scope="module", params=[("e2b", "gguf"), ("e2b", "hf"), ("moe", "gguf"),
                                        ("moe", "hf")], ids=lambda p: "-".join(p))
def srv(request):
    name, kind = request.param
    # the HF folder in its own precision (f32), as the GGUF is
    s = (serve(os.path.join(FIX, "tiny_gemma4_%s.gguf" % name)) if kind == "gguf" else
         serve(os.path.join(FIX, "tiny_gemma4", name), ("--cpu-weight-type", "f32")))
    s.kind, s.ref = "%s %s" % (name, kind), REFS[name]
    s.name, s.format = name, kind
    yield s
    assert s.stop() == 0


def log_softmax_at(row, i):
    m = max(row)
    return row[i] - m - math.log(sum(math.exp(v - m) for v in row))


def prompt_logprobs(s, ids):
    r = s.client.completions.create(model="g4", prompt=ids, max_tokens=0, echo=True,
                                    logprobs=1, temperature=0)
    return r.choices[0].logprobs.token_logprobs


@pytest.mark.parametrize("key", ["hf_logits", "llama_logits"])
def test_prompt_logprobs_match_references(srv, key):
    if key == "llama_logits" and key not in srv.ref:
        pytest.skip("no llama.cpp reference in the fixture")
    d = []
    for ids, lg in zip(srv.ref["ids"], srv.ref[key]):
        got = prompt_logprobs(srv, ids)
        assert got[0] is None and len(got) == len(ids)
        d += [abs(got[t] - log_softmax_at(lg[t - 1], ids[t])) for t in range(1, len(ids))]
    mean = sum(d) / len(d)
    print("%s vs %s: prompt logprobs max %.2e, mean %.2e nats" % (srv.kind, key, max(d), mean))
    assert mean < 0.02


def tokenize(s, text):
    c = http.client.HTTPConnection(s.host, s.port, timeout=60)
    c.request("POST", "/tokenize", body=json.dumps({"model": "g4", "prompt": text}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    assert r.status == 200, body
    return body["tokens"]


def test_tokenization_matches_references(srv):
    for case in TOKENS:
        want = case["hf"] if srv.format == "hf" else case["llama"][srv.name]
        assert tokenize(srv, case["text"]) == want, (srv.kind, case["text"])


def greedy(s, i, stream=False):
    ids = s.ref["ids"][i % 3][: 5 + 3 * i]
    kw = dict(model="g4", prompt=ids, max_tokens=12, temperature=0)
    if not stream:
        return s.client.completions.create(**kw).choices[0].text
    return "".join(c.choices[0].text for c in s.client.completions.create(stream=True, **kw)
                   if c.choices)


def test_concurrent_streams_equal_alone(srv):
    alone = [greedy(srv, i) for i in range(6)]
    assert any(alone)
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        streamed = list(ex.map(lambda i: greedy(srv, i, stream=True), range(6)))
    assert streamed == alone


def without_merges(tmp_path, name, merges):
    """tiny_gemma4_e2b.gguf with tokenizer.ggml.merges replaced (None:
    dropped)."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    r = gguf.GGUFReader(os.path.join(FIX, "tiny_gemma4_e2b.gguf"))
    w = gguf.GGUFWriter(str(tmp_path / name), "gemma4")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "tokenizer.ggml.merges"):
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(k, f.contents())
        else:
            w.add_key_value(k, f.contents(), f.types[0])
    if merges is not None:
        w.add_array("tokenizer.ggml.merges", merges)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data).astype(np.float32),
                     raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / name)


@pytest.mark.parametrize("merges", [None, ["\u2581t", "h e"]], ids=["missing", "not_a_pair"])
def test_bad_merges_named(tmp_path, merges):
    path = without_merges(tmp_path, "bad.gguf", merges)
    r = subprocess.run([parley_bin(), "serve", "--host", "127.0.0.1", "--port", "0",
                        "--model", path], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "tokenizer.ggml.merges" in r.stderr, r.stderr


def test_rewritten_file_serves(tmp_path):
    """The rewriting keeps a good file good (so the failures above are the
    changes')."""
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(os.path.join(FIX, "tiny_gemma4_e2b.gguf"))
    merges = r.fields["tokenizer.ggml.merges"].contents()
    s = serve(without_merges(tmp_path, "same.gguf", merges))
    s.name, s.format = "e2b", "gguf"
    try:
        for case in TOKENS:
            assert tokenize(s, case["text"]) == case["llama"]["e2b"]
    finally:
        assert s.stop() == 0

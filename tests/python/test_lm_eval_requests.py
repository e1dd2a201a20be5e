"""lm-evaluation-harness's local-completions model against parley, without
lm_eval installed (it is ~760 MB; bench/lm_eval_compare.py runs the real
harness): the exact requests it sends, read the way it reads the replies,
checked against llama-cpp-python's answers to the same requests
(tests/fixtures/lm_eval_fixtures.json, made by gen_lm_eval_fixtures.py from
the local tasks in tests/lm_eval/).

- discovery: local-completions takes its remote tokenizer when GET
  /tokenizer_info answers an object with eos_token and POST /tokenize
  {"prompt": "test", "add_special_tokens": false} a token list;
  /tokenizer_info says what llama.cpp reads from the GGUF;
- tokenization: contexts and whole texts through /tokenize as
  RemoteTokenizer.encode sends them give llama.cpp's ids, and /detokenize
  (RemoteTokenizer.decode) gives the text back; special tokens' text in a
  prompt is read as those tokens (so encode(eos_token) is the EOS id);
- loglikelihood: {"model", "prompt": [[ids], ...], "temperature": 0,
  "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true}, parsed as
  parse_logprobs does (choices sorted by index, the sum of
  token_logprobs[ctxlen:-1], greedy when each is max(top_logprobs[i]));
  the sums agree with llama.cpp's, and so does the picked choice;
- generate_until: {"prompt": [[ids], ...], "model", "max_tokens",
  "temperature": 0, "stop": until + [eos_token], "seed": 1234}, each text
  taken by its choice's index: llama.cpp's greedy text.
A remote model answers /tokenizer_info with a clear 501.
"""
import json
import math
import os
import urllib.error
import urllib.request

import pytest

from conftest import Server

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "lm_eval_fixtures.json")
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def fx():
    with open(FIXTURES) as f:
        return json.load(f)


def call(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def encode(url, text):
    """RemoteTokenizer.encode."""
    st, r = call(url + "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert st == 200, r
    assert isinstance(r["tokens"], list)
    return r["tokens"]


def test_tokenizer_info_is_llama_cpps_view_of_the_gguf(model_url, fx):
    st, info = call(model_url + "/tokenizer_info")
    assert st == 200, info
    ref = fx["tokenizer_info"]
    for k, v in ref.items():
        assert info[k] == v, (k, info[k], v)
    assert info["tokenizer_class"] == "GPT2TokenizerFast"   # a gpt2 (byte BPE) vocabulary
    st, models = call(model_url + "/v1/models/" + MODEL)
    assert info["model_max_length"] == models["max_model_len"]
    # check_remote_tokenizer_support: both probes answer.
    assert encode(model_url, "test")
    st, again = call(model_url + "/tokenizer_info?model=" + MODEL)
    assert st == 200 and again == info
    st, err = call(model_url + "/tokenizer_info?model=nope")
    assert st == 404 and err["error"]["code"] == "model_not_found"


def test_remote_tokenizer_encode_decode(model_url, fx):
    for case in fx["mc"]:
        for ch in case["choices"]:
            assert encode(model_url, ch["context"]) == ch["context_ids"]
            whole = encode(model_url, ch["context"] + ch["continuation"])
            assert whole == ch["context_ids"] + ch["continuation_ids"]
            st, r = call(model_url + "/detokenize", {"tokens": whole})
            assert st == 200 and r["prompt"] == ch["context"] + ch["continuation"]
    for case in fx["gen"]["cases"]:
        assert encode(model_url, case["prompt"]) == case["prompt_ids"]


def test_special_tokens_text_reads_as_the_tokens(model_url, fx):
    """Raw prompts' special tokens' text is read as those tokens, as
    llama-cpp-python, vLLM and llama-server read completion prompts; so
    RemoteTokenizer.eos_token_id (encode(eos_token)[0]) is the EOS id, and
    a ChatML prompt sent as text is the prompt the chat template makes."""
    for case in fx["special"]:
        assert encode(model_url, case["text"]) == case["ids"], case["text"]
    st, info = call(model_url + "/tokenizer_info")
    assert encode(model_url, info["eos_token"])[0] == info["eos_token_id"]
    assert encode(model_url, info["bos_token"])[0] == info["bos_token_id"]
    chatml = fx["special"][1]
    st, out = call(model_url + "/v1/completions", {"model": MODEL, "prompt": chatml["text"],
                                                    "max_tokens": 1, "temperature": 0})
    assert st == 200 and out["usage"]["prompt_tokens"] == len(chatml["ids"])


def parse_logprobs(out, ctxlens):
    """lm_eval's LocalCompletionsAPI.parse_logprobs."""
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
        lp = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        top = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        res.append((sum(lp), all(t == max(tp.values()) for t, tp in zip(lp, top))))
    return res


# Per continuation (1-2 tokens): parley and llama.cpp both run 8-bit
# activations in prefill, so they differ from each other by ~0.1 nats
# (measured on all 156 choices of parley_mc with an f32 K/V cache: max
# 0.376, mean 0.105, median 0.09; on this fixture's 32: max 0.22, mean 0.073
# with f32 K/V, max 0.52, mean 0.11 with f16, the default) and each of them
# from the float64 forward by as much (llama.cpp: max 0.72, mean 0.10;
# parley f32 K/V: max 0.63, mean 0.12; f16: max 0.44, mean 0.10). Where
# parley and llama.cpp disagree by more than LL_TOL, the float64 reference
# decides: parley must then be within LL_TOL of it, or nearer it than
# llama.cpp is. A wrong position or a missing softmax moves sums by whole
# nats (a one-position shift: 10.9).
LL_TOL = 0.45
MEAN_F64_TOL = 0.05       # parley's mean distance to float64 over llama.cpp's


def test_loglikelihood_requests_as_lm_eval_sends_them(model_url, fx):
    reqs = [(ch["context_ids"], ch["continuation_ids"]) for c in fx["mc"] for ch in c["choices"]]
    refs = [ch for c in fx["mc"] for ch in c["choices"]]
    got = []
    for i in range(0, len(reqs), 8):     # batch_size=8, as the driver runs it
        batch = reqs[i:i + 8]
        body = {"model": MODEL, "prompt": [c + k for c, k in batch], "temperature": 0,
                "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
        st, out = call(model_url + "/v1/completions", body)
        assert st == 200, out
        assert sorted(ch["index"] for ch in out["choices"]) == list(range(len(batch)))
        for ch in out["choices"]:
            c, k = batch[ch["index"]]
            lp = ch["logprobs"]
            assert len(lp["token_logprobs"]) == len(c) + len(k) + 1   # + the generated one
            assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
            assert all(len(t) >= 1 for t in lp["top_logprobs"][1:])
        got += parse_logprobs(out, [len(c) for c, _ in batch])
    exact = [abs(g[0] - r["loglikelihood_f64"]) for g, r in zip(got, refs)]
    theirs = [abs(r["loglikelihood"] - r["loglikelihood_f64"]) for r in refs]
    for g, r, e, t in zip(got, refs, exact, theirs):
        if abs(g[0] - r["loglikelihood"]) >= LL_TOL:
            assert e < LL_TOL or e <= t, (r["context"], r["continuation"], g[0], r)
    assert sum(exact) / len(exact) < sum(theirs) / len(theirs) + MEAN_F64_TOL, \
        (sum(exact) / len(exact), sum(theirs) / len(theirs))
    for g, r in zip(got, refs):
        assert math.isfinite(g[0]) and g[0] < 0
        if abs(g[0] - r["loglikelihood"]) < 0.05:
            assert g[1] == r["greedy"]
    # The choice lm_eval picks (acc) is llama.cpp's wherever llama.cpp's
    # margin is wider than the noise allows to flip.
    at = 0
    for case in fx["mc"]:
        n = len(case["choices"])
        ours = [g[0] for g in got[at:at + n]]
        theirs = [ch["loglikelihood"] for ch in case["choices"]]
        at += n
        top = sorted(theirs)
        if top[-1] - top[-2] > 2 * LL_TOL:
            assert ours.index(max(ours)) == theirs.index(max(theirs)), case["question"]


def test_generate_until_requests_as_lm_eval_sends_them(model_url, fx):
    g = fx["gen"]
    st, info = call(model_url + "/tokenizer_info")
    stop = g["until"] + [info["eos_token"]]          # handle_stop_sequences adds EOS
    cases = g["cases"]
    body = {"prompt": [c["prompt_ids"] for c in cases], "model": MODEL,
            "max_tokens": g["max_gen_toks"], "temperature": 0, "stop": stop, "seed": 1234}
    st, out = call(model_url + "/v1/completions", body)
    assert st == 200, out
    texts = [None] * len(out["choices"])               # parse_generations
    for ch in out["choices"]:
        texts[ch["index"]] = ch["text"]
        assert ch["finish_reason"] in ("stop", "length")
    assert len(texts) == len(cases)
    assert out["usage"]["completion_tokens"] <= g["max_gen_toks"] * len(cases)
    for t, c in zip(texts, cases):
        assert "\n" not in t
        assert t == c["llama_text"], (c["prompt"][-40:], t, c["llama_text"])


def test_remote_model_has_no_tokenizer_info():
    up = Server("--backend", "mock", "--log-level", "warn")
    try:
        gw = Server("--upstream", up.url + "/v1", "--log-level", "warn")
        try:
            st, err = call(gw.url + "/tokenizer_info")
            assert st == 501
            assert err["error"]["code"] == "not_implemented"
            assert "upstream" in err["error"]["message"]
        finally:
            assert gw.stop() == 0
    finally:
        assert up.stop() == 0

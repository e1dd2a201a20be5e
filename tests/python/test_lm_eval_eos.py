"""Every generated token has its logprobs, the end-of-sequence too (issue 34).

lm-evaluation-harness scores a choice with one request: the context and
the choice as the prompt, echo, max_tokens 1, logprobs 1; it sums
token_logprobs[ctxlen:-1], dropping the one generated token. When that
token was the end-of-sequence and parley left its entry out, the slice
dropped the choice's last token instead: one-token choices scored 0.0.

- lm_eval itself (the package, its local-completions model, parley's
  remote tokenizer) runs tests/lm_eval/parley_eos.yaml, one-token choices
  after most of which the model's next token is EOS; each choice's score
  equals the float64 forward's (tests/fixtures/lm_eval_eos_fixtures.json,
  made by gen_lm_eval_eos_fixtures.py) within the noise of parley's
  quantised activations, and so does the picked choice;
- the same slice by hand (the request lm_eval sends), streamed and whole;
- without echo, a completion that is only the EOS returns its logprob
  (token "", as vLLM writes it), streamed and whole;
- chat: logprobs.content has as many entries as completion_tokens, the
  last one the EOS, streamed and whole;
- the mock's natural stop is an EOS token too, and a remote backend
  passes on what its upstream sends (parley on the mock behind parley).
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from conftest import ROOT, Server, post_json

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "lm_eval_eos_fixtures.json")
MODEL = "smollm2-135m-instruct"
# A one-token continuation's loglikelihood: parley against the float64
# forward on the same weights. parley runs 8-bit activations in prefill
# (test_lm_eval_requests.py measured max 0.44, mean 0.10 nats over 156
# choices); a dropped EOS entry scores such a choice 0.0, off by the whole
# loglikelihood (0.5 to 13 nats on this task's choices).
LL_TOL = 0.45
MEAN_TOL = 0.15


@pytest.fixture(scope="module")
def fx():
    with open(FIXTURES) as f:
        return json.load(f)


def all_choices(fx):
    """(context ids, continuation ids, fixture choice) of every choice."""
    return [(c["context_ids"], c["continuation_ids"], c) for d in fx["docs"]
            for c in d["choices"]]


def stream(url, body):
    """The data events of a streamed request, [DONE] left out."""
    req = urllib.request.Request(url, json.dumps(dict(body, stream=True)).encode(),
                                 {"Content-Type": "application/json"})
    out = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_fixture_is_one_token_choices(fx):
    cases = all_choices(fx)
    assert len(cases) == 32 and all(len(k) == 1 for _, k, _ in cases)


_EOS_REPLIES = {}


def eos_replies(url, fx):
    """The request lm_eval sends for loglikelihood (batches of 8), and the
    choices after which parley's one generated token was the EOS (checked
    once per server)."""
    if url not in _EOS_REPLIES:
        _EOS_REPLIES[url] = score_all(url, fx)
    return _EOS_REPLIES[url]


def score_all(url, fx):
    cases, eos = all_choices(fx), []
    for i in range(0, len(cases), 8):
        batch = cases[i:i + 8]
        body = {"model": MODEL, "prompt": [c + k for c, k, _ in batch], "temperature": 0,
                "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
        st, out = post_json(url + "/v1/completions", body)
        assert st == 200, out
        assert out["usage"]["completion_tokens"] == len(batch)
        for ch in out["choices"]:
            ctx, cont, ref = batch[ch["index"]]
            lp = ch["logprobs"]
            # One entry per prompt token and one for the generated token,
            # whatever it is: the harness drops the last.
            assert len(lp["token_logprobs"]) == len(ctx) + len(cont) + 1
            ll = sum(lp["token_logprobs"][len(ctx):-1])
            assert abs(ll - ref["loglikelihood_f64"]) < LL_TOL, (ref["choice"], ll, ref)
            if ch["finish_reason"] == "stop":
                assert lp["tokens"][-1] == "" and ch["text"].endswith(ref["choice"])
                assert math.isfinite(lp["token_logprobs"][-1]) and lp["token_logprobs"][-1] < 0
                eos.append((ctx, cont, ref, body))
    return eos


def test_lm_eval_slice_by_hand(model_url, fx):
    """lm_eval's slice, whole and streamed, where the generated token is EOS
    (10 of the 32 choices when this was written)."""
    eos = eos_replies(model_url, fx)
    assert len(eos) >= 6, "too few choices end in EOS to test the case: %d" % len(eos)
    ctx, cont, ref, body = eos[0]
    chunks = stream(model_url + "/v1/completions", dict(body, prompt=ctx + cont))
    lps = [ch["logprobs"] for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    toks = [t for lp in lps for t in lp["token_logprobs"]]
    assert len(toks) == len(ctx) + len(cont) + 1 and lps[-1]["tokens"][-1] == ""
    assert abs(sum(toks[len(ctx):-1]) - ref["loglikelihood_f64"]) < LL_TOL


def test_completion_of_only_eos_has_its_logprob(model_url, fx):
    ctx, cont, _, _ = eos_replies(model_url, fx)[0]
    body = {"model": MODEL, "prompt": ctx + cont, "temperature": 0, "max_tokens": 5,
            "logprobs": 2}
    st, out = post_json(model_url + "/v1/completions", body)
    assert st == 200, out
    ch = out["choices"][0]
    assert ch["text"] == "" and ch["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == 1
    lp = ch["logprobs"]
    assert lp is not None and lp["tokens"] == [""] and lp["text_offset"] == [0]
    assert len(lp["token_logprobs"]) == 1 and lp["token_logprobs"][0] < 0
    assert lp["top_logprobs"][0][""] == lp["token_logprobs"][0]   # greedy: the top one
    chunks = stream(model_url + "/v1/completions", body)
    got = [ch["logprobs"] for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    assert [t for g in got for t in g["tokens"]] == [""]
    assert abs(got[0]["token_logprobs"][0] - lp["token_logprobs"][0]) < 1e-4


def chat_entries_and_usage(url, body):
    """(content entries, completion_tokens, finish) whole and streamed."""
    st, out = post_json(url + "/v1/chat/completions", body)
    assert st == 200, out
    whole = (out["choices"][0]["logprobs"]["content"], out["usage"]["completion_tokens"],
             out["choices"][0]["finish_reason"])
    chunks = stream(url + "/v1/chat/completions",
                    dict(body, stream_options={"include_usage": True}))
    entries = [e for c in chunks for ch in c["choices"] if ch.get("logprobs")
               for e in ch["logprobs"]["content"]]
    finish = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    return whole, (entries, chunks[-1]["usage"]["completion_tokens"], finish[-1])


def check_chat_eos(url, body):
    for entries, n, finish in chat_entries_and_usage(url, body):
        assert finish == "stop"
        assert len(entries) == n, (len(entries), n)
        assert entries[-1]["token"] == "" and entries[-1]["bytes"] == []
        assert entries[-1]["logprob"] <= 0
        assert entries[-1]["top_logprobs"][0]["token"] == ""


def test_chat_content_counts_the_eos(model_url):
    body = {"model": MODEL, "temperature": 0, "max_tokens": 60, "logprobs": True,
            "top_logprobs": 1, "messages": [{"role": "user", "content": "Say hello."}]}
    check_chat_eos(model_url, body)


def test_mock_and_remote_pass_the_eos_on():
    up = Server("--backend", "mock", "--log-level", "warn")
    try:
        gw = Server("--upstream", up.url + "/v1", "--log-level", "warn")
        try:
            body = {"model": "mock", "logprobs": True, "top_logprobs": 1, "seed": 3,
                    "messages": [{"role": "user", "content": "hello"}]}
            check_chat_eos(up.url, body)
            check_chat_eos(gw.url, body)
        finally:
            assert gw.stop() == 0
    finally:
        assert up.stop() == 0


def lm_eval_samples(out, task):
    files = glob.glob(os.path.join(out, "**", "samples_%s_*.jsonl" % task), recursive=True)
    assert files, "lm_eval wrote no samples under " + out
    with open(sorted(files)[-1]) as f:
        rows = [json.loads(line) for line in f]
    return sorted(rows, key=lambda r: r["doc_id"])


def test_lm_eval_scores_one_token_choices_before_eos(model_url, fx):
    """The real harness, end to end, against the float64 forward."""
    pytest.importorskip("lm_eval")
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions",
               "--model_args", "base_url=%s/v1/completions,model=%s" % (model_url, MODEL),
               "--tasks", "parley_eos", "--include_path", os.path.join(ROOT, "tests", "lm_eval"),
               "--batch_size", "8", "--log_samples", "--output_path", out, "--seed", "1234"]
        env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false")
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = lm_eval_samples(out, "parley_eos")
    assert len(rows) == len(fx["docs"])
    diffs = []
    for row, doc in zip(rows, fx["docs"]):
        ours = [float(x[0]) for x in row["filtered_resps"]]
        ref = [c["loglikelihood_f64"] for c in doc["choices"]]
        for o, c in zip(ours, doc["choices"]):
            assert o != 0.0 and abs(o - c["loglikelihood_f64"]) < LL_TOL, (c["choice"], o, c)
            diffs.append(abs(o - c["loglikelihood_f64"]))
        top = sorted(ref)
        if top[-1] - top[-2] > 2 * LL_TOL:
            assert ours.index(max(ours)) == ref.index(max(ref)), doc["context"][-40:]
    assert sum(diffs) / len(diffs) < MEAN_TOL, sum(diffs) / len(diffs)

"""Batched prompts on /v1/completions through the openai SDK: an array of
strings or of token arrays gives n choices per prompt, index = prompt x n + j
as OpenAI orders them; each choice equals the same prompt sent alone;
usage counts every prompt once."""
import json
import urllib.error
import urllib.request

import pytest

from conftest import Server

openai = pytest.importorskip("openai")


@pytest.fixture
def echo_server():
    s = Server("--backend", "mock", "--mock-mode", "echo", "--log-level", "warn")
    yield s
    assert s.stop() == 0


def test_batch_of_strings_order_and_usage(echo_server):
    client = openai.OpenAI(base_url=echo_server.url + "/v1", api_key="unused")
    prompts = ["red green", "one two three", "x"]
    r = client.completions.create(model="mock", prompt=prompts, n=2, max_tokens=8)
    assert [c.index for c in r.choices] == list(range(6))
    for c in r.choices:
        assert c.text == prompts[c.index // 2]
        assert c.finish_reason == "stop"
    alone = [client.completions.create(model="mock", prompt=p, max_tokens=8) for p in prompts]
    assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert r.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)


def test_batch_streamed_carries_every_index(echo_server):
    client = openai.OpenAI(base_url=echo_server.url + "/v1", api_key="unused")
    texts = {}
    for ch in client.completions.create(model="mock", prompt=["a b", "c"], n=2,
                                        max_tokens=8, stream=True):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {0: "a b", 1: "a b", 2: "c", 3: "c"}


def test_batch_errors(echo_server):
    def post(body):
        req = urllib.request.Request(echo_server.url + "/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req)
            return 200, None
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())["error"]
    for prompt, msg in [([[1, "a"]], "prompt[0][1]"), ([[]], "prompt[0]"),
                        (["a", 3], "prompt[1]"), ([], "prompt")]:
        status, err = post({"model": "mock", "prompt": prompt})
        assert status == 400, prompt
        assert err["param"] == "prompt" and msg in err["message"], (prompt, err)
    status, err = post({"model": "mock", "prompt": ["a"] * 100, "n": 100})
    assert status == 400 and err["param"] == "n"


def test_batch_on_the_default_model_equals_single(model_url):
    client = openai.OpenAI(base_url=model_url + "/v1", api_key="unused")
    prompts = ["The capital of France is", "1, 2, 3, 4,"]
    r = client.completions.create(model="smollm2-135m-instruct", prompt=prompts,
                                  max_tokens=8, temperature=0)
    for i, p in enumerate(prompts):
        one = client.completions.create(model="smollm2-135m-instruct", prompt=p,
                                        max_tokens=8, temperature=0)
        assert r.choices[i].text == one.choices[0].text

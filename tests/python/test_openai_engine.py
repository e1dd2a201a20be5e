"""The official openai SDK against parley serving the default model on the
CPU engine (the mock is covered by test_openai_client.py)."""
import os

import openai
import pytest

from conftest import Server

MODEL = os.environ.get("PARLEY_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")
MSGS = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def engine():
    if not os.path.exists(MODEL):
        # scripts/test.sh sets PARLEY_MODEL: there a missing model is an error.
        assert not os.environ.get("PARLEY_MODEL"), "PARLEY_MODEL=%s is missing" % MODEL
        pytest.skip("default model not found: " + MODEL)
    s = Server("--backend", "cpu", "--model", MODEL, "--served-model-name", "smol",
               "--threads", "2", "--log-level", "warn")
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
    assert s.stop() == 0


def test_chat_greedy_stream_equals_non_stream(engine):
    full = engine.chat.completions.create(model="smol", messages=MSGS, max_tokens=12,
                                          temperature=0)
    assert full.object == "chat.completion" and full.model == "smol"
    c = full.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens
    parts, finish = [], None
    stream = engine.chat.completions.create(model="smol", messages=MSGS, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    for chunk in chunks:
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert "".join(parts) == c.message.content
    assert finish == c.finish_reason
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_completions_logprobs(engine):
    r = engine.completions.create(model="smol", prompt="The capital of France is",
                                  max_tokens=6, temperature=0, logprobs=3)
    ch = r.choices[0]
    lp = ch.logprobs
    assert len(lp.tokens) == r.usage.completion_tokens == len(lp.token_logprobs)
    assert "".join(lp.tokens) == ch.text
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3
        assert l <= 0 and top[tok] == pytest.approx(max(top.values()))


def test_chat_logprobs_and_n(engine):
    r = engine.chat.completions.create(model="smol", messages=MSGS, max_tokens=5, n=2,
                                       temperature=0.9, seed=3, logprobs=True, top_logprobs=2)
    assert sorted(c.index for c in r.choices) == [0, 1]
    total = 0
    for c in r.choices:
        content = c.logprobs.content
        # A token may be part of a character (a byte-level token): its
        # "token" is then U+FFFD, and its bytes make up the text, as the
        # OpenAI reference says to combine them.
        raw = b"".join(bytes(t.bytes) for t in content)
        assert raw.decode("utf-8", "replace") == c.message.content
        if all(t.token != "\ufffd" for t in content):
            assert "".join(t.token for t in content) == c.message.content
        assert all(len(t.top_logprobs) == 2 for t in content)
        total += len(content)
    assert r.usage.completion_tokens == total


def test_models_retrieve_and_errors(engine):
    assert [m.id for m in engine.models.list()] == ["smol"]
    m = engine.models.retrieve("smol")
    assert m.id == "smol" and m.owned_by == "parley"
    with pytest.raises(openai.NotFoundError):
        engine.models.retrieve("nope")
    with pytest.raises(openai.BadRequestError) as e:
        engine.chat.completions.create(model="smol", messages=MSGS, top_p=0)
    assert e.value.body["param"] == "top_p"

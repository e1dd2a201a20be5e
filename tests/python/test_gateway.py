"""The official openai SDK against parley as a gateway (--upstream) in front
of two parley mock upstreams: chat and completions, streaming and not, n,
usage, extension fields, and an upstream's error coming back with its status."""
import json
import urllib.request

import pytest

from conftest import Server

openai = pytest.importorskip("openai")


@pytest.fixture
def gateway():
    ups = [Server("--backend", "mock", "--served-model-name", "mock", "--mock-mode", "echo",
                  "--log-level", "warn") for _ in range(2)]
    gw = Server(*sum((["--upstream", u.url + "/v1"] for u in ups), []), "--log-level", "warn")
    yield gw, ups
    assert gw.stop() == 0
    for u in ups:
        assert u.stop() == 0


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=gateway[0].url + "/v1", api_key="unused")


def status(url):
    with urllib.request.urlopen(url + "/status") as r:
        return json.load(r)


MSGS = [{"role": "user", "content": "alpha beta gamma delta epsilon"}]


def test_models_lists_the_upstream_model(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["mock"]


def test_chat_non_stream_equals_the_upstream(client, gateway):
    direct = openai.OpenAI(base_url=gateway[1][0].url + "/v1", api_key="unused")
    want = direct.chat.completions.create(model="mock", messages=MSGS, max_tokens=3)
    r = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=3)
    assert r.object == "chat.completion"
    assert r.choices[0].message.content == "alpha beta gamma"
    assert r.choices[0].finish_reason == want.choices[0].finish_reason
    assert r.usage.completion_tokens == 3
    assert r.usage.prompt_tokens == want.usage.prompt_tokens
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 3


def test_chat_stream_matches_non_stream(client):
    full = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=4)
    parts, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model="mock", messages=MSGS, max_tokens=4,
                                                stream=True,
                                                stream_options={"include_usage": True}):
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == 4


def test_completions_stream_and_n(client):
    r = client.completions.create(model="mock", prompt="one two three", max_tokens=2, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert all(c.text == "one two" for c in r.choices)
    assert r.usage.completion_tokens == 6
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="mock", prompt="one two three", max_tokens=2, stream=True) if c.choices)
    assert text == "one two"


def test_extension_fields_and_prompt_cache_key_pass(client, gateway):
    gw, ups = gateway
    before = [status(u.url)["models"]["mock"]["submitted"] for u in ups]  # the probes
    for _ in range(4):
        r = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=2,
                                           extra_body={"prompt_cache_key": "c-7",
                                                       "vendor_extension": {"x": 1}})
        assert r.choices[0].message.content == "alpha beta"
    per_upstream = [status(u.url)["models"]["mock"]["submitted"] - b for u, b in zip(ups, before)]
    assert sorted(per_upstream) == [0, 4]


def test_all_upstreams_down_is_a_clean_error(client, gateway):
    for u in gateway[1]:
        assert u.stop() == 0
    with pytest.raises(openai.APIStatusError) as e:
        client.with_options(max_retries=0).chat.completions.create(
            model="mock", messages=MSGS, max_tokens=2)
    assert e.value.status_code == 502
    assert "upstream" in str(e.value)
    # streaming too: the gateway holds the stream's headers until the first
    # token, so an upstream failure before it keeps its own status
    with pytest.raises(openai.APIStatusError) as e:
        client.with_options(max_retries=0).chat.completions.create(
            model="mock", messages=MSGS, max_tokens=2, stream=True)
    assert e.value.status_code == 502

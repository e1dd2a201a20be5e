"""The official openai SDK against parley on the mock backend."""
import openai
import pytest

MSGS = [{"role": "user", "content": "Which option is right?"}]


def test_chat_non_stream(client):
    r = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=6)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == "mock"
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert len(c.message.content.split()) == 6
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 6
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6


def test_chat_stream_collects_deltas(client):
    full = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=8, seed=11)
    stream = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=8, seed=11,
                                            stream=True)
    parts, finish, roles = [], None, 0
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        for ch in chunk.choices:
            if ch.delta.role:
                roles += 1
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert roles == 1
    assert finish == "length"
    assert "".join(parts) == full.choices[0].message.content


def test_stream_include_usage(client):
    stream = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=5,
                                            stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_completions(client):
    r = client.completions.create(model="mock", prompt="Say something", max_tokens=4)
    assert r.object == "text_completion"
    assert len(r.choices[0].text.split()) == 4
    texts = [c.choices[0].text for c in client.completions.create(
        model="mock", prompt="Say something", max_tokens=4, stream=True)]
    assert len("".join(texts).split()) == 4


def test_n_choices(client):
    r = client.chat.completions.create(model="mock", messages=MSGS, max_tokens=3, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]


def test_models_list(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["mock"]


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-5", messages=MSGS)
    assert e.value.body["code"] == "model_not_found"


def test_bad_parameter_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="mock", messages=MSGS, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="mock", messages=MSGS,
                                       tools=[{"type": "function",
                                               "function": {"name": "f g", "parameters": {}}}])
    assert e.value.body["param"] == "tools[0]"

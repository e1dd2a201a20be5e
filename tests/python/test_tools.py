"""Tool calling, checked with the official openai SDK: tool_choice
"required" on the CPU engine with the default model (non-streaming and
streaming reassembled by the SDK), tool history, and "auto" replies that do
not parse coming back as content (mock backend in echo mode)."""
import json
import os

import pytest

from conftest import Server

openai = pytest.importorskip("openai")
MODEL = os.environ.get("PARLEY_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "description": "Time in a timezone",
                 "parameters": {"type": "object",
                                "properties": {"tz": {"type": "string", "maxLength": 20}},
                                "required": ["tz"]}},
}


@pytest.fixture(scope="module")
def eclient():
    if not os.path.exists(MODEL):
        pytest.skip("model not found: " + MODEL)
    s = Server("--backend", "cpu", "--model", MODEL, "--log-level", "warn")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
    c.model_id = c.models.list().data[0].id
    yield c
    assert s.stop() == 0


def check_call(call, tools):
    names = {t["function"]["name"]: t for t in tools}
    assert call.type == "function" and call.id
    assert call.function.name in names
    args = json.loads(call.function.arguments)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(args, names[call.function.name]["function"]["parameters"])


MSGS = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def test_required_non_streaming(eclient):
    r = eclient.chat.completions.create(model=eclient.model_id, messages=MSGS,
                                        tools=[WEATHER, TIME], tool_choice="required",
                                        temperature=1.0, seed=4, max_tokens=120)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.tool_calls
    for call in c.message.tool_calls:
        check_call(call, [WEATHER, TIME])


def test_named_function(eclient):
    r = eclient.chat.completions.create(
        model=eclient.model_id, messages=MSGS, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=120)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"       # as OpenAI and vLLM answer a named one
    assert [c.function.name for c in calls] == ["get_time"]
    check_call(calls[0], [TIME])


def test_required_streaming_reassembled_by_sdk(eclient):
    stream_api = getattr(eclient.chat.completions, "stream", None) or \
        eclient.beta.chat.completions.stream
    with stream_api(model=eclient.model_id, messages=MSGS, tools=[WEATHER],
                    tool_choice="required", max_tokens=120) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    c = final.choices[0]
    assert c.finish_reason == "tool_calls"
    assert len(c.message.tool_calls) >= 1
    check_call(c.message.tool_calls[0], [WEATHER])


def test_tool_history_accepted(eclient):
    msgs = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather",
                          "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    ]
    r = eclient.chat.completions.create(model=eclient.model_id, messages=msgs,
                                        tools=[WEATHER], max_tokens=40)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.fixture
def echo_client():
    s = Server("--backend", "mock", "--mock-mode", "echo", "--log-level", "warn")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
    c.model_id = c.models.list().data[0].id
    yield c
    assert s.stop() == 0


def test_auto_parses_calls_and_returns_the_rest_as_content(echo_client):
    good = '<tool_call> {"name": "get_weather", "arguments": {"city": "Oslo", ' \
           '"unit": "celsius"}} </tool_call>'
    bad = [
        '<tool_call> {"name": "get_weather", "arguments": {"city": </tool_call>',
        '<tool_call> {"name": "unknown_fn", "arguments": {}} </tool_call>',
        'just words, no call',
    ]
    for stream in (False, True):
        kw = dict(model=echo_client.model_id, tools=[WEATHER], tool_choice="auto")
        if not stream:
            r = echo_client.chat.completions.create(
                messages=[{"role": "user", "content": good}], **kw)
            assert r.choices[0].finish_reason == "tool_calls"
            assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
        for text in bad + ([] if not stream else [good]):
            if not stream:
                r = echo_client.chat.completions.create(
                    messages=[{"role": "user", "content": text}], **kw)
                assert r.choices[0].finish_reason == "stop"
                assert r.choices[0].message.content == text
                assert not r.choices[0].message.tool_calls
                continue
            chunks = list(echo_client.chat.completions.create(
                messages=[{"role": "user", "content": text}], stream=True, **kw))
            content = "".join(ch.choices[0].delta.content or "" for ch in chunks
                              if ch.choices)
            finish = [ch.choices[0].finish_reason for ch in chunks
                      if ch.choices and ch.choices[0].finish_reason]
            if text == good:
                assert finish == ["tool_calls"] and content == ""
            else:
                assert finish == ["stop"] and content == text


@pytest.mark.parametrize("extra,param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0]"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                          "function": {"name": "nope"}}}, "tool_choice"),
])
def test_bad_tool_requests(echo_client, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        echo_client.chat.completions.create(model=echo_client.model_id, messages=MSGS,
                                            extra_body=extra)
    assert param in str(e.value)

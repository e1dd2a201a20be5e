"""The Gated DeltaNet hybrid behind the whole server through the official
openai SDK: tests/fixtures/tiny_qwen35.gguf (gen_qwen35.py: transformers'
random checkpoint through llama.cpp's converter; its template is the tiny
vocabulary's ChatML) served by parley:

- chat completions, and streaming giving the whole reply's text and usage;
- tools: a required call and a named one come back parsed into tool_calls
  (whole and streamed), their arguments valid for the tool's schema
  (jsonschema);
- structured outputs: response_format json_schema, the reply validated
  with jsonschema;
- a debate job through the jobs API (two rounds, three agents, constrained
  answers): every agent answers in every round, each turn's prompt through
  the hybrid's recurrent state slots.
"""
import json
import os
import urllib.parse

import pytest

from conftest import ROOT, Server, debate_job

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

GGUF = os.path.join(ROOT, "tests", "fixtures", "tiny_qwen35.gguf")
NAME = "tiny_qwen35"
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                                  "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}
ARGS = {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20},
                       "days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["city", "days"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city", "parameters": ARGS}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}
MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name three primes."}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    env = dict(os.environ, PARLEY_JOBS_DIR=str(tmp_path_factory.mktemp("jobs")))
    s = Server("--model", GGUF, "--served-model-name", NAME, "--log-level", "warn",
               "--max-model-len", "4096", env=env)
    u = urllib.parse.urlparse(s.url)
    s.host, s.port, s.name = u.hostname, u.port, NAME
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    yield s
    assert s.stop() == 0


def test_models_lists_it(srv):
    assert [m.id for m in srv.client.models.list().data] == [NAME]


def test_chat_and_stream_agree(srv):
    kw = dict(model=NAME, messages=MSGS, max_tokens=24, temperature=0)
    whole = srv.client.chat.completions.create(**kw)
    c = whole.choices[0]
    assert c.finish_reason in ("stop", "length") and c.message.role == "assistant"
    assert whole.usage.completion_tokens >= 1 and whole.usage.prompt_tokens > 5
    chunks = list(srv.client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices
              and ch.choices[0].finish_reason]
    assert finish == [c.finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_structured_output_validates(srv):
    r = srv.client.chat.completions.create(
        model=NAME, messages=MSGS, max_tokens=160, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    jsonschema.validate(json.loads(c.message.content), SCHEMA)


def test_structured_output_streamed_validates(srv):
    text = "".join(ch.choices[0].delta.content or "" for ch in srv.client.chat.completions.create(
        model=NAME, messages=MSGS, max_tokens=160, temperature=0.8, seed=7, stream=True,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
        if ch.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_required_tool_call_parsed(srv):
    r = srv.client.chat.completions.create(
        model=NAME, max_tokens=200, temperature=0, tools=[WEATHER, TIME], tool_choice="required",
        parallel_tool_calls=False, messages=[{"role": "user", "content": "Weather in Oslo?"}])
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, ARGS if call.function.name == "get_weather"
                        else TIME["function"]["parameters"])


def test_named_tool_call_streams(srv):
    calls, finish = {}, None
    for ch in srv.client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=200, temperature=0, stream=True):
        if not ch.choices:
            continue
        for t in ch.choices[0].delta.tool_calls or []:
            e = calls.setdefault(t.index, {"name": "", "arguments": ""})
            e["name"] += (t.function.name or "") if t.function else ""
            e["arguments"] += (t.function.arguments or "") if t.function else ""
        finish = ch.choices[0].finish_reason or finish
    assert finish in ("stop", "tool_calls")
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), ARGS)


def test_tool_result_round_trip(srv):
    """A call's result sent back: the model answers in text (tool_choice
    none), the history rendered through the template."""
    r = srv.client.chat.completions.create(
        model=NAME, max_tokens=12, temperature=0, tools=[WEATHER], tool_choice="none",
        messages=[{"role": "user", "content": "Weather in Oslo?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "call_1", "type": "function",
                       "function": {"name": "get_weather",
                                    "arguments": json.dumps({"city": "Oslo", "days": 1})}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length") and not c.message.tool_calls


def test_debate_job(srv):
    state, t = debate_job(srv, "sdk_tiny_qwen35", 450)
    assert state in ("done", "succeeded", "finished", "completed", None), t
    assert json.dumps(t).count("Answer:") >= 3      # every agent answered, both rounds

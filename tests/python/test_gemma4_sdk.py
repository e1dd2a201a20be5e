"""The tiny Gemma 4 models (tests/fixtures/gen_gemma4.py: the E2B-like one
with per-layer embeddings and shared-KV layers, its multimodal-class
folder, the 26B-A4B-like one with experts, that one's Q8_0 GGUF, and the
one with use_double_wide_mlp's wider shared layers) behind
the whole server through the official openai SDK, from their GGUFs and
their Hugging Face folders (neither carries a chat template: the gemma4
family's own style, Gemma 4's template, renders):

- the prompt as Gemma 4's template renders it under jinja2
  (gemma4_templates.json, gen_gemma4_fixtures.py), thinking absent, off
  and on (chat_template_kwargs.enable_thinking), tools declared;
- chat, and streaming equal to the whole reply;
- tools: tool_choice "required" gives a parsed call of the offered
  function with JSON arguments of its schema, streamed the same;
- structured outputs (response_format json_schema) that validate;
- a debate job through the jobs API (every agent answers, both rounds);
- replies forced (guided_regex) to Gemma 4's own syntax come back split,
  whole and streamed: a thought channel as reasoning_content, a native
  call (with tools offered) as tool_calls with the JSON arguments the
  format's definition gives.

Random weights: the checks are of the server's handling, not the text.
"""
import http.client
import json
import os
import urllib.parse

import pytest

from conftest import ROOT, Server, debate_job

openai = pytest.importorskip("openai")
FIX = os.path.join(ROOT, "tests", "fixtures")
TEMPLATES = json.load(open(os.path.join(FIX, "gemma4_templates.json")))
MODELS = [("e2b", "tiny_gemma4_e2b.gguf"), ("moe", "tiny_gemma4_moe.gguf"),
          ("moe_q8", "tiny_gemma4_moe_q8.gguf"), ("wide", "tiny_gemma4_wide.gguf"),
          ("e2b_hf", "tiny_gemma4/e2b"), ("e2b_mm_hf", "tiny_gemma4/e2b_mm"),
          ("moe_hf", "tiny_gemma4/moe"), ("wide_hf", "tiny_gemma4/wide")]
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 12},
                                  "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name three primes."}]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def srv(request, tmp_path_factory):
    name, rel = request.param
    env = dict(os.environ, PARLEY_JOBS_DIR=str(tmp_path_factory.mktemp("jobs")))
    extra = ("--cpu-weight-type", "f32") if name.endswith("_hf") else ()
    s = Server("--model", os.path.join(FIX, rel), "--served-model-name", name,
               "--log-level", "warn", "--max-model-len", "2048", *extra, env=env)
    u = urllib.parse.urlparse(s.url)
    s.host, s.port, s.name = u.hostname, u.port, name
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    yield s
    assert s.stop() == 0


def post(s, path, body):
    c = http.client.HTTPConnection(s.host, s.port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read() or b"null")
    c.close()
    return r.status, data


def jinja2_case(conv, tools, kwargs):
    for c in TEMPLATES["cases"]:
        if (c["conversation"], c.get("tools"), c["add_generation_prompt"],
                c.get("kwargs")) == (conv, tools, True, kwargs):
            return c["expected"]
    raise KeyError((conv, tools, kwargs))


@pytest.mark.parametrize("tools", [None, "weather"])
@pytest.mark.parametrize("kwargs", [None, {"enable_thinking": False},
                                    {"enable_thinking": True}], ids=["absent", "off", "on"])
def test_prompt_is_the_templates(srv, tools, kwargs):
    msgs = next(c["messages"] for c in TEMPLATES["conversations"]
                if c["name"] == "system_user")
    body = dict(model=srv.name, messages=msgs, add_generation_prompt=True)
    if tools:
        body["tools"] = TEMPLATES["tools"][tools]
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    st, b = post(srv, "/tokenize", body)
    assert st == 200, b
    assert b["tokens"][0] == 2                       # <bos>, a control token
    st, d = post(srv, "/detokenize", {"model": srv.name, "tokens": b["tokens"]})
    assert st == 200, d
    want = jinja2_case("system_user", tools, kwargs)
    assert want.startswith("<bos>")
    assert d["prompt"] == want[len("<bos>"):]


def test_chat_and_stream_agree(srv):
    kw = dict(model=srv.name, messages=MSGS, max_tokens=12, temperature=0)
    whole = srv.client.chat.completions.create(**kw)
    c = whole.choices[0]
    assert c.finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens >= 1
    assert whole.usage.prompt_tokens > 20
    chunks = list(srv.client.chat.completions.create(stream=True, **kw))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    reasoning = "".join(getattr(ch.choices[0].delta, "reasoning_content", None) or ""
                        for ch in chunks if ch.choices)
    assert text == (c.message.content or "")
    assert reasoning == (getattr(c.message, "reasoning_content", None) or "")


def check_call(call):
    assert call.type == "function"
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict) and set(args) <= {"city", "unit"}
    assert isinstance(args.get("city", ""), str) and len(args.get("city", "")) <= 12
    assert args.get("unit", "c") in ("c", "f")
    return args


@pytest.mark.parametrize("thinking", [None, False])
def test_required_tool_call_whole_and_streamed(srv, thinking):
    kw = dict(model=srv.name, max_tokens=160, temperature=0, tools=[WEATHER],
              tool_choice="required", parallel_tool_calls=False,
              messages=[{"role": "user", "content": "Weather in Oslo?"}])
    if thinking is not None:
        kw["extra_body"] = {"chat_template_kwargs": {"enable_thinking": thinking}}
    r = srv.client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c.message
    assert len(c.message.tool_calls) == 1
    args = check_call(c.message.tool_calls[0])
    # streamed: the call's name once, its arguments in pieces that join
    # to the same JSON
    name, pieces, finish, ids = None, "", None, set()
    for ch in srv.client.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            assert tc.index == 0
            if tc.id:
                ids.add(tc.id)
            if tc.function and tc.function.name:
                assert name is None
                name = tc.function.name
            if tc.function and tc.function.arguments:
                pieces += tc.function.arguments
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert name == "get_weather" and len(ids) == 1
    assert json.loads(pieces) == args


def test_tool_result_round(srv):
    """A call and its result in the history render (Gemma 4's own tool
    syntax) and the model answers."""
    msgs = [{"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 3}'}]
    r = srv.client.chat.completions.create(model=srv.name, messages=msgs, tools=[WEATHER],
                                           max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 40


def test_structured_output_validates(srv):
    jsonschema = pytest.importorskip("jsonschema")
    r = srv.client.chat.completions.create(
        model=srv.name, messages=MSGS, max_tokens=120, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)


def test_debate_job(srv):
    # room for the constrained reply: a reasoning line of up to 400 characters
    # (a token per byte in the tiny vocabulary), then the answer
    state, t = debate_job(srv, "g4_" + srv.name, 450)
    assert state in ("done", "succeeded", "finished", "completed", None), t
    assert json.dumps(t).count("Answer:") >= 3      # every agent answered, both rounds


def forced(srv, regex, stream=False, **kw):
    """A chat reply forced to one text (guided_regex), whole or streamed:
    (reasoning, content, tool calls as (name, arguments), finish_reason)."""
    args = dict(model=srv.name, messages=MSGS, max_tokens=120, temperature=0,
                extra_body={"guided_regex": regex}, **kw)
    if not stream:
        r = srv.client.chat.completions.create(**args)
        m = r.choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments))
                 for c in m.tool_calls or []]
        return (getattr(m, "reasoning_content", None) or "", m.content or "", calls,
                r.choices[0].finish_reason)
    reasoning, content, calls, finish = "", "", {}, None
    for ch in srv.client.chat.completions.create(stream=True, **args):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            name, a = calls.get(tc.index, (None, ""))
            calls[tc.index] = (name or (tc.function.name if tc.function else None),
                               a + ((tc.function.arguments or "") if tc.function else ""))
        finish = ch.choices[0].finish_reason or finish
    return (reasoning, content, [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())],
            finish)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_thought_channel_is_reasoning_content(srv, stream):
    """A reply in Gemma 4's syntax (its thought channel, then text) comes
    back split: the thought as reasoning_content."""
    got = forced(srv, "<\\|channel>thought\nsum it<channel\\|>Four\\.", stream)
    assert got == ("sum it", "Four.", [], "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_native_call_is_a_tool_call(srv, stream):
    """A reply that calls in Gemma 4's syntax (<|"|> strings, bare keys)
    with tools offered comes back as tool_calls with JSON arguments."""
    re_ = ('<\\|channel>thought\nlook<channel\\|><\\|tool_call>call:get_weather\\{'
           'city:<\\|"\\|>Os "lo"<\\|"\\|>,unit:<\\|"\\|>c<\\|"\\|>\\}<tool_call\\|>')
    got = forced(srv, re_, stream, tools=[WEATHER])
    assert got == ("look", "", [("get_weather", {"city": 'Os "lo"', "unit": "c"})],
                   "tool_calls")

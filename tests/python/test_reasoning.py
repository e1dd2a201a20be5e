"""Reasoning through the OpenAI API, with the official openai SDK.

Deterministic replies come from the mock backend in echo mode: it replays
the user's words as its reply and reads it in a reasoning format
(--mock-reasoning qwen3 | harmony), so each test writes the reply it
wants: <think> blocks, gpt-oss channels, tool calls after the reasoning,
stop strings, logprobs. Constrained replies come from the mock's random
walk of the constraint (the regex parley sends, reasoning first).

The engine runs the tiny random-weight models: tiny_qwen3.gguf (Qwen3's
template), tiny_harmony.gguf (gpt-oss's template over a qwen3 model,
gen_tiny_harmony.py) and, where the tree has it, tiny_gptoss.gguf (the
gpt-oss architecture with its vocabulary and template); their replies are steered with logit_bias into the
reasoning path so that the constraint is seen to apply after it, and the
harmony prompt is checked token for token against jinja2's rendering
(tests/fixtures/harmony_templates.json).
"""
import datetime
import http.client
import json
import os
import urllib.parse

import pytest

from conftest import ROOT, Server

openai = pytest.importorskip("openai")
FIX = os.path.join(ROOT, "tests", "fixtures")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
THINK = "<think> Let me think about it. </think> The answer is 42."


def start(*args):
    s = Server(*args, "--log-level", "warn")
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    return s


def post(s, path, body):
    c = http.client.HTTPConnection(s.host, s.port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read() or b"null")
    c.close()
    return r.status, data


@pytest.fixture(scope="module")
def qmock():
    s = start("--backend", "mock", "--mock-mode", "echo", "--mock-reasoning", "qwen3")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def hmock():
    s = start("--backend", "mock", "--mock-mode", "echo", "--mock-reasoning", "harmony")
    yield s
    assert s.stop() == 0


def engine(name):
    s = start("--model", os.path.join(FIX, name + ".gguf"), "--served-model-name", name,
              "--max-model-len", "1024")
    s.name = name
    return s


@pytest.fixture(scope="module")
def qwen3():
    s = engine("tiny_qwen3")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module", params=["tiny_harmony", "tiny_gptoss"])
def harmony(request):
    # tiny_gptoss.gguf (the gpt-oss architecture, its o200k pre-tokenizer
    # and vocabulary, tests/fixtures/gen_moe.py) comes with the engine's
    # mixtures of experts; until then the harmony tests run on tiny_harmony
    if not os.path.exists(os.path.join(FIX, request.param + ".gguf")):
        pytest.skip(request.param + ".gguf is not in this tree")
    s = engine(request.param)
    yield s
    assert s.stop() == 0


def ask(s, text, **kw):
    return s.client.chat.completions.create(
        model=kw.pop("model", "mock"), messages=[{"role": "user", "content": text}], **kw)


def streamed(s, text, **kw):
    """The stream's reasoning, content, tool calls (merged), finish reason,
    usage and logprob entries."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None, "usage": None, "lp": 0}
    for ch in ask(s, text, stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            out["usage"] = ch.usage
        if not ch.choices:
            continue
        c = ch.choices[0]
        d = c.delta
        out["reasoning"] += getattr(d, "reasoning_content", None) or ""
        out["content"] += d.content or ""
        for t in d.tool_calls or []:
            call = out["calls"].setdefault(t.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = t.id or call["id"]
            call["name"] += t.function.name or ""
            call["arguments"] += t.function.arguments or ""
        if c.logprobs and c.logprobs.content:
            out["lp"] += len(c.logprobs.content)
        out["finish"] = c.finish_reason or out["finish"]
    return out


# ---- chat completions, <think> (qwen3) ----

def test_reasoning_content_beside_content(qmock):
    r = ask(qmock, THINK)
    m = r.choices[0].message
    assert m.reasoning_content == " Let me think about it. "
    assert m.content == " The answer is 42."
    assert r.choices[0].finish_reason == "stop"
    # the five words between the tags, as vLLM counts them
    assert r.usage.completion_tokens_details.reasoning_tokens == 5
    assert r.usage.completion_tokens == 11


def test_stream_agrees_with_whole_reply(qmock):
    whole = ask(qmock, THINK)
    s = streamed(qmock, THINK)
    assert s["reasoning"] == whole.choices[0].message.reasoning_content
    assert s["content"] == whole.choices[0].message.content
    assert s["usage"].completion_tokens_details.reasoning_tokens == 5


def test_no_reasoning_is_null(qmock):
    r = ask(qmock, "just an answer")
    assert r.choices[0].message.reasoning_content is None
    assert r.choices[0].message.content == "just an answer"
    assert r.usage.completion_tokens_details.reasoning_tokens == 0
    assert streamed(qmock, "just an answer")["reasoning"] == ""


def test_unclosed_think_as_vllm(qmock):
    # vLLM's qwen3 parser: a whole reply without </think> is content as
    # written; streamed, what follows <think> is reasoning
    r = ask(qmock, "<think> still thinking")
    assert r.choices[0].message.reasoning_content is None
    assert r.choices[0].message.content == "<think> still thinking"
    s = streamed(qmock, "<think> still thinking")
    assert (s["reasoning"], s["content"]) == (" still thinking", "")


def test_tool_call_after_reasoning(qmock):
    text = ('<think> I need the weather. </think> '
            '<tool_call>{"name":"get_weather","arguments":{"city":"Oslo"}}</tool_call>')
    r = ask(qmock, text, tools=[WEATHER])
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.reasoning_content == " I need the weather. "
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(c.message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    s = streamed(qmock, text, tools=[WEATHER])
    assert s["finish"] == "tool_calls"
    assert s["reasoning"] == " I need the weather. "
    assert s["calls"][0]["name"] == "get_weather"
    assert json.loads(s["calls"][0]["arguments"]) == {"city": "Oslo"}
    assert s["content"] == ""


def test_structured_output_validates(qmock):
    # the mock writes a shortest text the constraint accepts (no think
    # block); the engine tests below take the reasoning path
    jsonschema = pytest.importorskip("jsonschema")
    r = ask(qmock, "x", response_format=RF, n=4, seed=3)
    for c in r.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), SCHEMA)


def test_stop_strings_and_reasoning(qmock):
    r = ask(qmock, THINK, stop=["answer"])
    assert r.choices[0].message.reasoning_content == " Let me think about it. "
    assert r.choices[0].message.content == " The "
    # a stop string matches the whole reply, reasoning included (as vLLM)
    r = ask(qmock, THINK, stop=["about"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == "<think> Let me think "
    assert streamed(qmock, THINK, stop=["about"])["reasoning"] == " Let me think "


def test_logprobs_cover_every_token(qmock):
    r = ask(qmock, THINK, logprobs=True, top_logprobs=2)
    assert len(r.choices[0].logprobs.content) == r.usage.completion_tokens == 11
    assert streamed(qmock, THINK, logprobs=True, top_logprobs=2)["lp"] == 11


def test_each_choice_splits(qmock):
    r = ask(qmock, THINK, n=3)
    assert [c.message.reasoning_content for c in r.choices] == [" Let me think about it. "] * 3
    assert r.usage.completion_tokens_details.reasoning_tokens == 15


def test_reasoning_effort_values(qmock):
    assert ask(qmock, "hi", reasoning_effort="low").choices[0].message.content == "hi"
    for body, param in [({"reasoning_effort": "extreme"}, "reasoning_effort"),
                        ({"reasoning_effort": 3}, "reasoning_effort"),
                        ({"chat_template_kwargs": {"reasoning_effort": "max"}},
                         "chat_template_kwargs.reasoning_effort"),
                        ({"chat_template_kwargs": {"builtin_tools": ["browser"]}},
                         "chat_template_kwargs.builtin_tools"),
                        ({"messages": [{"role": "assistant", "content": "a",
                                        "reasoning_content": 5}]}, "messages[0].reasoning_content")]:
        st, b = post(qmock, "/v1/chat/completions",
                     dict({"model": "mock", "messages": [{"role": "user", "content": "x"}]},
                          **body))
        assert st == 400 and b["error"]["param"] == param, b


# ---- Responses ----

def test_responses_reasoning_item(qmock):
    r = qmock.client.responses.create(model="mock", input=THINK)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].type == "reasoning_text"
    assert r.output[0].content[0].text == " Let me think about it. "
    assert r.output[1].content[0].text == " The answer is 42."
    assert r.usage.output_tokens_details.reasoning_tokens == 5
    assert r.output_text == " The answer is 42."


def test_responses_stream_events(qmock):
    events = list(qmock.client.responses.create(model="mock", input=THINK, stream=True))
    types = [e.type for e in events]
    rs = types.index("response.output_item.added")
    assert types[rs:rs + 2] == ["response.output_item.added", "response.content_part.added"]
    assert events[rs].item.type == "reasoning" and events[rs].output_index == 0
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == " Let me think about it. "
    done = types.index("response.reasoning_text.done")
    assert events[done].text == " Let me think about it. "
    msg = [e for e in events if e.type == "response.output_item.added"][1]
    assert msg.item.type == "message" and msg.output_index == 1
    assert types.index("response.output_item.done") < types.index("response.output_text.delta")
    assert types[-1] == "response.completed"
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message"]
    # the SDK's own accumulation gives the same response
    with qmock.client.responses.stream(model="mock", input=THINK) as st:
        acc = st.get_final_response()
    assert acc.output[0].content[0].text == " Let me think about it. "
    assert acc.output_text == " The answer is 42."


def test_responses_reasoning_round_trip(qmock):
    r = qmock.client.responses.create(model="mock", input=THINK)
    again = qmock.client.responses.create(model="mock", previous_response_id=r.id,
                                          input="<think> more </think> ok")
    assert again.output[0].content[0].text == " more "
    items = ([{"role": "user", "content": "q"}] + [o.model_dump() for o in r.output] +
             [{"role": "user", "content": "next"}])
    assert qmock.client.responses.create(model="mock", input=items).output_text == "next"
    st, b = post(qmock, "/v1/responses", {"model": "mock", "input": [
        {"type": "reasoning", "summary": [], "encrypted_content": "xyz"}]})
    assert st == 400 and "encrypted_content" in b["error"]["message"]
    st, b = post(qmock, "/v1/responses", {"model": "mock", "input": "x",
                                          "reasoning": {"effort": "huge"}})
    assert st == 400 and b["error"]["param"] == "reasoning.effort"


# ---- gpt-oss's harmony, through the mock ----

ANSWER = ("<|channel|>analysis<|message|>The user greets. <|end|><|start|>assistant"
          "<|channel|>final<|message|>Hello there!")
CALL = ("<|channel|>analysis<|message|>Need the weather. <|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Oslo"}')


def test_harmony_channels(hmock):
    r = ask(hmock, ANSWER)
    m = r.choices[0].message
    assert (m.reasoning_content, m.content) == ("The user greets. ", "Hello there!")
    s = streamed(hmock, ANSWER)
    assert (s["reasoning"], s["content"]) == ("The user greets. ", "Hello there!")
    assert ask(hmock, "not harmony at all").choices[0].message.content == "not harmony at all"


def test_harmony_tool_call(hmock):
    r = ask(hmock, CALL, tools=[WEATHER])
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None
    assert c.message.reasoning_content == "Need the weather. "
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(c.message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    s = streamed(hmock, CALL, tools=[WEATHER])
    assert s["finish"] == "tool_calls" and s["calls"][0]["name"] == "get_weather"
    assert s["calls"][0]["id"].startswith("call_")
    assert json.loads(s["calls"][0]["arguments"]) == {"city": "Oslo"}
    # tool_choice none: no calls; the message's text is content
    r = ask(hmock, CALL, tools=[WEATHER], tool_choice="none")
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == '{"city":"Oslo"}'


def test_harmony_call_cut_by_max_tokens(hmock):
    # the call's arguments cut: no call (its JSON is not whole), "length"
    cut = CALL.replace('{"city":"Oslo"}', '{"city": "Oslo", "units": "metric"}')
    full = ask(hmock, cut, tools=[WEATHER]).usage.completion_tokens
    r = ask(hmock, cut, tools=[WEATHER], max_tokens=full - 1)
    c = r.choices[0]
    assert c.finish_reason == "length", c
    assert c.message.tool_calls is None and not c.message.content, c.message
    assert c.message.reasoning_content == "Need the weather. "
    s = streamed(hmock, cut, tools=[WEATHER], max_tokens=full - 1)
    assert s["finish"] == "length"


def test_harmony_required_call_is_constrained(hmock):
    jsonschema = pytest.importorskip("jsonschema")
    r = ask(hmock, "x", tools=[WEATHER], tool_choice="required", n=6, seed=1)
    for c in r.choices:
        assert c.finish_reason == "tool_calls"
        assert c.message.tool_calls[0].function.name == "get_weather"
        jsonschema.validate(json.loads(c.message.tool_calls[0].function.arguments),
                            WEATHER["function"]["parameters"])
    r = ask(hmock, "x", response_format=RF, n=6, seed=1)
    for c in r.choices:
        jsonschema.validate(json.loads(c.message.content), SCHEMA)


def test_harmony_responses_call(hmock):
    tool = dict(WEATHER["function"], type="function")
    r = hmock.client.responses.create(model="mock", input=CALL, tools=[tool])
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert r.output[1].name == "get_weather"
    assert json.loads(r.output[1].arguments) == {"city": "Oslo"}
    events = list(hmock.client.responses.create(model="mock", input=CALL, tools=[tool],
                                                stream=True))
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "function_call"]
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in args] == [{"city": "Oslo"}]
    assert [o.type for o in events[-1].response.output] == ["reasoning", "function_call"]


# ---- the engine: tiny_qwen3 ----

def ids(s, text):
    st, b = post(s, "/tokenize", {"model": s.name, "prompt": text, "add_special_tokens": False})
    assert st == 200, b
    return b["tokens"]


def test_qwen3_constraint_after_think(qwen3):
    jsonschema = pytest.importorskip("jsonschema")
    think, close = ids(qwen3, "<think>")[0], ids(qwen3, "</think>")[0]
    # the tags are favoured, and repeating one is penalised: the model
    # writes <think></think> as soon as the constraint lets it
    kw = dict(model=qwen3.name, max_tokens=60, temperature=0, response_format=RF,
              logit_bias={str(think): 100, str(close): 100}, presence_penalty=2,
              frequency_penalty=2)
    r = ask(qwen3, "x", **kw)
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.message.reasoning_content == ""
    jsonschema.validate(json.loads(c.message.content), SCHEMA)
    s = streamed(qwen3, "x", **kw)
    assert (s["reasoning"], s["content"]) == ("", c.message.content)
    # with thinking off the prompt closes the block: the constraint starts
    # at once and the favoured tags cannot come
    off = ask(qwen3, "x", extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **kw)
    assert off.choices[0].message.reasoning_content is None
    jsonschema.validate(json.loads(off.choices[0].message.content), SCHEMA)
    kw.pop("response_format")
    kw["max_tokens"] = 160           # the call's bytes, one token each
    r = ask(qwen3, "Weather?", tools=[WEATHER], tool_choice="required", **kw)
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.reasoning_content == ""
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"


# ---- the engine: tiny_harmony (gpt-oss's template) ----

def fixture_case(conv, tools=None, effort=None):
    doc = json.load(open(os.path.join(FIX, "harmony_templates.json"), encoding="utf-8"))
    for c in doc["cases"]:
        if (c["conversation"], c.get("tools"), c.get("reasoning_effort"),
                c["add_generation_prompt"]) == (conv, tools, effort, True):
            msgs = next(x["messages"] for x in doc["conversations"] if x["name"] == conv)
            today = datetime.date.today().isoformat()
            text = c["expected"].replace("Current date: " + doc["date"], "Current date: " + today)
            return msgs, (doc["tools"][tools] if tools else None), text
    raise KeyError(conv)


def openai_messages(msgs):
    """The fixture's messages as a client sends them (thinking is vLLM's
    reasoning_content)."""
    out = []
    for m in msgs:
        m = dict(m)
        if "thinking" in m:
            m["reasoning_content"] = m.pop("thinking")
        out.append(m)
    return out


@pytest.mark.parametrize("conv,tools,effort", [
    ("tool_round_trip", "weather", None), ("tool_round_trip", "weather", "high"),
    ("tool_then_final", "weather", None), ("user_only", None, "low"), ("system", None, None),
    ("two_calls", "two", None), ("args_shapes", "weather", None)])
def test_harmony_prompt_is_jinja2s(harmony, conv, tools, effort):
    msgs, tool_defs, text = fixture_case(conv, tools, effort)
    body = {"model": harmony.name, "messages": openai_messages(msgs),
            "add_generation_prompt": True}
    if tool_defs:
        body["tools"] = tool_defs
    if effort:
        body["reasoning_effort"] = effort
    st, b = post(harmony, "/tokenize", body)
    assert st == 200, b
    assert b["tokens"] == ids(harmony, text)
    body.pop("add_generation_prompt")
    r = harmony.client.chat.completions.create(max_tokens=1, **body)
    assert r.usage.prompt_tokens == len(b["tokens"])


def test_harmony_constraint_after_analysis(harmony):
    jsonschema = pytest.importorskip("jsonschema")
    analys, end = ids(harmony, "analysis")[0], ids(harmony, "<|end|>")[0]
    # into the analysis channel ("analysis" beats "final" in the header),
    # and out of it at once: <|end|> is favoured more than "analysis", so
    # the message is empty whatever the random weights say. (Equal biases
    # left the body to the model's own logits, which move with the prompt's
    # "Current date:" line: on 2026-11-27 tiny_gptoss wrote "analysis"
    # seven times over.)
    # max_tokens: the markers (about a dozen tokens) and the longest reply
    # the constraint lets through ({"a": n} with its three whitespace runs
    # of up to 22 bytes and a 16-byte integer: 68 bytes, a token at least
    # a byte)
    kw = dict(model=harmony.name, max_tokens=100, temperature=0, response_format=RF,
              logit_bias={str(analys): 50, str(end): 100})
    r = ask(harmony, "x", **kw)
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.message.reasoning_content == ""
    jsonschema.validate(json.loads(c.message.content), SCHEMA)
    s = streamed(harmony, "x", **kw)
    assert (s["reasoning"], s["content"]) == (c.message.reasoning_content, c.message.content)


def test_harmony_tool_round_trip(harmony):
    jsonschema = pytest.importorskip("jsonschema")
    co = ids(harmony, "co")[0]
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    kw = dict(model=harmony.name, max_tokens=200, temperature=0, tools=[WEATHER],
              tool_choice="required", logit_bias={str(co): 100})
    r = harmony.client.chat.completions.create(messages=msgs, **kw)
    c = r.choices[0]
    # a new constraint is compiled on a prepare worker, which renders the
    # prompt there from its own copy of the tools
    st, b = post(harmony, "/tokenize", {"model": harmony.name, "messages": msgs,
                                        "tools": [WEATHER], "add_generation_prompt": True})
    assert r.usage.prompt_tokens == b["count"] > 300
    assert c.finish_reason == "tool_calls"
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    s = streamed(harmony, "Weather in Oslo?", **kw)
    assert s["calls"][0]["arguments"] == call.function.arguments
    # the call and its result go back in as the template renders them (a
    # new constraint: rendered on a prepare worker, from its own copies)
    msgs += [c.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    fresh = {"type": "json_schema", "json_schema": {"name": "f", "schema": {
        "type": "object", "properties": {"round_trip": {"type": "boolean"}}}}}
    again = harmony.client.chat.completions.create(messages=msgs, model=harmony.name,
                                                   max_tokens=1, tools=[WEATHER],
                                                   response_format=fresh)
    st, b = post(harmony, "/tokenize", {"model": harmony.name, "messages": msgs,
                                        "tools": [WEATHER], "add_generation_prompt": True})
    assert again.usage.prompt_tokens == b["count"]
    tail = ("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" +
            json.dumps(json.loads(call.function.arguments), ensure_ascii=False) +
            "<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary"
            "<|message|>\"sunny, 21 C\"<|end|><|start|>assistant")
    assert b["tokens"][-len(ids(harmony, tail)):] == ids(harmony, tail)


def test_harmony_vocabulary(harmony):
    # gpt-oss's vocabulary as llama.cpp reads it: <|end|> ends a message,
    # not the reply, and comes back as text; <|return|> ends the reply
    end, ret = ids(harmony, "<|end|>")[0], ids(harmony, "<|return|>")[0]
    st, b = post(harmony, "/v1/completions", {"model": harmony.name, "prompt": "x",
                                              "max_tokens": 3, "temperature": 0,
                                              "logit_bias": {str(end): 100}})
    assert st == 200, b
    assert b["choices"][0]["text"] == "<|end|>" * 3
    assert b["choices"][0]["finish_reason"] == "length"
    st, b = post(harmony, "/v1/completions", {"model": harmony.name, "prompt": "x",
                                              "max_tokens": 3, "temperature": 0,
                                              "logit_bias": {str(ret): 100}})
    assert (b["choices"][0]["text"], b["choices"][0]["finish_reason"]) == ("", "stop")

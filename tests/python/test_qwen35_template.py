"""Qwen3.5's chat template, tool format and reasoning through the server.

The prompt parley renders natively for Qwen3.5's template (the copy in
tests/fixtures/templates/qwen3.5.jinja, llama.cpp's models/templates/
Qwen3.5-4B.jinja) is checked token for token against jinja2's rendering of
the same template, with tools, tool-call history (arguments as vLLM hands
them to a template: parsed JSON), tool results, reasoning_content and
enable_thinking. The model is tiny_qwen3.gguf (random weights) with that
template written into a temporary copy of the file; its replies are
steered by constraints: a forced call must come back as tool_calls, whole
and streamed. The reasoning split, whose reply starts inside the think
block the prompt opened, runs on the mock's echo.
"""
import json
import os

import pytest

from test_reasoning import FIX, post, start

gguf = pytest.importorskip("gguf")
jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

TEMPLATE = os.path.join(FIX, "templates", "qwen3.5.jinja")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 12},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 9},
                                  "metric": {"type": "boolean"}},
                   "required": ["city", "days"]}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather",
                     "arguments": json.dumps({"city": "Paris", "days": 2, "metric": True,
                                              "extra": {"a": [1, 2.5]}})}}
CASES = {
    "tools_system": ([{"role": "system", "content": "  Be brief.\n"},
                      {"role": "user", "content": "Weather in Paris?"}], [WEATHER], {}),
    "tools_no_system": ([{"role": "user", "content": "Weather?"}], [WEATHER], {}),
    "round_trip": ([{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
                    {"role": "tool", "tool_call_id": "call_1", "content": " dry "},
                    {"role": "assistant", "content": "It is sunny.",
                     "reasoning_content": "\nThe tool said sunny.\n"},
                    {"role": "user", "content": "Thanks"}], [WEATHER], {}),
    "call_without_text": ([{"role": "user", "content": "Weather?"},
                           {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "rain"}],
                          [WEATHER], {}),
    "thinking_off": ([{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello"},
                      {"role": "user", "content": "Again"}], None,
                     {"enable_thinking": False}),
}


def jinja_render(msgs, tools, kw):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(m):
        raise jinja2.exceptions.TemplateError(m)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **k: json.dumps(x, ensure_ascii=False, **k)
    msgs = json.loads(json.dumps(msgs))    # a copy, shared calls apart
    for m in msgs:                     # as vLLM hands calls to a template
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    with open(TEMPLATE, encoding="utf-8") as f:
        src = f.read()
    return env.from_string(src).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                       bos_token="", eos_token="<|im_end|>", **kw)


@pytest.fixture(scope="module")
def q35(tmp_path_factory):
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
    path = str(tmp_path_factory.mktemp("q35") / "tiny_qwen3_q35tmpl.gguf")
    reader = gguf.GGUFReader(os.path.join(FIX, "tiny_qwen3.gguf"))
    arch = reader.fields["general.architecture"]
    writer = gguf.GGUFWriter(path, bytes(arch.parts[arch.data[0]]).decode(), endianess=reader.endianess)
    with open(TEMPLATE, encoding="utf-8") as f:
        tmpl = f.read()
    meta = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, tmpl)}
    copy_with_new_metadata(reader, writer, meta, [])
    s = start("--model", path, "--served-model-name", "q35", "--max-model-len", "2048")
    s.name = "q35"
    yield s
    assert s.stop() == 0


def ids(s, text):
    st, b = post(s, "/tokenize", {"model": s.name, "prompt": text, "add_special_tokens": False})
    assert st == 200, b
    return b["tokens"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_prompt_is_jinja2s(q35, case):
    msgs, tools, kw = CASES[case]
    body = {"model": q35.name, "messages": msgs, "add_generation_prompt": True}
    if tools:
        body["tools"] = tools
    if kw:
        body["chat_template_kwargs"] = kw
    st, b = post(q35, "/tokenize", body)
    assert st == 200, b
    assert b["tokens"] == ids(q35, jinja_render(msgs, tools, kw))


def test_template_errors_are_400(q35):
    st, b = post(q35, "/v1/chat/completions", {
        "model": q35.name, "messages": [{"role": "system", "content": "only"}]})
    assert st == 400 and "No user query found" in b["error"]["message"], b


OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def test_forced_call_parses_into_tool_calls(q35):
    r = q35.client.chat.completions.create(
        model=q35.name, messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER],
        tool_choice="required", parallel_tool_calls=False, max_tokens=200, extra_body=OFF)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and isinstance(args["days"], int)
    assert set(args) <= {"city", "days", "metric"}


def test_forced_named_call_streams(q35):
    calls, finish = {}, None
    for ch in q35.client.chat.completions.create(
            model=q35.name, messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=200, stream=True, extra_body=OFF):
        if not ch.choices:
            continue
        for t in ch.choices[0].delta.tool_calls or []:
            e = calls.setdefault(t.index, {"name": "", "arguments": ""})
            e["name"] += t.function.name or ""
            e["arguments"] += t.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "stop"           # a named call, as OpenAI and vLLM answer it
    assert calls[0]["name"] == "get_weather"
    assert isinstance(json.loads(calls[0]["arguments"])["days"], int)


# ---- the reasoning split: the reply starts inside the prompt's <think> ----

@pytest.fixture(scope="module")
def mock35():
    s = start("--backend", "mock", "--mock-mode", "echo", "--mock-reasoning", "qwen35")
    yield s
    assert s.stop() == 0


def ask(s, text, **kw):
    return s.client.chat.completions.create(
        model="mock", messages=[{"role": "user", "content": text}], **kw)


def test_reply_starts_inside_the_think_block(mock35):
    m = ask(mock35, "Plan the answer. </think> The answer is 42.").choices[0].message
    assert m.reasoning_content.strip() == "Plan the answer."
    assert m.content.strip() == "The answer is 42."


def test_thinking_off_is_all_content(mock35):
    m = ask(mock35, "The answer is 42.", extra_body=OFF).choices[0].message
    assert m.reasoning_content is None
    assert m.content.strip() == "The answer is 42."


def test_cut_inside_the_block_is_reasoning(mock35):
    m = ask(mock35, "still thinking about it", max_tokens=2).choices[0].message
    assert m.reasoning_content and not m.content


def test_stream_split_agrees(mock35):
    r, c = "", ""
    for ch in ask(mock35, "Plan the answer. </think> The answer is 42.", stream=True):
        if ch.choices:
            r += getattr(ch.choices[0].delta, "reasoning_content", None) or ""
            c += ch.choices[0].delta.content or ""
    assert r.strip() == "Plan the answer." and c.strip() == "The answer is 42."

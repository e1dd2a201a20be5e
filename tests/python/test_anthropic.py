"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through
the official anthropic SDK, unmodified, and LiteLLM's anthropic provider.

Deterministic replies come from the mock backend in echo mode (it replays
the last user turn's words and reads them in the qwen3 reasoning format),
so a test writes the reply it wants: <think> blocks, <tool_call> calls.
The engine runs tiny_qwen3.gguf (Qwen3's template): thinking enabled or
disabled must give what chat completions gives with enable_thinking true
or false, and count_tokens the prompt the reply was given. Errors are
checked in Anthropic's own shape ({"type": "error", "error": {type,
message}}), whoever replies them (the router's 401 too).
"""
import http.client
import json
import os
import urllib.parse

import pytest

from conftest import ROOT, Server

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no fetch at import

FIX = os.path.join(ROOT, "tests", "fixtures")
THINK = "<think> Let me think about it. </think> The answer is 42."
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object",
                            "properties": {"city": {"type": "string", "maxLength": 12}},
                            "required": ["city"], "additionalProperties": False}}
CALL = '<tool_call> {"name": "get_weather", "arguments": {"city": "Oslo"}} </tool_call>'


def start(*args):
    s = Server(*args, "--log-level", "warn")
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    s.client = anthropic.Anthropic(base_url=s.url, api_key="unused", max_retries=0)
    return s


def post(s, path, body, headers=None):
    c = http.client.HTTPConnection(s.host, s.port, timeout=60)
    data = body if isinstance(body, bytes) else json.dumps(body)
    c.request("POST", path, body=data,
              headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def mock():
    s = start("--backend", "mock", "--mock-mode", "echo", "--mock-reasoning", "qwen3")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def qwen3():
    s = start("--model", os.path.join(FIX, "tiny_qwen3.gguf"), "--served-model-name",
              "tiny_qwen3", "--max-model-len", "1024")
    s.name = "tiny_qwen3"
    yield s
    assert s.stop() == 0


def user(text):
    return [{"role": "user", "content": text}]


def anthropic_error(st, b, status, etype, needle):
    assert st == status, b
    assert b["type"] == "error" and set(b) == {"type", "error"}, b
    assert b["error"]["type"] == etype, b
    assert needle in b["error"]["message"], b


# ---- messages.create ----

def test_create_text(mock):
    r = mock.client.messages.create(model="mock", max_tokens=50, messages=user("red green blue"))
    assert r.type == "message" and r.role == "assistant" and r.model == "mock"
    assert r.id.startswith("msg_")
    assert [b.type for b in r.content] == ["text"]
    assert r.content[0].text == "red green blue"
    assert r.stop_reason == "end_turn" and r.stop_sequence is None
    assert r.usage.output_tokens == 3 and r.usage.input_tokens > 0


def test_max_tokens_cut(mock):
    r = mock.client.messages.create(model="mock", max_tokens=2, messages=user("one two three"))
    assert r.stop_reason == "max_tokens"
    assert r.content[0].text == "one two" and r.usage.output_tokens == 2


def test_stop_sequences(mock):
    r = mock.client.messages.create(model="mock", max_tokens=50, stop_sequences=["END", "zz"],
                                    messages=user("one two END three"))
    assert r.content[0].text == "one two "
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "END"
    with mock.client.messages.stream(model="mock", max_tokens=50, stop_sequences=["zz", "END"],
                                     messages=user("one two END three")) as st:
        assert "".join(st.text_stream) == "one two "
        f = st.get_final_message()
    assert f.stop_reason == "stop_sequence" and f.stop_sequence == "END"
    # not matched: the model's own end
    r = mock.client.messages.create(model="mock", max_tokens=50, stop_sequences=["zz"],
                                    messages=user("one two"))
    assert r.stop_reason == "end_turn" and r.stop_sequence is None


def test_blocks_system_and_history(mock):
    r = mock.client.messages.create(
        model="mock", max_tokens=50, system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "first"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                  {"role": "user", "content": [{"type": "text", "text": "second "},
                                               {"type": "text", "text": "turn",
                                                "cache_control": {"type": "ephemeral"}}]}],
        metadata={"user_id": "u1"},
        # this SDK sends sampling parameters as extra body fields
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 40})
    assert r.content[0].text == "second turn"


def test_thinking_block(mock):
    r = mock.client.messages.create(model="mock", max_tokens=50, messages=user(THINK),
                                    thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in r.content] == ["thinking", "text"]
    assert r.content[0].thinking == " Let me think about it. "
    assert isinstance(r.content[0].signature, str)
    assert r.content[1].text == " The answer is 42."
    # thinking blocks sent back are the turn's reasoning, and the reply goes on
    again = mock.client.messages.create(
        model="mock", max_tokens=50,
        messages=user("q") + [{"role": "assistant", "content": [b.model_dump() for b in r.content]},
                              {"role": "user", "content": "next"}])
    assert [b.type for b in again.content] == ["text"] and again.content[0].text == "next"


# ---- messages.stream ----

def event_types(events):
    return [e.type for e in events]


def test_stream_events(mock):
    raw = list(mock.client.messages.create(model="mock", max_tokens=50, stream=True,
                                           messages=user("alpha beta gamma")))
    assert event_types(raw) == (["message_start", "content_block_start"] +
                                ["content_block_delta"] * 3 +
                                ["content_block_stop", "message_delta", "message_stop"])
    assert raw[0].message.id.startswith("msg_") and raw[0].message.content == []
    assert raw[1].index == 0 and raw[1].content_block.type == "text"
    assert "".join(e.delta.text for e in raw[2:5]) == "alpha beta gamma"
    assert raw[6].delta.stop_reason == "end_turn" and raw[6].usage.output_tokens == 3
    assert raw[6].usage.input_tokens > 0
    with mock.client.messages.stream(model="mock", max_tokens=50,
                                     messages=user("alpha beta gamma")) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    plain = mock.client.messages.create(model="mock", max_tokens=50,
                                        messages=user("alpha beta gamma"))
    assert text == "alpha beta gamma"
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in plain.content]
    assert final.usage.input_tokens == plain.usage.input_tokens
    assert final.usage.output_tokens == 3 and final.stop_reason == "end_turn"


def test_stream_thinking(mock):
    with mock.client.messages.stream(model="mock", max_tokens=50, messages=user(THINK),
                                     thinking={"type": "enabled", "budget_tokens": 2048}) as st:
        events = list(st)
        final = st.get_final_message()
    starts = [e for e in events if e.type == "content_block_start"]
    assert [(e.index, e.content_block.type) for e in starts] == [(0, "thinking"), (1, "text")]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == \
        " Let me think about it. "
    assert "".join(d.text for d in deltas if d.type == "text_delta") == " The answer is 42."
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert stops == [0, 1]
    assert final.content[0].thinking == " Let me think about it. "
    assert final.content[1].text == " The answer is 42."


# ---- tools ----

def test_tool_use_round_trip(mock):
    r = mock.client.messages.create(model="mock", max_tokens=100, tools=[WEATHER],
                                    messages=user(CALL))
    assert r.stop_reason == "tool_use"
    assert [b.type for b in r.content] == ["tool_use"]
    call = r.content[0]
    assert call.name == "get_weather" and call.input == {"city": "Oslo"} and call.id
    history = user("Weather in Oslo?") + [
        {"role": "assistant", "content": [b.model_dump() for b in r.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": [{"type": "text", "text": "12 C"}]},
                                     {"type": "text", "text": "thanks"}]}]
    again = mock.client.messages.create(model="mock", max_tokens=100, tools=[WEATHER],
                                        messages=history)
    # the echo is the last user turn as the template renders it: the tool
    # result and the text, as chat completions renders the same history
    oc = openai.OpenAI(base_url=mock.url + "/v1", api_key="unused", max_retries=0)
    ref = oc.chat.completions.create(model="mock", max_tokens=100, tools=[{
        "type": "function", "function": {"name": WEATHER["name"], "parameters":
                                         WEATHER["input_schema"]}}], messages=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call.id, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(call.input)}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "12 C"},
        {"role": "user", "content": "thanks"}]).choices[0].message.content
    assert "12 C" in ref and ref.endswith("thanks")
    assert again.stop_reason == "end_turn" and again.content[0].text == ref
    # the tool result reached the prompt: it counts
    n_with = mock.client.messages.count_tokens(model="mock", tools=[WEATHER],
                                               messages=history).input_tokens
    history[2]["content"][0]["content"] = [{"type": "text", "text": "12 C and sunny today"}]
    n_more = mock.client.messages.count_tokens(model="mock", tools=[WEATHER],
                                               messages=history).input_tokens
    assert n_more > n_with


def test_tool_use_stream(mock):
    with mock.client.messages.stream(model="mock", max_tokens=100, tools=[WEATHER],
                                     messages=user(CALL)) as st:
        events = list(st)
        final = st.get_final_message()
    start = [e for e in events if e.type == "content_block_start"]
    assert len(start) == 1 and start[0].content_block.type == "tool_use"
    assert start[0].content_block.name == "get_weather"
    js = [e.delta.partial_json for e in events
          if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert json.loads("".join(js)) == {"city": "Oslo"}
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "Oslo"}
    # text that is no call is streamed as text once it cannot be one
    with mock.client.messages.stream(model="mock", max_tokens=100, tools=[WEATHER],
                                     messages=user("just words")) as st:
        assert "".join(st.text_stream) == "just words"
        assert st.get_final_message().stop_reason == "end_turn"


def test_tool_choice(mock):
    # "any" and a named tool force a call: the reply is constrained to one
    for tc in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        r = mock.client.messages.create(model="mock", max_tokens=100, tools=[WEATHER],
                                        tool_choice=tc, messages=user("anything"))
        assert r.content[-1].type == "tool_use" and r.content[-1].name == "get_weather", tc
        assert isinstance(r.content[-1].input.get("city"), str)
        assert len(r.content[-1].input["city"]) <= 12
    r = mock.client.messages.create(model="mock", max_tokens=100, tools=[WEATHER],
                                    tool_choice={"type": "none"}, messages=user(CALL))
    assert r.stop_reason == "end_turn" and r.content[0].type == "text"


# ---- count_tokens and the engine ----

def chat(s, text, thinking):
    oc = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    return oc.chat.completions.create(
        model=s.name, max_tokens=24, temperature=0, messages=[{"role": "user", "content": text}],
        extra_body={"chat_template_kwargs": {"enable_thinking": thinking}}).choices[0].message


def test_engine_thinking_matches_chat(qwen3):
    for on in (True, False):
        th = {"type": "enabled", "budget_tokens": 1024} if on else {"type": "disabled"}
        r = qwen3.client.messages.create(model=qwen3.name, max_tokens=24, thinking=th,
                                         messages=user("Hello"), extra_body={"temperature": 0})
        m = chat(qwen3, "Hello", on)
        thinking = [b.thinking for b in r.content if b.type == "thinking"]
        text = "".join(b.text for b in r.content if b.type == "text")
        assert thinking == ([m.reasoning_content] if m.reasoning_content is not None else [])
        assert text == (m.content or "")
        assert r.usage.output_tokens == 24 and r.stop_reason == "max_tokens"
        with qwen3.client.messages.stream(model=qwen3.name, max_tokens=24, thinking=th,
                                          messages=user("Hello"),
                                          extra_body={"temperature": 0}) as st:
            f = st.get_final_message()
        assert "".join(b.text for b in f.content if b.type == "text") == text


def test_engine_stop_sequence(qwen3):
    kw = dict(model=qwen3.name, max_tokens=24, messages=user("Hello"),
              thinking={"type": "disabled"}, extra_body={"temperature": 0})
    full = "".join(b.text for b in qwen3.client.messages.create(**kw).content
                   if b.type == "text")
    # random weights write bytes that are not UTF-8 (U+FFFD in JSON): the
    # stop is the first whole character after the first
    stop = next((ch for ch in full[1:] if ch != "\ufffd" and ch.strip()), None)
    assert stop, full
    r = qwen3.client.messages.create(stop_sequences=[stop], **kw)
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == full[:full.index(stop)]


def test_engine_count_tokens(qwen3):
    msgs = user("What is the weather in Oslo?")
    n = qwen3.client.messages.count_tokens(model=qwen3.name, messages=msgs,
                                           system="You are terse.").input_tokens
    r = qwen3.client.messages.create(model=qwen3.name, max_tokens=1, messages=msgs,
                                     system="You are terse.")
    assert n == r.usage.input_tokens + r.usage.cache_read_input_tokens
    st, b = post(qwen3, "/tokenize", {"model": qwen3.name, "add_generation_prompt": True,
                                      "messages": [{"role": "system", "content": "You are terse."},
                                                   {"role": "user", "content": msgs[0]["content"]}]})
    assert st == 200 and b["count"] == n
    with_tools = qwen3.client.messages.count_tokens(model=qwen3.name, messages=msgs,
                                                    tools=[WEATHER]).input_tokens
    assert with_tools > n
    # thinking disabled closes the think block in the prompt (Qwen3's template)
    off = qwen3.client.messages.count_tokens(model=qwen3.name, messages=msgs,
                                             thinking={"type": "disabled"}).input_tokens
    on = qwen3.client.messages.count_tokens(model=qwen3.name, messages=msgs,
                                            thinking={"type": "enabled",
                                                      "budget_tokens": 1024}).input_tokens
    assert off > on


# ---- keys, errors, metrics ----

def test_api_keys():
    s = start("--backend", "mock", "--mock-mode", "echo", "--api-key", "sekrit")
    try:
        ok = anthropic.Anthropic(base_url=s.url, api_key="sekrit", max_retries=0)
        assert ok.messages.create(model="mock", max_tokens=10,
                                  messages=user("hi")).content[0].text == "hi"
        bearer = anthropic.Anthropic(base_url=s.url, auth_token="sekrit", max_retries=0)
        assert bearer.messages.create(model="mock", max_tokens=10,
                                      messages=user("hi")).content[0].text == "hi"
        bad = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as e:
            bad.messages.create(model="mock", max_tokens=10, messages=user("hi"))
        assert e.value.body["error"]["type"] == "authentication_error"
        st, b = post(s, "/v1/messages", {"model": "mock", "max_tokens": 5, "messages": user("x")},
                     {"anthropic-version": "2023-06-01"})
        anthropic_error(st, b, 401, "authentication_error", "x-api-key")
        # either header may hold the key (Claude Code sends both when told a token too)
        st, b = post(s, "/v1/messages", {"model": "mock", "max_tokens": 5, "messages": user("x")},
                     {"Authorization": "Bearer stale", "x-api-key": "sekrit"})
        assert st == 200, b
        # the key works on the OpenAI endpoints too
        st, b = post(s, "/v1/chat/completions", {"model": "mock", "messages": user("x")},
                     {"x-api-key": "sekrit"})
        assert st == 200, b
    finally:
        assert s.stop() == 0


BAD = [
    ({"model": "mock", "messages": user("x")}, 400, "invalid_request_error", "max_tokens: Field required"),
    ({"model": "mock", "max_tokens": None, "messages": user("x")}, 400, "invalid_request_error",
     "max_tokens: Field required"),
    ({"max_tokens": 5, "messages": user("x")}, 400, "invalid_request_error", "model: Field required"),
    ({"model": "mock", "max_tokens": 5}, 400, "invalid_request_error", "messages: Field required"),
    ({"model": "mock", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
     400, "invalid_request_error", "messages.0.role: role must be 'user' or 'assistant'"),
    ({"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "video", "url": "x"}]}]},
     400, "invalid_request_error", "messages.0.content.1: unknown content block type 'video'"),
    ({"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]},
     400, "invalid_request_error", "blocks of type 'image' are not supported"),
    ({"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     400, "invalid_request_error", "messages.0.content.0: unknown content block type 'tool_use'"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "tools": [WEATHER],
      "tool_choice": {"type": "sometimes"}}, 400, "invalid_request_error", "tool_choice: must be"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "tools": [WEATHER],
      "tool_choice": {"type": "tool"}}, 400, "invalid_request_error", "tool_choice.name"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"),
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     400, "invalid_request_error", "tools.0: tools of type 'web_search_20250305'"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"),
      "tool_choice": {"type": "any"},
      "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {
          "a": {"type": "string", "pattern": "(?<=x)y"}}}}]},
     400, "invalid_request_error", "tools.0.input_schema"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "thinking": {"type": "enabled"}},
     400, "invalid_request_error", "thinking.budget_tokens: Field required"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "thinking": {"type": "maybe"}},
     400, "invalid_request_error", "thinking: must be"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "stop_sequences": "END"},
     400, "invalid_request_error", "stop_sequences: must be an array"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"),
      "stop_sequences": ["a", "b", "c", "d", "e"]}, 400, "invalid_request_error", "at most 4"),
    ({"model": "mock", "max_tokens": 0, "messages": user("x")},
     400, "invalid_request_error", "max_tokens"),
    ({"model": "mock", "max_tokens": 5, "messages": user("x"), "temperature": 7},
     400, "invalid_request_error", "temperature"),
    ({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": user("x")},
     404, "not_found_error", "model: model 'claude-sonnet-4-5' does not exist"),
]


@pytest.mark.parametrize("body,status,etype,needle", BAD)
def test_bad_input(mock, body, status, etype, needle):
    st, b = post(mock, "/v1/messages", body)
    anthropic_error(st, b, status, etype, needle)


def test_bad_input_through_sdk(mock):
    with pytest.raises(anthropic.BadRequestError) as e:
        mock.client.messages.create(model="mock", max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "audio", "data": "x"}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "unknown content block type 'audio'" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        mock.client.messages.create(model="nope", max_tokens=5, messages=user("x"))


def test_router_errors_in_anthropic_shape(mock):
    st, b = post(mock, "/v1/messages", b"{not json")
    anthropic_error(st, b, 400, "invalid_request_error", "malformed JSON")
    c = http.client.HTTPConnection(mock.host, mock.port, timeout=10)
    c.request("GET", "/v1/messages")
    r = c.getresponse()
    b = json.loads(r.read())
    c.close()
    anthropic_error(r.status, b, 405, "invalid_request_error", "method not allowed")
    st, b = post(mock, "/v1/messages/count_tokens", {"model": "mock", "messages": "x"})
    anthropic_error(st, b, 400, "invalid_request_error", "messages: must be a non-empty array")
    # the OpenAI endpoints keep OpenAI's shape
    st, b = post(mock, "/v1/chat/completions", b"{not json")
    assert st == 400 and "type" not in b and b["error"]["type"] == "invalid_request_error"


def test_metrics_count_requests_per_endpoint(mock):
    c = http.client.HTTPConnection(mock.host, mock.port, timeout=10)

    def count(endpoint):
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        line = 'parley:http_requests_total{endpoint="%s"} ' % endpoint
        return float(next(l for l in text.splitlines() if l.startswith(line)).split()[-1])

    before, chat_before = count("/v1/messages"), count("/v1/chat/completions")
    for _ in range(3):
        mock.client.messages.create(model="mock", max_tokens=5, messages=user("x"))
    mock.client.messages.count_tokens(model="mock", messages=user("x"))
    assert count("/v1/messages") == before + 3
    assert count("/v1/messages/count_tokens") >= 1
    assert count("/v1/chat/completions") == chat_before
    c.close()


def test_litellm_anthropic_provider(mock):
    litellm = pytest.importorskip("litellm")
    r = litellm.completion(model="anthropic/mock", api_base=mock.url, api_key="unused",
                           messages=[{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "hello from litellm"}],
                           max_tokens=20)
    assert r.choices[0].message.content == "hello from litellm"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 3
    chunks = litellm.completion(model="anthropic/mock", api_base=mock.url, api_key="unused",
                                messages=[{"role": "user", "content": "streamed words here"}],
                                max_tokens=20, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "streamed words here"
    tool = {"type": "function", "function": {"name": WEATHER["name"],
                                             "description": WEATHER["description"],
                                             "parameters": WEATHER["input_schema"]}}
    r = litellm.completion(model="anthropic/mock", api_base=mock.url, api_key="unused",
                           messages=[{"role": "user", "content": CALL}], tools=[tool],
                           max_tokens=100)
    tc = r.choices[0].message.tool_calls
    assert tc and tc[0].function.name == "get_weather"
    assert json.loads(tc[0].function.arguments) == {"city": "Oslo"}
    assert r.choices[0].finish_reason == "tool_calls"


def test_litellm_streamed_tools_round_trip_thinking_and_errors(mock):
    """LiteLLM's anthropic provider, unmodified: a streamed tool call, a
    tool result sent back (tool_result block: the echo model replays what
    the template gave it), thinking as thinking blocks, and an Anthropic
    error JSON raised as litellm's BadRequestError."""
    litellm = pytest.importorskip("litellm")
    kw = dict(model="anthropic/mock", api_base=mock.url, api_key="unused")
    tool = {"type": "function", "function": {"name": WEATHER["name"],
                                             "description": WEATHER["description"],
                                             "parameters": WEATHER["input_schema"]}}
    calls, finish = {}, None
    for ch in litellm.completion(**kw, messages=[{"role": "user", "content": CALL}],
                                 tools=[tool], max_tokens=100, stream=True):
        finish = ch.choices[0].finish_reason or finish
        for tc in ch.choices[0].delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "args": ""})
            c["name"] += tc.function.name or ""
            c["args"] += tc.function.arguments or ""
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["args"]) == {"city": "Oslo"}
    assert finish == "tool_calls"
    msgs = [{"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "toolu_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny and mild"}]
    r = litellm.completion(**kw, messages=msgs, tools=[tool], max_tokens=50)
    assert "sunny and mild" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    r = litellm.completion(**kw, messages=[{"role": "user", "content": THINK}], max_tokens=50,
                           thinking={"type": "enabled", "budget_tokens": 1024},
                           allowed_openai_params=["thinking"])
    assert r.choices[0].message.content.strip() == "The answer is 42."
    assert r.choices[0].message.reasoning_content.strip() == "Let me think about it."
    assert [b["type"] for b in r.choices[0].message.thinking_blocks] == ["thinking"]
    with pytest.raises(litellm.BadRequestError) as e:
        litellm.completion(**kw, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                           temperature=9)
    assert "temperature" in str(e.value) and "invalid_request_error" in str(e.value)


def test_through_a_gateway():
    """parley as a gateway (--upstream) in front of a parley mock: the
    upstream gets the chat-form body, its calls come back as tool_use."""
    up = start("--backend", "mock", "--served-model-name", "mock", "--mock-mode", "echo")
    gw = start("--upstream", up.url + "/v1")
    try:
        r = gw.client.messages.create(model="mock", max_tokens=20, messages=user("via the gateway"))
        assert r.content[0].text == "via the gateway" and r.stop_reason == "end_turn"
        assert r.usage.output_tokens == 3
        with gw.client.messages.stream(model="mock", max_tokens=20,
                                       messages=user("streamed through")) as st:
            assert "".join(st.text_stream) == "streamed through"
        for stream in (False, True):
            if stream:
                with gw.client.messages.stream(model="mock", max_tokens=100, tools=[WEATHER],
                                               messages=user(CALL)) as st:
                    r = st.get_final_message()
            else:
                r = gw.client.messages.create(model="mock", max_tokens=100, tools=[WEATHER],
                                              messages=user(CALL))
            assert r.stop_reason == "tool_use", stream
            assert [b.type for b in r.content] == ["tool_use"], stream
            assert r.content[0].name == "get_weather" and r.content[0].input == {"city": "Oslo"}
        st, b = post(gw, "/v1/messages", {"model": "mock", "max_tokens": 5,
                                          "messages": user("x"), "temperature": 9})
        anthropic_error(st, b, 400, "invalid_request_error", "temperature")
    finally:
        assert gw.stop() == 0
        assert up.stop() == 0

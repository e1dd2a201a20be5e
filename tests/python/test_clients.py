"""Client libraries as users run them (issue 34): the official openai SDK,
litellm and langchain-openai, unmodified.

- tool calls cut by max_tokens (mock in echo mode, which replays the
  user's words as its reply, a word a token): complete calls come back as
  tool_calls, the cut one is dropped (never raw <tool_call> text in
  content), finish_reason "length", whole and streamed; the same on the
  default model under tool_choice "required", where text is never content;
- JSON mode and json_schema on the default model through each client: the
  text parses and validates, with the whitespace models write (line
  breaks and indentation under the default --structured-whitespace
  flexible, none under compact);
- spec details: a named tool_choice finishes "stop", message.refusal is
  null, stream chunks carry "usage": null before the usage chunk, the
  legacy functions / function_call fields work (instructor's FUNCTIONS
  mode, older LangChain), prediction and web_search_options are a 400.
"""
import json
import os

import pytest

from conftest import MODEL_PATH, Server

openai = pytest.importorskip("openai")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no fetch at import

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = '<tool_call> {"name": "get_weather", "arguments": {"city": "Oslo"}} </tool_call>'
CALL_WORDS = len(CALL.split())          # the mock's tokens: 7 a call
MODEL = "smollm2-135m-instruct"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def echo():
    s = Server("--backend", "mock", "--mock-mode", "echo", "--log-level", "warn")
    yield s
    assert s.stop() == 0


def sdk(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def two_calls_cut(max_tokens):
    return dict(model="mock", tools=[WEATHER], max_tokens=max_tokens,
                messages=[{"role": "user", "content": CALL + " " + CALL}])


# ---- tool calls cut by max_tokens ----

@pytest.mark.parametrize("max_tokens,n_calls", [(CALL_WORDS + 3, 1), (3, 0)])
def test_cut_call_openai_sdk(echo, max_tokens, n_calls):
    c = sdk(echo.url)
    r = c.chat.completions.create(**two_calls_cut(max_tokens))
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert ch.message.content is None, "no raw call text as content"
    assert len(ch.message.tool_calls or []) == n_calls
    for call in ch.message.tool_calls or []:
        assert json.loads(call.function.arguments) == {"city": "Oslo"}
    chunks = list(c.chat.completions.create(stream=True, **two_calls_cut(max_tokens)))
    content = "".join(x.choices[0].delta.content or "" for x in chunks if x.choices)
    calls = {d.index for x in chunks if x.choices for d in x.choices[0].delta.tool_calls or []}
    finish = [x.choices[0].finish_reason for x in chunks if x.choices and
              x.choices[0].finish_reason]
    assert content == "" and len(calls) == n_calls and finish == ["length"]


def test_cut_call_keeps_the_text_before_it(echo):
    r = sdk(echo.url).chat.completions.create(
        model="mock", tools=[WEATHER], max_tokens=5,
        messages=[{"role": "user", "content": "Let me check. " + CALL}])
    assert r.choices[0].message.content == "Let me check."
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason == "length"


def test_cut_call_responses_api(echo):
    """The Responses API the same way: the complete call is a function_call
    item, the cut one is dropped, the response is incomplete, whole and
    streamed (no output_text of the call's text)."""
    c = sdk(echo.url)
    fn = dict(WEATHER["function"], type="function")
    kw = dict(model="mock", tools=[fn], max_output_tokens=CALL_WORDS + 3,
              input=CALL + " " + CALL)
    r = c.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [o.type for o in r.output] == ["function_call"] and r.output_text == ""
    assert json.loads(r.output[0].arguments) == {"city": "Oslo"}
    deltas, calls = [], []
    with c.responses.stream(**kw) as st:
        for ev in st:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
            if ev.type == "response.function_call_arguments.done":
                calls.append(json.loads(ev.arguments))
    assert deltas == [] and calls == [{"city": "Oslo"}]


def test_cut_call_litellm(echo):
    litellm = pytest.importorskip("litellm")
    r = litellm.completion(api_base=echo.url + "/v1", api_key="unused",
                           **dict(two_calls_cut(CALL_WORDS + 3), model="openai/mock"))
    ch = r.choices[0]
    assert ch.finish_reason == "length" and not ch.message.content
    assert [t.function.name for t in ch.message.tool_calls] == ["get_weather"]


def test_cut_call_langchain_bind_tools(echo):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(model="mock", base_url=echo.url + "/v1", api_key="unused",
                        max_tokens=CALL_WORDS + 3, max_retries=0)
    m = llm.bind_tools([WEATHER]).invoke(CALL + " " + CALL)
    assert m.content == "" and not m.invalid_tool_calls
    assert [(t["name"], t["args"]) for t in m.tool_calls] == [("get_weather", {"city": "Oslo"})]
    assert m.response_metadata["finish_reason"] == "length"


def test_required_cut_on_the_model_is_never_content(model_url):
    c = sdk(model_url)
    for stream in (False, True):
        kw = dict(model=MODEL, tools=[WEATHER], tool_choice="required", max_tokens=8,
                  messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        if not stream:
            ch = c.chat.completions.create(**kw).choices[0]
            assert ch.finish_reason == "length" and ch.message.content is None
            assert not ch.message.tool_calls
            continue
        chunks = list(c.chat.completions.create(stream=True, **kw))
        assert not any(x.choices[0].delta.content for x in chunks if x.choices)
        assert chunks[-1].choices[0].finish_reason == "length"


# ---- JSON the way models write it ----

def test_json_modes_openai_sdk(model_url):
    jsonschema = pytest.importorskip("jsonschema")
    c = sdk(model_url)
    msgs = [{"role": "user", "content": "Extract the data. John Doe is 30 years old."}]
    r = c.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=120, response_format={"type": "json_object"},
        messages=[{"role": "user",
                   "content": "Return a JSON object with the name John and the age 30."}])
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int
    r = c.chat.completions.parse(model=MODEL, messages=msgs, temperature=0, max_tokens=80,
                                 response_format=Person)
    assert isinstance(r.choices[0].message.parsed, Person)
    jsonschema.validate(json.loads(r.choices[0].message.content), Person.model_json_schema())


def test_json_schema_litellm_and_langchain(model_url):
    litellm = pytest.importorskip("litellm")
    lc = pytest.importorskip("langchain_openai")
    jsonschema = pytest.importorskip("jsonschema")
    msgs = [{"role": "user", "content": "Extract the data. John Doe is 30 years old."}]
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    r = litellm.completion(model="openai/" + MODEL, api_base=model_url + "/v1",
                           api_key="unused", messages=msgs, temperature=0, max_tokens=80,
                           response_format=rf)
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    llm = lc.ChatOpenAI(model=MODEL, base_url=model_url + "/v1", api_key="unused",
                        temperature=0, max_tokens=80, max_retries=0)
    out = llm.with_structured_output(dict(PERSON, title="person"), method="json_schema") \
             .invoke(msgs[0]["content"])
    jsonschema.validate(out, PERSON)
    out = llm.with_structured_output(None, method="json_mode").invoke(
        "Return a JSON object with the name John and the age 30.")
    assert isinstance(out, dict)


RECIPE = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 30},
    "ingredients": {"type": "array", "items": {"type": "string", "maxLength": 20},
                    "maxItems": 4}}, "required": ["title", "ingredients"]}


def recipe(url):
    r = sdk(url).chat.completions.create(
        model=MODEL, temperature=0, max_tokens=120,
        messages=[{"role": "user", "content": "Pancakes: flour, milk, eggs and sugar."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "recipe", "schema": RECIPE}})
    return r.choices[0].message.content


def test_flexible_whitespace_is_the_models_and_stays_valid(model_url):
    """SmolLM2 writes this object pretty-printed: flexible lets it (the
    default), compact keeps ", " and ": " only; both validate."""
    jsonschema = pytest.importorskip("jsonschema")
    flexible = recipe(model_url)
    jsonschema.validate(json.loads(flexible), RECIPE)
    assert "\n  " in flexible, flexible
    s = Server("--model", MODEL_PATH, "--log-level", "warn", "--structured-whitespace",
               "compact")
    try:
        compact = recipe(s.url)
    finally:
        assert s.stop() == 0
    jsonschema.validate(json.loads(compact), RECIPE)
    assert "\n" not in compact and '": ' in compact, compact


# ---- spec details ----

def test_named_tool_choice_finishes_stop_and_refusal_is_null(echo):
    import urllib.request
    body = {"model": "mock", "tools": [WEATHER], "messages": [{"role": "user", "content": "x"}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    req = urllib.request.Request(echo.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        ch = json.loads(r.read())["choices"][0]
    assert ch["finish_reason"] == "stop"
    assert "refusal" in ch["message"] and ch["message"]["refusal"] is None
    assert ch["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_stream_chunks_carry_usage_null(echo):
    import urllib.request
    body = {"model": "mock", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "one two three"}]}
    req = urllib.request.Request(echo.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        events = [json.loads(line[6:]) for line in r.read().decode().splitlines()
                  if line.startswith("data: {")]
    assert len(events) >= 3
    for e in events[:-1]:
        assert "usage" in e and e["usage"] is None, e
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3
    assert events[0]["choices"][0]["delta"]["refusal"] is None


def test_legacy_functions(echo):
    """functions / function_call as the pre-tools API had them: the reply
    is message.function_call with finish_reason "function_call"."""
    c = sdk(echo.url)
    fn = WEATHER["function"]
    msgs = [{"role": "user", "content": CALL}]
    r = c.chat.completions.create(model="mock", messages=msgs, extra_body={"functions": [fn]})
    ch = r.choices[0]
    assert ch.finish_reason == "function_call" and not ch.message.tool_calls
    assert ch.message.function_call.name == "get_weather"
    assert json.loads(ch.message.function_call.arguments) == {"city": "Oslo"}
    chunks = list(c.chat.completions.create(model="mock", messages=msgs, stream=True,
                                            extra_body={"functions": [fn]}))
    args = "".join(x.choices[0].delta.function_call.arguments or "" for x in chunks
                   if x.choices and x.choices[0].delta.function_call)
    assert json.loads(args) == {"city": "Oslo"}
    assert chunks[-1].choices[0].finish_reason == "function_call"
    history = msgs + [{"role": "assistant", "content": None,
                       "function_call": {"name": "get_weather", "arguments": "{}"}},
                      {"role": "function", "name": "get_weather", "content": "21 C"}]
    r = c.chat.completions.create(model="mock", messages=history, extra_body={
        "functions": [fn], "function_call": {"name": "get_weather"}})
    assert r.choices[0].message.function_call.name == "get_weather"
    assert r.choices[0].finish_reason == "stop"       # a named call, as with tool_choice


@pytest.mark.parametrize("field,value", [
    ("prediction", {"type": "content", "content": "x"}), ("web_search_options", {})])
def test_unsupported_fields_are_a_clear_400(echo, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        sdk(echo.url).chat.completions.create(
            model="mock", messages=[{"role": "user", "content": "x"}], extra_body={field: value})
    assert field in str(e.value) and "not supported" in str(e.value)

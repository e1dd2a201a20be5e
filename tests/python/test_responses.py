"""The Responses API (/v1/responses) through the official openai SDK: plain,
with instructions, chained by previous_response_id, streamed with every
event type parsed by the SDK, stored responses read back and deleted, and
errors naming the Responses field. The chaining tests on the default model
compare against /v1/chat/completions given the same history explicitly."""
import json
import urllib.error
import urllib.request

import pytest

from conftest import Server

openai = pytest.importorskip("openai")

# A Responses function tool (flat: name and parameters beside "type").
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "maxLength": 30},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}
CALL = ('<tool_call> {"name": "get_weather", "arguments": {"city": "Oslo", '
        '"unit": "celsius"}} </tool_call>')

def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def echo_server():
    s = Server("--backend", "mock", "--mock-mode", "echo", "--log-level", "warn")
    yield s
    assert s.stop() == 0


@pytest.fixture
def echo_client(echo_server):
    return openai.OpenAI(base_url=echo_server.url + "/v1", api_key="unused")


def test_plain_string_input(echo_client):
    r = echo_client.responses.create(model="mock", input="red green blue")
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "completed"
    assert r.output_text == "red green blue"
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.output_tokens == 3
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_message_items_and_max_output_tokens(echo_client):
    r = echo_client.responses.create(
        model="mock", max_output_tokens=2,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "one two three"}]}])
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "one two"
    assert r.usage.output_tokens == 2


def test_stream_event_types(echo_client):
    types, deltas, final = [], [], None
    with echo_client.responses.stream(model="mock", input="alpha beta gamma") as stream:
        for ev in stream:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    for t in ("response.created", "response.output_item.added",
              "response.output_text.delta", "response.output_text.done",
              "response.completed"):
        assert t in types, t
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "".join(deltas) == "alpha beta gamma"
    assert final.output_text == "alpha beta gamma"
    assert final.usage.output_tokens == 3


def test_get_delete_and_store_false(echo_client, echo_server):
    r = echo_client.responses.create(model="mock", input="keep me")
    got = echo_client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "keep me"
    echo_client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        echo_client.responses.retrieve(r.id)
    r2 = echo_client.responses.create(model="mock", input="forget me", store=False)
    assert r2.store is False
    with pytest.raises(openai.NotFoundError):
        echo_client.responses.retrieve(r2.id)


def test_errors_name_responses_fields(echo_server):
    url = echo_server.url + "/v1/responses"
    cases = [
        ({"model": "mock"}, "input"),
        ({"model": "mock", "input": 3}, "input"),
        ({"model": "mock", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "mock", "input": "x", "temperature": 9}, "temperature"),
        ({"model": "mock", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
         "input[0].content[0]"),
        ({"model": "mock", "input": [{"type": "function_call_output"}]}, "input[0]"),
        ({"model": "mock", "input": "x", "previous_response_id": "resp_nope"},
         "previous_response_id"),
        ({"model": "mock", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"model": "mock", "input": "x", "tools": [{"type": "function", "name": "bad name!"}]},
         "tools[0]"),
        ({"model": "mock", "input": "x", "tools": [WEATHER],
          "tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"model": "mock", "input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"model": "mock", "input": [{"type": "function_call", "name": "f"}]}, "input[0]"),
        ({"model": "mock", "input": "x", "text": {"format": {"type": "yaml"}}},
         "text.format.type"),
    ]
    for body, param in cases:
        status, err = post(url, body)
        assert status == 400, (body, status, err)
        assert err["error"]["param"] == param, (body, err)
        assert err["error"]["type"] == "invalid_request_error"
    status, err = post(url, {"model": "nope", "input": "x"})
    assert status == 404 and err["error"]["code"] == "model_not_found"


def test_chained_equals_explicit_history(model_server):
    client = openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused")
    first = client.responses.create(model="smollm2-135m-instruct", temperature=0,
                                    max_output_tokens=12,
                                    input="What is the capital of France?")
    second = client.responses.create(model="smollm2-135m-instruct", temperature=0,
                                     max_output_tokens=12, previous_response_id=first.id,
                                     input="And of Italy?")
    chat = client.chat.completions.create(
        model="smollm2-135m-instruct", temperature=0, max_tokens=12,
        messages=[{"role": "user", "content": "What is the capital of France?"},
                  {"role": "assistant", "content": first.output_text},
                  {"role": "user", "content": "And of Italy?"}])
    assert second.output_text == chat.choices[0].message.content
    assert second.usage.input_tokens == chat.usage.prompt_tokens
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_instructions_are_the_system_message(model_server):
    client = openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused")
    r = client.responses.create(model="smollm2-135m-instruct", temperature=0,
                                max_output_tokens=10, instructions="Answer in French.",
                                input="Say hello.")
    chat = client.chat.completions.create(
        model="smollm2-135m-instruct", temperature=0, max_tokens=10,
        messages=[{"role": "system", "content": "Answer in French."},
                  {"role": "user", "content": "Say hello."}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.instructions == "Answer in French."


def test_function_call_output_items(echo_client):
    """The mock echoes the prompt: a call in Hermes form comes back as a
    function_call item (no message item), anything else as the message."""
    r = echo_client.responses.create(model="mock", input=CALL, tools=[WEATHER])
    assert r.status == "completed"
    assert [o.type for o in r.output] == ["function_call"]
    fc = r.output[0]
    assert fc.name == "get_weather" and fc.call_id and fc.status == "completed"
    assert json.loads(fc.arguments) == {"city": "Oslo", "unit": "celsius"}
    assert r.tools[0].name == "get_weather" and r.tool_choice == "auto"
    for text in ('<tool_call> {"name": "nope", "arguments": {}} </tool_call>', "no call"):
        r = echo_client.responses.create(model="mock", input=text, tools=[WEATHER])
        assert [o.type for o in r.output] == ["message"] and r.output_text == text


def test_function_call_streamed(echo_client):
    for text, want_call in ((CALL, True), ("plain words", False)):
        types, deltas, args = [], [], []
        with echo_client.responses.stream(model="mock", input=text, tools=[WEATHER]) as st:
            for ev in st:
                types.append(ev.type)
                if ev.type == "response.output_text.delta":
                    deltas.append(ev.delta)
                if ev.type == "response.function_call_arguments.done":
                    args.append(json.loads(ev.arguments))
            final = st.get_final_response()
        assert types[0] == "response.created" and types[-1] == "response.completed"
        if want_call:
            for t in ("response.output_item.added", "response.function_call_arguments.delta",
                      "response.function_call_arguments.done", "response.output_item.done"):
                assert t in types, t
            assert deltas == [] and args == [{"city": "Oslo", "unit": "celsius"}]
            assert [o.type for o in final.output] == ["function_call"]
        else:
            assert "".join(deltas) == text and args == []
            assert final.output_text == text


def test_call_then_output_chained(echo_client):
    """A function_call answered by function_call_output, by
    previous_response_id and by explicit items: both accepted."""
    r1 = echo_client.responses.create(model="mock", input=CALL, tools=[WEATHER])
    fc = r1.output[0]
    out = {"type": "function_call_output", "call_id": fc.call_id, "output": "21 degrees"}
    r2 = echo_client.responses.create(model="mock", previous_response_id=r1.id,
                                      input=[out], tools=[WEATHER])
    assert r2.status == "completed"
    r3 = echo_client.responses.create(
        model="mock", tools=[WEATHER],
        input=[{"role": "user", "content": "weather?"},
               {"type": "function_call", "call_id": "call_9", "name": "get_weather",
                "arguments": '{"city": "Oslo", "unit": "celsius"}'},
               {"type": "function_call_output", "call_id": "call_9", "output": "21"}])
    assert r3.status == "completed"


def test_required_tool_equals_chat(model_server):
    """tool_choice required on the default model: the Responses call and
    the chat call get the same constrained call and the same prompt, and
    the tool result turn renders as in chat."""
    client = openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused")
    q = "What is the weather in Paris?"
    r = client.responses.create(model="smollm2-135m-instruct", input=q, tools=[WEATHER],
                                tool_choice="required", temperature=0, max_output_tokens=80)
    chat_tool = {"type": "function", "function": {k: v for k, v in WEATHER.items()
                                                  if k != "type"}}
    c = client.chat.completions.create(model="smollm2-135m-instruct", temperature=0,
                                       max_tokens=80, tools=[chat_tool],
                                       tool_choice="required",
                                       messages=[{"role": "user", "content": q}])
    fc = [o for o in r.output if o.type == "function_call"]
    tc = c.choices[0].message.tool_calls
    assert fc and len(fc) == len(tc)
    for f, t in zip(fc, tc):
        assert f.name == t.function.name
        assert json.loads(f.arguments) == json.loads(t.function.arguments)
    assert r.usage.input_tokens == c.usage.prompt_tokens
    outs = [{"type": "function_call_output", "call_id": f.call_id, "output": "21 C"}
            for f in fc]
    r2 = client.responses.create(
        model="smollm2-135m-instruct", temperature=0, max_output_tokens=12, tools=[WEATHER],
        previous_response_id=r.id, input=outs)
    c2 = client.chat.completions.create(
        model="smollm2-135m-instruct", temperature=0, max_tokens=12, tools=[chat_tool],
        messages=[{"role": "user", "content": q},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": f.call_id, "type": "function",
                       "function": {"name": f.name, "arguments": f.arguments}} for f in fc]}]
        + [{"role": "tool", "tool_call_id": f.call_id, "content": "21 C"} for f in fc])
    assert r2.usage.input_tokens == c2.usage.prompt_tokens
    assert r2.output_text == (c2.choices[0].message.content or "")

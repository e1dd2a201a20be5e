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
        ({"model": "mock", "input": "x", "tools": [{"type": "function", "name": "f"}]},
         "tools"),
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

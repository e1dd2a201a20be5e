"""Structured outputs on the CPU engine with the default model, checked by
independent references: every output that finishes with "stop" validates
under the `jsonschema` package; choices and regexes are checked with
Python's `re`; the official `openai` SDK parses into pydantic models."""
import http.client
import json
import os
import re
import urllib.request

import pytest

from conftest import Server

MODEL = os.environ.get("PARLEY_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def engine():
    if not os.path.exists(MODEL):
        pytest.skip("model not found: " + MODEL)
    s = Server("--backend", "cpu", "--model", MODEL, "--log-level", "warn")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def eclient(engine):
    c = openai.OpenAI(base_url=engine.url + "/v1", api_key="unused")
    c.model_id = c.models.list().data[0].id
    return c


SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "member": {"type": "boolean"},
            "city": {"enum": ["Paris", "Rome", "Oslo"]},
            "nickname": {"type": ["string", "null"], "maxLength": 12},
        },
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    },
    "array_numbers": {
        "type": "array",
        "items": {"type": "number", "minimum": -10, "maximum": 10.5},
        "minItems": 2,
        "maxItems": 5,
    },
    "one_of_disjoint": {
        "oneOf": [{"type": "string", "maxLength": 10}, {"type": "integer"},
                  {"type": "null"}],
    },
    "refs": {
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "integer", "minimum": -99, "maximum": 99},
                               "y": {"type": "integer", "minimum": -99, "maximum": 99}},
                "required": ["x", "y"],
            },
        },
        "type": "object",
        "properties": {
            "label": {"const": "path"},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"},
                       "maxItems": 3},
        },
        "required": ["label", "points"],
    },
    "pattern_and_anyof": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "value": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                                {"type": "boolean"}]},
        },
        "required": ["code", "value"],
    },
    "map_of_small_ints": {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9},
    },
}


def chat(client, content, **kw):
    return client.chat.completions.create(
        model=client.model_id, messages=[{"role": "user", "content": content}], **kw)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_validate(eclient, name):
    schema = SCHEMAS[name]
    r = chat(eclient, "Answer with JSON.", temperature=1.0, seed=11, n=4, max_tokens=120,
             response_format={"type": "json_schema",
                              "json_schema": {"name": name, "schema": schema}})
    stopped = 0
    for c in r.choices:
        if c.finish_reason != "stop":
            continue
        stopped += 1
        jsonschema.validate(json.loads(c.message.content), schema)
    assert stopped >= 1, [c.message.content for c in r.choices]


def test_json_object_and_guided_json(eclient):
    r = chat(eclient, "Describe a cat as JSON.", temperature=1.0, seed=3, n=4,
             max_tokens=150, response_format={"type": "json_object"})
    assert any(c.finish_reason == "stop" for c in r.choices)
    for c in r.choices:
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
    schema = SCHEMAS["object"]
    r = chat(eclient, "A person.", temperature=1.0, seed=5, max_tokens=120,
             extra_body={"guided_json": schema})
    if r.choices[0].finish_reason == "stop":
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_choice_and_regex_always_match(eclient):
    choices = ["A) Paris", "B) Rome", "C) Madrid", "D) Berlin"]
    for extra in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        r = chat(eclient, "Capital of Italy?", temperature=1.0, seed=1, n=6,
                 extra_body=extra)
        for c in r.choices:
            assert c.finish_reason == "stop"
            assert c.message.content in choices
    pattern = r"\d{3}-[A-Z]{2}(x|yz)?"
    for extra in ({"guided_regex": pattern}, {"structured_outputs": {"regex": pattern}}):
        r = chat(eclient, "A code please.", temperature=1.0, seed=2, n=6, max_tokens=20,
                 extra_body=extra)
        for c in r.choices:
            assert c.finish_reason == "stop"
            assert re.fullmatch(pattern, c.message.content), c.message.content


def test_streaming_constrained(eclient):
    choices = ["yes", "no", "maybe so"]
    s = chat(eclient, "Is water wet?", temperature=1.0, stream=True,
             extra_body={"guided_choice": choices})
    text, finish = "", None
    for ch in s:
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
    assert text in choices and finish == "stop"


def test_sdk_parse_pydantic(eclient):
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        age: int = pydantic.Field(ge=0, le=130)
        likes_tea: bool

    r = eclient.chat.completions.parse(
        model=eclient.model_id, temperature=0, max_tokens=80, response_format=Person,
        messages=[{"role": "user", "content": "Invent a person."}])
    p = r.choices[0].message.parsed
    assert isinstance(p, Person)
    assert 0 <= p.age <= 130 and len(p.name) <= 20


@pytest.mark.parametrize("body,needle", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "format": "email"}}}}, "'format'"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "patternProperties": {}}}}},
     "'patternProperties'"),
    ({"guided_regex": "(?<=a)b"}, "lookaround"),
    ({"structured_outputs": {"grammar": "root ::= \"a\""}}, "grammar"),
    ({"response_format": {"type": "yaml"}}, "yaml"),
])
def test_uncompilable_is_a_400_naming_it(eclient, body, needle):
    with pytest.raises(openai.BadRequestError) as e:
        chat(eclient, "x", extra_body=body)
    assert needle in str(e.value)


def _raw_stream(url, body, path="/v1/chat/completions"):
    host, port = url.split("//")[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    out = (r.status, r.getheader("content-type"), r.read())
    c.close()
    return out


@pytest.mark.parametrize("extra,code", [
    # refused at submit (the schema is checked on the event loop, cheaply)
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "format": "email"}}}}, None),
    # found while compiling on a worker: a DFA past the state limit
    ({"guided_regex": "(a|b)*a(a|b){14}"}, None),
    # tokenised on a worker (a long text prompt), longer than the context
    ({"messages": [{"role": "user", "content": "lighthouse " * 12000}]},
     "context_length_exceeded"),
])
def test_errors_found_off_the_loop_are_a_400_before_any_stream_byte(engine, extra, code):
    body = {"model": "x", "stream": True, "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}]}
    models = json.load(urllib.request.urlopen(engine.url + "/v1/models"))
    body["model"] = models["data"][0]["id"]
    body.update(extra)
    status, ctype, raw = _raw_stream(engine.url, body)
    assert status == 400, raw[:300]
    assert ctype.startswith("application/json") and b"data:" not in raw, raw[:300]
    err = json.loads(raw)["error"]
    assert err["type"] == "invalid_request_error"
    if code:
        assert err["code"] == code


def test_a_prompt_too_long_found_off_the_loop_is_a_400_on_responses_too(engine):
    models = json.load(urllib.request.urlopen(engine.url + "/v1/models"))
    body = {"model": models["data"][0]["id"], "stream": True, "max_output_tokens": 8,
            "input": "lighthouse " * 12000}
    status, ctype, raw = _raw_stream(engine.url, body, "/v1/responses")
    assert status == 400, raw[:300]
    assert ctype.startswith("application/json") and b"data:" not in raw, raw[:300]
    assert json.loads(raw)["error"]["code"] == "context_length_exceeded"


def test_mock_honours_constraints(client):
    model = client.models.list().data[0].id
    choices = ["alpha", "beta gamma"]
    for seed in range(4):
        r = client.chat.completions.create(
            model=model, seed=seed, messages=[{"role": "user", "content": "pick"}],
            extra_body={"guided_choice": choices})
        assert r.choices[0].message.content in choices
    pattern = r"(?:[ -~]{1,40}\n)?Answer: [A-D]"
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"guided_regex": pattern})
    assert re.fullmatch(pattern, r.choices[0].message.content)
    schema = SCHEMAS["refs"]
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"guided_json": schema})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"guided_regex": "a(?=b)"})
    assert "lookaround" in str(e.value)

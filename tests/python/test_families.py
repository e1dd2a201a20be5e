"""The new architectures behind the whole server, with the official openai
SDK: the tiny random-weight qwen3, gemma2, gemma3 and sliding-window llama
models (tests/fixtures/gen_families.py) and Gemma 3 270M Q4_K_M
(scripts/fetch_model.sh gemma3): chat, streaming equal to the whole reply,
structured outputs that validate, tool calls, a debate job, and each
family's chat template as the server renders it (Gemma folds the system
text into the first user turn: Gemma 3's template so, Gemma 2's raising
where llama.cpp's server folds it too; Qwen3 closes an empty think block
for chat_template_kwargs.enable_thinking=false).
"""
import http.client
import json
import os
import urllib.parse

import pytest

from conftest import ROOT, Server, debate_job

openai = pytest.importorskip("openai")
FIX = os.path.join(ROOT, "tests", "fixtures")
GEMMA = os.environ.get("PARLEY_GEMMA_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/gemma-3-270m-q4_k_m.gguf")
MODELS = ["tiny_qwen3", "tiny_gemma2", "tiny_gemma3", "tiny_mistral", "gemma-3-270m"]
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def model_path(name):
    if name == "gemma-3-270m":
        if not os.path.exists(GEMMA):
            if os.environ.get("PARLEY_GEMMA_MODEL"):
                pytest.fail("PARLEY_GEMMA_MODEL=%s is missing" % GEMMA)
            pytest.skip("Gemma 3 270M not found (scripts/fetch_model.sh gemma3)")
        return GEMMA
    return os.path.join(FIX, name + ".gguf")


@pytest.fixture(scope="module", params=MODELS)
def srv(request, tmp_path_factory):
    env = dict(os.environ, PARLEY_JOBS_DIR=str(tmp_path_factory.mktemp("jobs")))
    s = Server("--model", model_path(request.param), "--served-model-name", request.param,
               "--log-level", "warn", "--max-model-len", "1024", env=env)
    u = urllib.parse.urlparse(s.url)
    s.host, s.port, s.name = u.hostname, u.port, request.param
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


def messages(s):
    return [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name three primes."}]


def test_chat_and_stream_agree(srv):
    kw = dict(model=srv.name, messages=messages(srv), max_tokens=16, temperature=0)
    whole = srv.client.chat.completions.create(**kw)
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens >= 1
    text = "".join(c.choices[0].delta.content or "" for c in
                   srv.client.chat.completions.create(stream=True, **kw) if c.choices)
    assert text == whole.choices[0].message.content


def no_thinking(s):
    """Qwen3 thinks first and the constraint applies after its reasoning (as
    vLLM applies it; tests/python/test_reasoning.py): a random model may
    think past max_tokens, so these checks of the constraint itself turn
    thinking off."""
    return {"chat_template_kwargs": {"enable_thinking": False}} if s.name == "tiny_qwen3" else {}


def test_structured_output_validates(srv):
    jsonschema = pytest.importorskip("jsonschema")
    r = srv.client.chat.completions.create(
        model=srv.name, messages=messages(srv), max_tokens=120, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
        extra_body=no_thinking(srv))
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)


def test_required_tool_call(srv):
    r = srv.client.chat.completions.create(
        model=srv.name, max_tokens=200, temperature=0, tools=[WEATHER], tool_choice="required",
        parallel_tool_calls=False, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        extra_body=no_thinking(srv))
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert "city" in json.loads(c.message.tool_calls[0].function.arguments)


def test_debate_job(srv):
    # room for the constrained reply: a reasoning line of up to 400
    # characters (a token per byte in the tiny vocabularies), then the answer
    state, t = debate_job(srv, "fam_" + srv.name.replace("-", "_"),
                          160 if "270m" in srv.name else 450)
    assert state in ("done", "succeeded", "finished", "completed", None), t
    assert json.dumps(t).count("Answer:") >= 3      # every agent answered, both rounds


def rendered(s, msgs, **extra):
    st, b = post(s, "/tokenize", dict(model=s.name, messages=msgs,
                                      add_generation_prompt=True, **extra))
    assert st == 200, b
    st, d = post(s, "/detokenize", {"model": s.name, "tokens": b["tokens"]})
    assert st == 200, d
    return b["tokens"], d["prompt"]


def test_chat_template_of_the_family(srv):
    msgs = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}]
    ids, text = rendered(srv, msgs)
    if srv.name == "tiny_gemma2":               # trimmed, as llama.cpp's server folds it
        assert text.endswith("user\nBe brief.\n\nHi\nmodel\n") or \
            text.endswith("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                          "<start_of_turn>model\n"), text
    msgs[0]["content"] = "Be brief."
    ids, text = rendered(srv, msgs)
    if srv.name in ("tiny_gemma3", "gemma-3-270m"):
        assert text.endswith("user\nBe brief.\n\nHi\nmodel\n") or \
            text.endswith("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                          "<start_of_turn>model\n"), text
    if srv.name == "tiny_qwen3":
        off, _ = rendered(srv, msgs, chat_template_kwargs={"enable_thinking": False})
        on, _ = rendered(srv, msgs, chat_template_kwargs={"enable_thinking": True})
        assert on == ids and len(off) > len(ids) and off[:len(ids)] == ids
        st, d = post(srv, "/detokenize", {"model": srv.name, "tokens": off[len(ids):]})
        assert d["prompt"] == "<think>\n\n</think>\n\n"
        # and through a chat completion (the request's own field)
        usage = [srv.client.chat.completions.create(
            model=srv.name, messages=msgs, max_tokens=1,
            extra_body={"chat_template_kwargs": {"enable_thinking": v}}).usage.prompt_tokens
            for v in (True, False)]
        assert usage == [len(ids), len(off)]
        st, b = post(srv, "/v1/chat/completions", {
            "model": srv.name, "messages": msgs, "max_tokens": 2,
            "chat_template_kwargs": {"enable_thinking": "no"}})
        assert st == 400 and b["error"]["param"] == "chat_template_kwargs.enable_thinking"

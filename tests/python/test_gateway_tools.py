"""Tool calls through parley as a gateway (--upstream), checked with the
official openai SDK: the client's tools and tool history reach the upstream
as written, and the upstream's tool calls come back, streamed and not, with
finish_reason "tool_calls". The upstream is a small stand-in written here
with the standard library, streaming tool calls the way vLLM does (id and
name first, then argument fragments)."""
import json
import threading
from http.server import ThreadingHTTPServer

import pytest

from conftest import QuietJSONHandler, Server

openai = pytest.importorskip("openai")

CALLS = [
    {"id": "call_a1", "type": "function",
     "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "C"})}},
    {"id": "call_b2", "type": "function",
     "function": {"name": "get_time", "arguments": json.dumps({"tz": "Europe/Paris"})}},
]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                         "unit": {"enum": ["C", "F"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object",
                                           "properties": {"tz": {"type": "string"}}}}},
]


def fragments():
    """vLLM's shape: per call a head (index, id, type, name, ""), then the
    arguments in pieces of 5 characters."""
    for i, c in enumerate(CALLS):
        yield {"index": i, "id": c["id"], "type": "function",
               "function": {"name": c["function"]["name"], "arguments": ""}}
        a = c["function"]["arguments"]
        for k in range(0, len(a), 5):
            yield {"index": i, "function": {"arguments": a[k:k + 5]}}


class Upstream(QuietJSONHandler):
    bodies = []

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "tooly", "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Upstream.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def ev(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()
        base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1,
                "model": "tooly"}
        ev(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": None}]))
        for f in fragments():
            ev(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [f]},
                                    "finish_reason": None}]))
        ev(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]))
        ev(dict(base, choices=[], usage={"prompt_tokens": 40, "completion_tokens": 30,
                                         "total_tokens": 70}))
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def client():
    Upstream.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    gw = Server("--upstream", "http://127.0.0.1:%d/v1" % srv.server_address[1],
                "--log-level", "warn")
    yield openai.OpenAI(base_url=gw.url + "/v1", api_key="unused")
    assert gw.stop() == 0
    srv.shutdown()
    srv.server_close()


MSGS = [{"role": "user", "content": "Weather and time in Paris?"}]


def check_calls(calls):
    assert [c.id for c in calls] == [c["id"] for c in CALLS]
    assert [c.type for c in calls] == ["function", "function"]
    assert [c.function.name for c in calls] == [c["function"]["name"] for c in CALLS]
    assert [json.loads(c.function.arguments) for c in calls] == \
        [json.loads(c["function"]["arguments"]) for c in CALLS]


def test_non_stream_tool_calls(client):
    r = client.chat.completions.create(model="tooly", messages=MSGS, tools=TOOLS,
                                       tool_choice="auto")
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    check_calls(ch.message.tool_calls)
    assert r.usage.completion_tokens == 30
    up = Upstream.bodies[-1]
    assert up["tools"] == TOOLS and up["tool_choice"] == "auto"
    assert up["messages"] == MSGS


def test_stream_tool_calls(client):
    calls, finish = {}, None
    for chunk in client.chat.completions.create(model="tooly", messages=MSGS, tools=TOOLS,
                                                stream=True):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
                if d.id:
                    c["id"] = d.id
                if d.function and d.function.name:
                    c["name"] = d.function.name
                if d.function and d.function.arguments:
                    c["args"] += d.function.arguments
            if ch.finish_reason:
                finish = ch.finish_reason
    assert finish == "tool_calls"
    assert sorted(calls) == [0, 1]
    assert [calls[i]["id"] for i in (0, 1)] == ["call_a1", "call_b2"]
    assert [calls[i]["name"] for i in (0, 1)] == ["get_weather", "get_time"]
    assert [json.loads(calls[i]["args"]) for i in (0, 1)] == \
        [json.loads(c["function"]["arguments"]) for c in CALLS]


def test_tool_history_reaches_the_upstream_as_written(client):
    msgs = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_a1", "content": "18 C, cloudy"},
        {"role": "tool", "tool_call_id": "call_b2", "content": "14:05"},
    ]
    client.chat.completions.create(model="tooly", messages=msgs, tools=TOOLS,
                                   tool_choice={"type": "function",
                                                "function": {"name": "get_time"}})
    up = Upstream.bodies[-1]
    assert up["messages"] == msgs
    assert up["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}

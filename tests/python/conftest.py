"""Fixtures: a parley server on 127.0.0.1 port 0, stopped by its pid."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parley_bin():
    return os.environ.get("PARLEY_BIN", os.path.join(ROOT, "build", "parley"))


class Server:
    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(
            [parley_bin(), "serve", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError("parley did not start: %r" % line)
        self.url = line.split()[-1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def mock_server():
    s = Server("--backend", "mock", "--log-level", "warn")
    yield s
    assert s.stop() == 0


@pytest.fixture
def client(mock_server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=mock_server.url + "/v1", api_key="unused")


MODEL_PATH = os.environ.get("PARLEY_MODEL", os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="session")
def model_server():
    """One server on the default model for the whole run (loading takes seconds)."""
    if not os.path.exists(MODEL_PATH):
        pytest.fail("default model missing: %s (run scripts/fetch_model.sh)" % MODEL_PATH)
    s = Server("--model", MODEL_PATH, "--log-level", "warn")
    yield s
    assert s.stop() == 0


@pytest.fixture
def model_url(model_server):
    return model_server.url


# ---- helpers for tests that talk HTTP to a server s (s.host, s.port) ----

def request(s, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection(s.host, s.port, timeout=timeout)
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        hdrs.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=hdrs)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, payload


def post_json(url, body, timeout=120):
    """POST body as JSON to url: (status, decoded JSON reply), errors too."""
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw(s, data, wait=2.0):
    """Send bytes on a fresh connection; return all bytes until close or wait."""
    c = socket.create_connection((s.host, s.port))
    c.sendall(data)
    c.settimeout(wait)
    out = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    c.close()
    return out


def debate_job(s, experiment, max_tokens, timeout=300):
    """Run a two-round, three-agent debate (constrained answers) on the model
    that s serves; (the job's final state, its q1 transcript as JSON)."""
    spec = {"experiment": experiment, "num_rounds": 2, "models": {s.name: {}},
            "sampling": {"temperature": 0, "max_tokens": max_tokens},
            "agents": [{"id": "p0", "model": s.name, "system_prompt": "Be brief."},
                       {"id": "p1", "model": s.name, "system_prompt": "Be careful."},
                       {"id": "mod", "role": "moderator", "model": s.name,
                        "speak_after_within_round": ["p0", "p1"]}],
            "validation": {"enabled": True, "mode": "constrained"},
            "questions": [{"id": "q1", "text": "What is 2 plus 3?",
                           "choices": ["4", "5", "6", "7"], "answer": "B"}]}
    st, _, b = request(s, "POST", "/v1/jobs", spec, timeout=120)
    assert st == 201, b
    jid, t0 = json.loads(b)["id"], time.time()
    while True:
        st, _, body = request(s, "GET", "/v1/jobs/" + jid)
        state = json.loads(body)["state"] if st == 200 else None
        if state not in ("running", "starting"):
            break
        assert time.time() - t0 < timeout, "job did not finish"
        time.sleep(0.2)
    st, _, body = request(s, "GET", "/v1/jobs/%s/transcripts/q1" % jid)
    assert st == 200, body
    return state, json.loads(body)


class QuietJSONHandler(BaseHTTPRequestHandler):
    """A stand-in upstream's base: no request log, JSON replies."""

    def log_message(self, *a):
        pass

    def reply(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

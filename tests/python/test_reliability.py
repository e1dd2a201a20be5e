"""Reliability, third pass (issue 36), black-box over real sockets: a reader
that stops reading, descriptors running out, upstream credentials, DNS
rebinding, hostile upstream model ids, chunk-size overflow, HTTP/1.1
without Host, out-of-range token ids, and NUL in upstream content. Each
test names the item of the issue it covers.

Waits are event-driven: the server's stderr is read line by line, and a
test waits for the line it expects (with a generous deadline)."""
import datetime
import json
import os
import re
import resource
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer

import pytest

from conftest import QuietJSONHandler, parley_bin, raw, request

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi there"}],
        "max_tokens": 4}


class LogServer:
    """parley serve on 127.0.0.1 port 0 with its stderr kept line by line."""

    def __init__(self, *args, limits=None, check_start=True):
        def preexec():
            if limits:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        self.proc = subprocess.Popen(
            [parley_bin(), "serve", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec,
            errors="replace")
        self.lines, self.cv = [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        line = self.proc.stdout.readline()
        if check_start and "listening on" not in line:
            self.stop()
            raise RuntimeError("parley did not start: %r %s" % (line, self.text()))
        if "listening on" in line:
            u = urllib.parse.urlparse(line.split()[-1])
            self.host, self.port = u.hostname, u.port

    def _read(self):
        for line in self.proc.stderr:
            with self.cv:
                self.lines.append(line)
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)              # EOF
            self.cv.notify_all()

    def wait_for(self, pattern, timeout=60):
        """The first stderr line matching pattern (a regex), or None by the deadline."""
        rx = re.compile(pattern)
        found = []

        def match():
            found[:] = [ln for ln in self.lines if ln is not None and rx.search(ln)][:1]
            return found or None in self.lines
        with self.cv:
            self.cv.wait_for(match, timeout)
        return found[0] if found else None

    def text(self):
        with self.cv:
            return "".join(ln for ln in self.lines if ln is not None)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with self.cv:
            self.cv.wait_for(lambda: None in self.lines, 10)
        return self.proc.returncode


@pytest.fixture
def make_server():
    servers = []

    def make(*args, **kw):
        s = LogServer(*args, **kw)
        servers.append(s)
        return s
    yield make
    for s in servers:
        assert s.stop() == 0, s.text()[-3000:]


def json_error(data):
    """(status, content type, error object) of one raw HTTP reply."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    n = int(hdrs.get("content-length", len(body)))
    return int(lines[0].split()[1]), hdrs.get("content-type"), json.loads(body[:n])["error"]


# ---- item 3: a reader that stops reading ----

class LastArrival(threading.Thread):
    """Watches a socket nobody reads: when did its receive queue last grow
    (the last byte its kernel accepted, and so acknowledged)?"""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock, self.at, self.done = sock, time.time(), threading.Event()
        self.start()

    def run(self):
        import fcntl
        import termios
        last = -1
        while not self.done.wait(0.005):
            n = struct.unpack("i", fcntl.ioctl(self.sock, termios.FIONREAD, b"\0" * 4))[0]
            if n != last:
                last, self.at = n, time.time()


def log_time(line):
    """The wall-clock time of a text log line ("HH:MM:SS.mmm ..., UTC")."""
    hms = datetime.datetime.strptime(line[:12], "%H:%M:%S.%f").time()
    now = datetime.datetime.now(datetime.timezone.utc)
    t = datetime.datetime.combine(now.date(), hms, tzinfo=datetime.timezone.utc)
    if t > now + datetime.timedelta(hours=1):        # logged just before midnight
        t -= datetime.timedelta(days=1)
    return t.timestamp()


def test_a_reader_that_stops_reading_is_aborted_within_the_timeout(make_server):
    # 500 tokens/s into a client that never reads: its small receive buffer
    # fills within a moment, and nothing is acknowledged after that. The
    # kernel's send buffer (megabytes) took the stream ~45 s to fill before
    # parley's own buffer passed its cap and its pause timer started.
    s = make_server("--backend", "mock", "--mock-capacity", "1", "--mock-token-delay-ms", "2",
                    "--stream-stall-timeout", "2", "--max-model-len", "1000000")
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect((s.host, s.port))
    body = json.dumps(dict(CHAT, max_tokens=900000, stream=True)).encode()
    arrival = LastArrival(c)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    line = s.wait_for(r" access POST /v1/chat/completions 499 ", timeout=90)
    arrival.done.set()
    assert line, s.text()[-2000:]
    # From the last byte the client took to the abort: the timeout, plus
    # at most a second (the check runs every 250 ms).
    waited = log_time(line) - arrival.at
    assert 1.9 <= waited <= 3.0, "aborted %.2f s after the client took its last byte" % waited
    assert s.wait_for(r"stream aborted: the client acknowledged nothing", timeout=5)
    st, _, b = request(s, "POST", "/v1/chat/completions", CHAT, timeout=30)
    assert st == 200, b                      # the only slot is free again
    st, _, b = request(s, "GET", "/status")
    status = json.loads(b)
    assert status["http"]["streams_stalled_aborted"] == 1
    assert status["models"]["mock"]["in_flight"] == 0
    c.close()


# ---- item 6: file descriptors ----

def open_files_limit(pid):
    with open("/proc/%d/limits" % pid) as f:
        for ln in f:
            if ln.startswith("Max open files"):
                return [int(x) for x in ln.split()[3:5]]


def test_soft_open_files_limit_is_raised_to_the_hard_one(make_server):
    s = make_server("--backend", "mock", limits=(256, 4096))
    assert open_files_limit(s.proc.pid) == [4096, 4096]
    assert not s.wait_for(r"max-connections", timeout=0.1)   # 1000 fits in 4096


def test_descriptors_running_out_pause_accepting_and_log_once(make_server):
    s = make_server("--backend", "mock", "--log-level", "warn", limits=(64, 64))
    line = s.wait_for(r"--max-connections 1000 lowered to 24", timeout=10)
    assert line and "open-files limit is 64" in line, s.text()
    socks = []
    try:
        for _ in range(80):                      # more than the process may open
            socks.append(socket.create_connection((s.host, s.port), timeout=5))
        assert s.wait_for(r"Too many open files", timeout=30), s.text()[-2000:]
        t0 = time.time()
        with s.cv:                               # a window of a second: no flood
            s.cv.wait_for(lambda: len(s.lines) > 1000, 1.0)
        n = sum("Too many open files" in ln for ln in s.lines if ln)
        assert n == 1, "%d lines in %.1f s: %s" % (n, time.time() - t0, s.text()[-1000:])
    finally:
        for c in socks:
            c.close()
    st, _, _ = request(s, "GET", "/health", timeout=30)     # accepting again
    assert st == 200


# ---- items 7, 9, 13: an upstream stand-in ----

class Upstream(QuietJSONHandler):
    """A stand-in OpenAI upstream: the test sets what it lists and streams."""
    models = ["m"]
    auth = None                  # required "Basic ..." value, or None
    content = '"hello"'          # the delta's content, as JSON text
    drop = False                 # close the connection instead of answering POSTs

    def authorized(self):
        if self.auth is None or self.headers.get("Authorization") == self.auth:
            return True
        self.reply(401, {"error": {"message": "bad credentials"}})
        return False

    def do_GET(self):
        if self.authorized():
            self.reply(200, {"object": "list",
                             "data": [{"id": m, "object": "model"} for m in self.models]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if not self.authorized():
            return
        if self.drop:
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for ev in ['{"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}'
                   % self.content,
                   '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', "[DONE]"]:
            self.wfile.write(b"data: " + ev.encode() + b"\n\n")
        self.close_connection = True


@pytest.fixture
def upstream():
    class U(Upstream):
        pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), U)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    U.port = srv.server_address[1]
    yield U
    srv.shutdown()
    srv.server_close()


# ---- item 7: upstream credentials ----

def test_upstream_credentials_are_never_shown(make_server, upstream):
    import base64
    upstream.auth = "Basic " + base64.b64encode(b"user:s3cret").decode()
    url = "http://user:s3cret@127.0.0.1:%d/v1" % upstream.port
    s = make_server("--upstream", url, "--log-level", "info")
    st, _, b = request(s, "POST", "/v1/chat/completions", dict(CHAT, model="m"))
    assert st == 200 and json.loads(b)["choices"][0]["message"]["content"] == "hello"
    upstream.drop = True                     # the client's error must not name the URL
    st, _, b = request(s, "POST", "/v1/chat/completions", dict(CHAT, model="m"))
    err = json.loads(b)["error"]
    assert st == 502 and "model 'm'" in err["message"], b
    assert "127.0.0.1" not in err["message"] and "s3cret" not in err["message"]
    shown = "http://***@127.0.0.1:%d/v1" % upstream.port
    _, _, status = request(s, "GET", "/status")
    _, _, metrics = request(s, "GET", "/metrics")
    assert shown in status.decode() and shown in metrics.decode()
    assert s.wait_for(re.escape("upstream " + shown), timeout=5)    # the startup log
    for where in [status.decode(), metrics.decode(), s.text()]:
        assert "s3cret" not in where
    # a start-up failure does not print them either
    dead = LogServer("--upstream", "http://user:s3cret@127.0.0.1:1/v1", check_start=False)
    assert dead.stop() != 0
    assert "***@127.0.0.1:1" in dead.text() and "s3cret" not in dead.text()


# ---- item 9: hostile upstream model ids ----

def test_hostile_upstream_model_ids_are_not_served(make_server, upstream):
    upstream.models = ["good", "", "../../etc/passwd", "a\nb", "x" * 300, "/abs", "ok/name:tag"]
    s = make_server("--upstream", "http://127.0.0.1:%d/v1" % upstream.port,
                    "--log-level", "info")
    st, _, b = request(s, "GET", "/v1/models")
    assert sorted(m["id"] for m in json.loads(b)["data"]) == ["good", "ok/name:tag"]
    assert s.wait_for(r"not serving the model id 'a\\nb': it has a control character", 10)
    assert s.wait_for(r"not serving the model id '\.\./\.\./etc/passwd'", 10)
    st, _, b = request(s, "POST", "/v1/chat/completions", dict(CHAT, model="good"))
    assert st == 200
    # every line is one log line: "HH:MM:SS.mmm level ..."
    lines = [ln for ln in s.lines if ln]
    bad = [ln for ln in lines if not re.match(r"\d\d:\d\d:\d\d\.\d{3} \w+ ", ln)]
    assert not bad, bad


# ---- item 13: NUL in upstream content ----

def test_escaped_nul_in_upstream_content_passes_through(make_server, upstream):
    upstream.content = json.dumps("a\u0000b")
    s = make_server("--upstream", "http://127.0.0.1:%d/v1" % upstream.port)
    st, _, b = request(s, "POST", "/v1/chat/completions", dict(CHAT, model="m"))
    assert st == 200, b
    assert json.loads(b)["choices"][0]["message"]["content"] == "a\u0000b"
    st, _, b = request(s, "POST", "/v1/chat/completions", dict(CHAT, model="m", stream=True))
    assert st == 200
    text = ""
    for ev in b.decode().split("\n\n"):
        if ev.startswith("data: {"):
            for ch in json.loads(ev[6:])["choices"]:
                text += ch.get("delta", {}).get("content") or ""
    assert text == "a\u0000b"


# ---- item 8: DNS rebinding ----

def test_keyless_server_answers_only_its_own_host_names(make_server):
    s = make_server("--backend", "mock", "--allowed-hosts", "good.example, .corp.example")
    evil = {"Host": "evil.example:%d" % s.port, "Origin": "http://evil.example:%d" % s.port}
    for method, path, body in [("GET", "/status", None), ("GET", "/v1/models", None),
                               ("POST", "/v1/chat/completions", CHAT)]:
        st, _, b = request(s, method, path, body, evil)
        assert st == 403 and json.loads(b)["error"]["code"] == "host_not_allowed", b
    for host in ["localhost:%d" % s.port, "127.0.0.1:%d" % s.port, "LOCALHOST",
                 "[::1]:%d" % s.port, "127.0.0.2", "good.example", "a.corp.example:80",
                 "corp.example"]:
        st, _, b = request(s, "GET", "/status", None, {"Host": host})
        assert st == 200, (host, b)
    for host in ["10.1.2.3:%d" % s.port, "evilcorp.example", "good.example.evil.example",
                 "localhost.evil.example", "[::1", ":%d" % s.port]:
        st, _, _ = request(s, "GET", "/v1/models", None, {"Host": host})
        assert st == 403, host
    st, _, _ = request(s, "GET", "/health", None, evil)   # load balancers use any name
    assert st == 200
    # with API keys, the key is what protects: any Host
    k = make_server("--backend", "mock", "--api-key", "k1")
    st, _, _ = request(k, "GET", "/status", None,
                       {"Host": "evil.example", "Authorization": "Bearer k1"})
    assert st == 200


# ---- items 10, 11: HTTP framing ----

def test_chunk_size_sum_overflow_is_a_json_413(make_server):
    s = make_server("--backend", "mock")
    out = raw(s, b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                 b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"1\r\n{\r\n7fffffffffffffff\r\n" + b"a" * 64)
    st, ctype, err = json_error(out)
    assert (st, ctype, err["code"]) == (413, "application/json", "request_too_large"), out


def test_http11_needs_exactly_one_host(make_server):
    s = make_server("--backend", "mock")
    for req in [b"GET /health HTTP/1.1\r\n\r\n",
                b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n"]:
        st, ctype, err = json_error(raw(s, req))
        assert (st, ctype) == (400, "application/json") and "Host" in err["message"], req
    out = raw(s, b"GET /health HTTP/1.0\r\n\r\n")            # HTTP/1.0 has no Host
    assert out.startswith(b"HTTP/1.1 200") or out.startswith(b"HTTP/1.0 200"), out


# ---- item 12: token ids past the vocabulary ----

def test_out_of_range_token_ids_are_400(model_url):
    u = urllib.parse.urlparse(model_url)
    s = type("S", (), {"host": u.hostname, "port": u.port})
    _, _, b = request(s, "GET", "/v1/models")
    model = json.loads(b)["data"][0]["id"]
    st, _, b = request(s, "POST", "/tokenize", {"model": model, "prompt": "hello"})
    assert st == 200
    n_vocab = 49152                                            # SmolLM2's vocabulary
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for bias in [{str(n_vocab): 5}, {"1000000": -100}]:
        st, _, b = request(s, "POST", "/v1/chat/completions", dict(chat, logit_bias=bias))
        err = json.loads(b)["error"]
        assert st == 400 and err["param"] == "logit_bias", b
    st, _, b = request(s, "POST", "/v1/chat/completions",
                       dict(chat, logit_bias={str(n_vocab - 1): 1}))
    assert st == 200, b
    st, _, b = request(s, "POST", "/detokenize", {"model": model, "tokens": [1, n_vocab]})
    err = json.loads(b)["error"]
    assert st == 400 and err["param"] == "tokens" and str(n_vocab) in err["message"], b
    st, _, b = request(s, "POST", "/detokenize", {"model": model, "tokens": [1, n_vocab - 1]})
    assert st == 200, b


def token_id_contract(s):
    """What a server answers for token ids at and past its vocabulary (the
    size it states in /v1/models): a list of (what, status, param)."""
    st, _, b = request(s, "GET", "/v1/models")
    m = json.loads(b)["data"][0]
    model, n_vocab = m["id"], m["vocab_size"]
    assert isinstance(n_vocab, int) and n_vocab > 0, m
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    done = {"model": model, "prompt": [1, 2], "max_tokens": 1}
    out = []
    for what, path, body in [
            ("bias last", "/v1/chat/completions", dict(chat, logit_bias={str(n_vocab - 1): 1})),
            ("bias past", "/v1/chat/completions", dict(chat, logit_bias={str(n_vocab): 5})),
            ("bias far", "/v1/chat/completions", dict(chat, logit_bias={"99999999": -100})),
            ("prompt last", "/v1/completions", dict(done, prompt=[1, n_vocab - 1])),
            ("prompt past", "/v1/completions", dict(done, prompt=[1, n_vocab])),
            ("detok last", "/detokenize", {"model": model, "tokens": [1, n_vocab - 1]}),
            ("detok past", "/detokenize", {"model": model, "tokens": [1, n_vocab]}),
            ("detok 200", "/detokenize", {"model": model, "tokens": [n_vocab + 200]})]:
        st, _, b = request(s, "POST", path, body)
        param = json.loads(b)["error"]["param"] if st != 200 else None
        if st == 400:
            assert "out of range [0, %d)" % n_vocab in json.loads(b)["error"]["message"], b
        out.append((what, st, param))
    return out


def test_mock_keeps_the_engines_token_id_contract(make_server, model_url):
    """The mock states its vocabulary in /v1/models and refuses ids past it
    as the engine does (400 naming the parameter), so tests against the
    mock learn the engine's contract."""
    u = urllib.parse.urlparse(model_url)
    engine = token_id_contract(type("S", (), {"host": u.hostname, "port": u.port}))
    mock = token_id_contract(make_server("--backend", "mock", "--mock-token-delay-ms", "0"))
    assert mock == engine, (mock, engine)
    assert [st for _, st, _ in engine] == [200, 400, 400, 200, 400, 200, 400, 400], engine


def test_burst_of_long_prompts_is_admitted_as_the_cache_holds_it(make_server):
    """Six distinct long text prompts at once, a K/V cache that holds two,
    chunked prefill: each is admitted when its whole prompt fits, so none
    is preempted and no partial prefill is thrown away (prefill rows never
    exceed the prompts' tokens). Event-driven: waits for the replies only."""
    from conftest import MODEL_PATH
    s = make_server("--model", MODEL_PATH, "--kv-cache-mb", "36", "--max-model-len", "1024",
                    "--max-num-batched-tokens", "256", "--log-level", "warn")
    words = "river stone quiet lamp orange window seven market winter paper".split()
    prompts = ["Note %d: " % i + " ".join(words[(i * 7 + j * 3) % 10] + str((i * 13 + j) % 97)
                                         for j in range(230)) for i in range(6)]
    st, _, b = request(s, "GET", "/v1/models")
    model = json.loads(b)["data"][0]["id"]
    n = [json.loads(request(s, "POST", "/tokenize", {"model": model, "prompt": p})[2])["count"]
         for p in prompts]
    st, _, b = request(s, "GET", "/status")
    before = json.loads(b)["models"][model]
    block, total = before["kv"]["block_size"], before["kv"]["num_blocks"]
    need = [(k + 4 + block - 1) // block for k in n]
    assert sum(sorted(need)[:2]) <= total < sum(sorted(need)[:3]), (need, total)
    out = [None] * len(prompts)

    def go(i):
        out[i] = request(s, "POST", "/v1/completions", {"model": model, "prompt": prompts[i],
                                                        "max_tokens": 4, "temperature": 0},
                         timeout=600)[0]
    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out == [200] * len(prompts), out
    st, _, b = request(s, "GET", "/status")
    after = json.loads(b)["models"][model]
    assert after["preemptions"] - before["preemptions"] == 0, after
    assert after["prefill_rows"] - before["prefill_rows"] <= sum(n), (after["prefill_rows"], n)

"""The access log: one line per request, text or JSON (--log-format)."""
import http.client
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request

from conftest import parley_bin


class LoggedServer:
    def __init__(self, tmp_path, *args):
        self.log = tmp_path / "stderr.log"
        self.err = open(self.log, "w")
        self.proc = subprocess.Popen(
            [parley_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "--backend", "mock",
             "--mock-token-delay-ms", "2", *args],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.url = line.split()[-1]

    def lines(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=10) == 0
        self.err.close()
        return self.log.read_text().splitlines()


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.headers, r.read().decode()


def exercise(url):
    """A non-streamed chat with a client id, a stream, a 404, a stream the
    client leaves early."""
    msgs = [{"role": "user", "content": "a b c"}]
    st, h, body = post(url + "/v1/chat/completions",
                       {"model": "mock", "messages": msgs, "max_tokens": 4},
                       {"X-Request-Id": "client-id-1"})
    assert h["X-Request-Id"] == "client-id-1"
    usage = json.loads(body)["usage"]
    st, h, body = post(url + "/v1/chat/completions",
                       {"model": "mock", "messages": msgs, "max_tokens": 3, "stream": True})
    assert h["X-Request-Id"].startswith("req-")
    stream_id = h["X-Request-Id"]
    try:
        urllib.request.urlopen(url + "/no/such/path", timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 404
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({"model": "mock", "messages": msgs, "max_tokens": 5000,
                             "stream": True}),
                 {"Content-Type": "application/json", "X-Request-Id": "leaver"})
    r = conn.getresponse()
    r.fp.readline()
    conn.sock.close()
    conn.close()
    time.sleep(0.3)
    return usage, stream_id


def test_json_lines(tmp_path):
    s = LoggedServer(tmp_path, "--log-format", "json")
    usage, stream_id = exercise(s.url)
    lines = s.lines()
    objs = [json.loads(ln) for ln in lines]          # every line is JSON
    acc = [o for o in objs if o.get("msg") == "access"]
    by_id = {o["request_id"]: o for o in acc}
    a = by_id["client-id-1"]
    assert (a["method"], a["path"], a["status"]) == ("POST", "/v1/chat/completions", 200)
    assert a["prompt_tokens"] == usage["prompt_tokens"]
    assert a["completion_tokens"] == usage["completion_tokens"] == 4
    assert a["duration_ms"] > 0
    b = by_id[stream_id]
    assert b["status"] == 200 and b["completion_tokens"] == 3
    nf = [o for o in acc if o["path"] == "/no/such/path"]
    assert len(nf) == 1 and nf[0]["status"] == 404 and nf[0]["method"] == "GET"
    assert by_id["leaver"]["status"] == 499
    assert len(acc) == 4
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["time"]) for o in objs)


def test_text_lines_and_off(tmp_path):
    s = LoggedServer(tmp_path)
    exercise(s.url)
    acc = [ln for ln in s.lines() if " access " in ln]
    assert len(acc) == 4
    pat = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} info  access POST /v1/chat/completions 200 "
                     r"[\d.]+ms prompt_tokens=\d+ completion_tokens=4 request_id=client-id-1 "
                     r"remote=127\.0\.0\.1$")
    assert any(pat.match(ln) for ln in acc), acc
    quiet_dir = tmp_path / "off"
    quiet_dir.mkdir()
    s = LoggedServer(quiet_dir, "--no-access-log")
    exercise(s.url)
    assert not [ln for ln in s.lines() if " access " in ln]


def test_generated_ids_and_cut_fields(tmp_path):
    """Ids parley makes: a prefix and 24 hex digits, the last 8 a counter; a
    path longer than the log's field is cut, not dropped."""
    s = LoggedServer(tmp_path, "--log-format", "json")
    msgs = [{"role": "user", "content": "a"}]
    ids, reqs = [], []
    for _ in range(3):
        _, h, body = post(s.url + "/v1/chat/completions",
                          {"model": "mock", "messages": msgs, "max_tokens": 2})
        reqs.append(h["X-Request-Id"])
        ids.append(json.loads(body)["id"])
    assert all(re.fullmatch(r"req-[0-9a-f]{24}", r) for r in reqs), reqs
    assert all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", i) for i in ids), ids
    assert len(set(reqs + ids)) == 6
    counters = [int(x[-8:], 16) for x in reqs]
    assert counters == sorted(counters) and len(set(counters)) == 3
    long_path = "/no/" + "p" * 500
    try:
        urllib.request.urlopen(s.url + long_path, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 404
    acc = [json.loads(ln) for ln in s.lines()]
    acc = [o for o in acc if o.get("msg") == "access"]
    cut = [o for o in acc if o["status"] == 404]
    assert len(cut) == 1 and long_path.startswith(cut[0]["path"])
    assert 100 < len(cut[0]["path"]) < len(long_path)
    assert {o["request_id"] for o in acc if o["status"] == 200} == set(reqs)

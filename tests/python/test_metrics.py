"""GET /metrics read with prometheus_client's own text parser: vLLM V1's
names with a model_name label, parley's names, and counters that move as
requests and jobs complete."""
import http.client
import json
import time
import urllib.parse
import urllib.request

import pytest

parser = pytest.importorskip("prometheus_client.parser")

from conftest import Server  # noqa: E402

VLLM_SAMPLES = [
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:num_preemptions_total", "vllm:request_success_total",
]
VLLM_HISTOGRAMS = [
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
]
PARLEY_SAMPLES = [
    "parley:conversation_pool_requests", "parley:job_questions", "parley:job_reprompts_total",
    "parley:jobs", "parley:engine_steps_total", "parley:engine_step_seconds_total",
    "parley:engine_idle_gap_seconds_total", "parley:requests_in_flight",
    "parley:http_open_connections", "parley:http_connections_accepted_total",
    "parley:http_streams_stalled_aborted_total",
]


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples = {}
    types = {}
    for fam in parser.text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, "duplicate sample %r" % (key,)
            samples[key] = s.value
    return samples, types


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def chat(url, max_tokens, stream=False):
    body = json.dumps({"model": "mock", "max_tokens": max_tokens, "stream": stream,
                       "messages": [{"role": "user", "content": "one two three four"}]})
    req = urllib.request.Request(url + "/v1/chat/completions", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


@pytest.fixture
def server():
    s = Server("--backend", "mock", "--log-level", "warn", "--mock-mode", "echo",
               "--mock-token-delay-ms", "1")
    yield s
    assert s.stop() == 0


def test_every_name_is_present_with_model_name(server):
    samples, types = scrape(server.url)
    names = {k[0] for k in samples}
    for n in VLLM_SAMPLES + PARLEY_SAMPLES:
        assert n in names, n
    for h in VLLM_HISTOGRAMS:
        assert types[h] == "histogram", h
        for sfx in ("_bucket", "_count", "_sum"):
            assert h + sfx in names, h + sfx
    for n in VLLM_SAMPLES:
        labels = [dict(k[1]) for k in samples if k[0] == n]
        assert all(lb.get("model_name") == "mock" for lb in labels), (n, labels)
    for c in ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
              "vllm:prefix_cache_queries", "vllm:num_preemptions"):
        assert types[c] == "counter", c
    for g in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert types[g] == "gauge", g
    reasons = {dict(k[1])["finished_reason"] for k in samples
               if k[0] == "vllm:request_success_total"}
    assert {"stop", "length", "abort"} <= reasons


def test_counters_move_as_requests_complete(server):
    before, _ = scrape(server.url)
    usage = [0, 0]
    reasons = {"stop": 0, "length": 0}
    n = 3
    for i in range(n):
        r = json.loads(chat(server.url, 2 + 4 * i))
        usage[0] += r["usage"]["prompt_tokens"]
        usage[1] += r["usage"]["completion_tokens"]
        reasons[r["choices"][0]["finish_reason"]] += 1
    after, _ = scrape(server.url)

    def delta(name, **lb):
        return value(after, name, model_name="mock", **lb) - \
            value(before, name, model_name="mock", **lb)

    assert delta("vllm:prompt_tokens_total") == usage[0]
    assert delta("vllm:generation_tokens_total") == usage[1]
    for reason, count in reasons.items():
        assert delta("vllm:request_success_total", finished_reason=reason) == count
    for h in VLLM_HISTOGRAMS[:1] + VLLM_HISTOGRAMS[2:]:
        assert delta(h + "_count") == n, h
        assert value(after, h + "_bucket", model_name="mock", le="+Inf") == \
            value(after, h + "_count", model_name="mock")
    # One ITL observation per token after the first.
    assert delta("vllm:inter_token_latency_seconds_count") == usage[1] - n
    assert delta("vllm:e2e_request_latency_seconds_sum") > 0
    # Buckets are cumulative.
    for h in VLLM_HISTOGRAMS:
        bs = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items()
                     if k[0] == h + "_bucket"))
        assert all(a[1] <= b[1] for a, b in zip(bs, bs[1:])), h
    assert value(after, "vllm:num_requests_running", model_name="mock") == 0


def test_client_abort_counts_as_abort():
    server = Server("--backend", "mock", "--log-level", "warn", "--mock-token-delay-ms", "5")
    try:
        client_abort(server)
    finally:
        assert server.stop() == 0


def client_abort(server):
    u = urllib.parse.urlparse(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    body = json.dumps({"model": "mock", "max_tokens": 2000, "stream": True,
                       "messages": [{"role": "user", "content": "go on"}]})
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.fp.readline()
    during, _ = scrape(server.url)
    assert value(during, "parley:requests_in_flight", model_name="mock") == 1
    conn.sock.close()
    conn.close()
    for _ in range(100):
        s, _ = scrape(server.url)
        if value(s, "vllm:request_success_total", model_name="mock",
                 finished_reason="abort") == 1:
            break
        time.sleep(0.05)
    assert value(s, "vllm:request_success_total", model_name="mock", finished_reason="abort") == 1
    assert value(s, "parley:requests_in_flight", model_name="mock") == 0


def job(n_questions, experiment):
    agents = [{"id": "a%d" % i, "model": "mock", "system_prompt": "You are %d." % i}
              for i in range(2)]
    agents.append({"id": "mod", "model": "mock", "system_prompt": "You decide.",
                   "speak_after_within_round": ["a0", "a1"]})
    return {"experiment": experiment, "models": {"mock": {}}, "agents": agents,
            "num_rounds": 2, "max_retries": 1,
            "sampling": {"max_tokens": 64},
            "questions": [{"id": "q%d" % i, "text": "Pick one (%d)." % i,
                           "choices": ["x", "y", "z"], "answer": "B"}
                          for i in range(n_questions)]}


def post_job(url, spec):
    req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(spec).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
        return json.loads(r.read())["id"]


def test_job_metrics_move(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path))
    s = Server("--backend", "mock", "--log-level", "warn", "--mock-mode", "echo")
    try:
        jid = post_job(s.url, job(6, "metrics_job"))
        for _ in range(400):
            with urllib.request.urlopen(s.url + "/v1/jobs/" + jid, timeout=10) as r:
                st = json.loads(r.read())
            if st["state"] == "completed":
                break
            time.sleep(0.05)
        assert st["state"] == "completed"
        m, _ = scrape(s.url)
        assert value(m, "parley:jobs", state="completed") == 1
        assert value(m, "parley:jobs", state="running") == 0
        assert value(m, "parley:job_questions", status="succeeded") == 6
        assert value(m, "parley:job_questions", status="waiting") == 0
        assert value(m, "parley:job_questions_persisted") == 6
        for pool in ("pending", "pre_departure", "in_flight"):
            assert value(m, "parley:conversation_pool_requests", pool=pool) == 0
        for client in ("jobs", "interactive"):
            assert value(m, "parley:model_slots_in_flight", model_name="mock",
                         client=client) == 0
        assert value(m, "parley:model_slots_interactive_reserve", model_name="mock") >= 0
        # 6 questions x 2 rounds x 3 agents, each finished once (echo passes).
        assert value(m, "vllm:request_success_total", model_name="mock",
                     finished_reason="stop") + \
            value(m, "vllm:request_success_total", model_name="mock",
                  finished_reason="length") == 36 + value(m, "parley:job_reprompts_total")
    finally:
        assert s.stop() == 0


def test_upstream_health_and_outstanding():
    up = Server("--backend", "mock", "--log-level", "warn", "--mock-token-delay-ms", "5")
    front = Server("--backend", "parley", "--base-url", up.url + "/v1",
                   "--base-url", "http://127.0.0.1:9/v1", "--served-model-name", "mock",
                   "--log-level", "error")
    try:
        live, dead = up.url + "/v1", "http://127.0.0.1:9/v1"
        u = urllib.parse.urlparse(front.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("POST", "/v1/chat/completions",
                     json.dumps({"model": "mock", "max_tokens": 2000, "stream": True,
                                 "messages": [{"role": "user", "content": "go"}]}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.fp.readline()
        m, types = scrape(front.url)
        assert types["parley:upstream_healthy"] == "gauge"
        assert value(m, "parley:upstream_healthy", model_name="mock", upstream=live) == 1
        assert value(m, "parley:upstream_healthy", model_name="mock", upstream=dead) == 0
        assert value(m, "parley:upstream_outstanding_requests", model_name="mock",
                     upstream=live) == 1
        assert value(m, "parley:upstream_outstanding_requests", model_name="mock",
                     upstream=dead) == 0
        assert value(m, "vllm:num_requests_running", model_name="mock") == 1
        conn.sock.close()
        conn.close()
    finally:
        assert front.stop() == 0
        assert up.stop() == 0

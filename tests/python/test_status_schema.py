"""GET /status against its description in api/openapi.yaml: every field a
real reply carries (mock, engine and remote backends; running, finished and
failed jobs) is described there with its type, and every required field is
present. A field added to /status without documenting it fails here."""
import json
import os
import time
import urllib.request

import pytest

yaml = pytest.importorskip("yaml")

from conftest import ROOT, Server  # noqa: E402

SPEC = yaml.safe_load(open(os.path.join(ROOT, "api", "openapi.yaml")))
TYPES = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "boolean": lambda v: isinstance(v, bool), "string": lambda v: isinstance(v, str),
         "array": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, dict)}


def resolve(schema):
    while "$ref" in schema:
        node = SPEC
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def check(value, schema, path, seen):
    schema = resolve(schema)
    if value is None and schema.get("nullable"):
        seen.add(path)
        return
    t = schema.get("type") or ("object" if "properties" in schema or
                               "additionalProperties" in schema else None)
    if t:
        assert TYPES[t](value), "%s: %r is not %s" % (path, value, t)
    if "enum" in schema:
        assert value in schema["enum"], "%s: %r not in %s" % (path, value, schema["enum"])
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for k in schema.get("required", []):
            assert k in value, "%s: required %r missing" % (path, k)
        for k, v in value.items():
            if k in props:
                sub = path + "." + k
                check(v, props[k], sub, seen)
            elif isinstance(extra, dict):
                sub = path + "{}"
                check(v, extra, sub, seen)
            else:
                raise AssertionError("%s.%s is not described in api/openapi.yaml" % (path, k))
            seen.add(sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check(v, schema.get("items", {}), path + "[]", seen)


def status(url):
    with urllib.request.urlopen(url + "/status", timeout=30) as r:
        return json.loads(r.read())


def post_job(url, n, retries=1, experiment="schema"):
    agents = [{"id": "a%d" % i, "model": "mock", "system_prompt": "You are %d." % i}
              for i in range(2)]
    agents.append({"id": "mod", "model": "mock", "system_prompt": "decide",
                   "speak_after_within_round": ["a0", "a1"]})
    spec = {"experiment": experiment, "models": {"mock": {}}, "agents": agents,
            "num_rounds": 2, "max_retries": retries, "sampling": {"max_tokens": 32},
            "questions": [{"id": "q%d" % i, "text": "Pick %d" % i, "choices": ["x", "y"],
                           "answer": "A"} for i in range(n)]}
    req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(spec).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


def wait_done(url, jid):
    for _ in range(600):
        with urllib.request.urlopen(url + "/v1/jobs/" + jid, timeout=10) as r:
            if json.loads(r.read())["state"] not in ("running", "starting"):
                return
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def test_status_is_described(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path))
    status_schema = SPEC["paths"]["/status"]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"]
    seen = set()
    up = Server("--backend", "mock", "--log-level", "warn", "--mock-mode", "echo",
                "--mock-token-delay-ms", "20", "--mock-capacity", "4")
    front = None
    try:
        # a running job: pools with entries
        jid = post_job(up.url, 12, experiment="running")
        time.sleep(0.3)
        st = status(up.url)
        assert st["jobs"] and st["jobs"][0]["pools"]["first"]["pending"]
        check(st, status_schema, "status", seen)
        wait_done(up.url, jid)
        # finished jobs, one of them failed (random words fail validation)
        front = Server("--backend", "parley", "--base-url", up.url + "/v1",
                       "--base-url", "http://127.0.0.1:9/v1", "--served-model-name", "mock",
                       "--log-level", "error")
        st = status(up.url)
        assert st["finished_jobs"][0]["state"] == "completed"
        check(st, status_schema, "status", seen)
        st = status(front.url)
        assert st["models"]["mock"]["replicas"]
        # the mock upstream enforces both probes; the down replica was not probed
        reps = st["models"]["mock"]["replicas"]
        assert [r["constraints"]["regex"] for r in reps] == ["enforced", "unknown"], reps
        check(st, status_schema, "status", seen)
    finally:
        if front:
            assert front.stop() == 0
        assert up.stop() == 0
    rnd = Server("--backend", "mock", "--log-level", "warn")
    try:
        wait_done(rnd.url, post_job(rnd.url, 2, retries=0, experiment="failing"))
        st = status(rnd.url)
        assert st["finished_jobs"][0]["recent_failures"]
        check(st, status_schema, "status", seen)
    finally:
        assert rnd.stop() == 0
    for k in ("status.models", "status.jobs", "status.finished_jobs",
              "status.models{}.requests", "status.models{}.replicas",
              "status.models{}.admission",
              "status.models{}.replicas[].constraints",
              "status.models{}.replicas[].constraints.notes",
              "status.jobs[].pools", "status.finished_jobs[].recent_failures"):
        assert k in seen, k


def test_engine_status_is_described():
    model = os.environ.get("PARLEY_MODEL") or os.path.expanduser(
        "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        pytest.skip("no model file (scripts/fetch_model.sh)")
    s = Server("--backend", "cpu", "--model", model, "--log-level", "warn", "--threads", "1",
               "--kv-cache-mb", "64", "--max-model-len", "512")
    try:
        body = json.dumps({"model": s.url and json.loads(urllib.request.urlopen(
            s.url + "/v1/models", timeout=30).read())["data"][0]["id"],
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        req = urllib.request.Request(s.url + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=120).read()
        st = status(s.url)
        schema = SPEC["components"]["schemas"]["Status"]
        seen = set()
        check(st, schema, "status", seen)
        assert "status.models{}.timing" in seen and "status.models{}.kv" in seen
        # issue 41: capacity and why: the KV rule's figures
        adm = next(iter(st["models"].values()))["admission"]
        assert adm["rule"] == "kv" and adm["blocks_total"] == adm["blocks_free"] > 0, adm
        assert adm["blocks_reserved"] == 0 and adm["reply_tokens_estimate"] == 3, adm
        assert adm["capacity"] == min(adm["upper_bound"], adm["fits"]), adm
    finally:
        assert s.stop() == 0

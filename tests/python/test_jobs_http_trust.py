"""The jobs API, as a researcher relies on it (issue 35): accuracy in
every status (GET /v1/jobs/{id}, the job_completed event, /status); no key
of a job spec ignored (a 400 naming its path); a model definition applied
or refused; an experiment's spec changed between runs refused with the
differing keys, resumed only on purpose (?resume_changed=true)."""
import json
import urllib.error
import urllib.request

import pytest

from conftest import Server


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    s = Server("--backend", "mock", "--mock-mode", "echo", "--served-model-name", "m",
               "--mock-token-delay-ms", "0", "--log-level", "warn")
    yield s
    assert s.stop() == 0


def call(url, path, body=None, method=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def spec(experiment, persona="Be brief.", rounds=1, **extra):
    # The echo mock repeats the answer format, whose last line is
    # "Answer: C": answer C is right, A wrong.
    s = {"experiment": experiment, "models": {"m": {}},
         "agents": [{"id": "a", "system_prompt": persona},
                    {"id": "mod", "role_specific_config": {"speak_after_within_round": ["a"]}}],
         "num_rounds": rounds, "sampling": {"max_tokens": 1024},
         "questions": [{"id": "q1", "text": "One?", "choices": ["x", "y", "z"], "answer": "C"},
                       {"id": "q2", "text": "Two?", "choices": ["x", "y", "z"], "answer": "A"},
                       {"id": "q3", "text": "Three?", "choices": ["x", "y", "z"], "answer": "C",
                        "category": "geo"}]}
    s.update(extra)
    return s


def follow(url, jid):
    """The job's events to the end: (name, data) pairs."""
    events, name = [], None
    with urllib.request.urlopen(url + "/v1/jobs/%s/events" % jid, timeout=60) as r:
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


def submit(url, body, query=""):
    st, text = call(url, "/v1/jobs" + query, body)
    assert st == 201, text
    return json.loads(text)["id"]


def test_accuracy_in_every_status(server):
    jid = submit(server.url, spec("acc"))
    events = follow(server.url, jid)
    assert events[-1][0] == "job_completed"
    want = {"correct": 2, "answered": 3}
    acc = events[-1][1]["status"]["accuracy"]
    assert {k: acc[k] for k in want} == want and abs(acc["ratio"] - 2 / 3) < 1e-9, acc
    st, text = call(server.url, "/v1/jobs/" + jid)
    acc = json.loads(text)["accuracy"]
    assert {k: acc[k] for k in want} == want, acc
    assert acc["this_run"]["answered"] == 3
    st, text = call(server.url, "/status")
    fin = [j for j in json.loads(text)["finished_jobs"] if j["id"] == jid]
    assert fin and {k: fin[0]["accuracy"][k] for k in want} == want, fin
    # A resubmission skips everything: the experiment's accuracy still counts.
    jid2 = submit(server.url, spec("acc"))
    done = follow(server.url, jid2)[-1][1]["status"]
    assert done["progress"]["skipped"] == 3
    assert {k: done["accuracy"][k] for k in want} == want, done["accuracy"]
    assert done["accuracy"]["this_run"]["answered"] == 0


@pytest.mark.parametrize("body_edit, path", [
    (lambda s: s["agents"][1]["role_specific_config"].update(
        {"speak_afterr_within_round": ["a"]}), "agents[1].role_specific_config.speak_afterr_within_round"),
    (lambda s: s["agents"][0].update({"visible_to": ["nobody"]}), "agents[0].visible_to[0]"),
    (lambda s: s["sampling"].update({"temprature": 0.2}), "sampling.temprature"),
    (lambda s: s["models"]["m"].update({"mock_mode": "random"}), "models.m.mock_mode"),
    (lambda s: s["models"]["m"].update({"vllm_config": {"dtype": "bf16"}}),
     "models.m.vllm_config.dtype"),
    (lambda s: s["models"]["m"].update({"backend": "cuda"}), "models.m.backend"),
])
def test_no_key_is_ignored(server, body_edit, path):
    body = spec("keys")
    body_edit(body)
    st, text = call(server.url, "/v1/jobs", body)
    assert st == 400, text
    err = json.loads(text)["error"]
    assert err["code"] == "invalid_job_spec"
    assert path in [p["path"] for p in err["problems"]], err


def test_model_definition_applied(server):
    body = spec("caps", models={"m": {"backend": "mock", "vllm_config":
                                      {"max_num_seqs_upper_bound": 1}}})
    jid = submit(server.url, body)
    events = follow(server.url, jid)
    caps = [m["capacity"] for m in events[0][1]["pools"]["models"]]
    assert caps == [1], "the upper bound is the job's cap on the model: %s" % caps
    assert events[-1][1]["status"]["state"] == "completed"


def test_changed_spec_refused_then_resumed_on_purpose(server):
    jid = submit(server.url, spec("chg"))
    first = follow(server.url, jid)[-1][1]["status"]
    assert first["state"] == "completed"
    fp = first["spec_fingerprint"]
    jid = submit(server.url, spec("chg", persona="Be verbose.", rounds=2))
    st = follow(server.url, jid)[-1][1]["status"]
    assert st["state"] == "error" and st["error_code"] == "spec_changed", st
    assert "num_rounds (1 -> 2)" in st["error"] and "agents.a.system_prompt" in st["error"], st
    st, text = call(server.url, "/v1/jobs?resume_changed=maybe", spec("chg"))
    assert st == 400 and "resume_changed" in text
    jid = submit(server.url, spec("chg", persona="Be verbose.", rounds=2),
                 "?resume_changed=true")
    st = follow(server.url, jid)[-1][1]["status"]
    assert st["state"] == "completed" and st["spec_fingerprint"] != fp, st


def test_reasoning_is_not_the_answer(tmp_path, monkeypatch):
    """A reasoning model's <think> block (Qwen3, read by the mock as its
    qwen3 format) stays out of the answer, the message others see and the
    transcript's content; the transcript keeps it as the attempt's
    reasoning."""
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    s = Server("--backend", "mock", "--mock-mode", "echo", "--mock-reasoning", "qwen3",
               "--served-model-name", "m", "--mock-token-delay-ms", "0", "--log-level", "warn")
    try:
        body = spec("think", rounds=2)
        body["questions"] = [{"id": "q1", "text": "<think> Answer: A, or Answer: B? </think> One?",
                              "choices": ["x", "y", "z"], "answer": "C"}]
        events = follow(s.url, submit(s.url, body))
        msgs = [d for n, d in events if n == "message_completed"]
        assert len(msgs) == 4, events
        for m in msgs:
            assert "think>" not in m["content"] and "or Answer" not in m["content"], m
            assert m["answer"] == "C"
        with open(tmp_path / "jobs" / "think" / "transcripts" / "q1.json") as f:
            t = json.load(f)
        first = [a for a in t["attempts"] if a["round"] == 0 and a["agent_id"] == "a"][0]
        assert first["reasoning"] == " Answer: A, or Answer: B? ", first
        assert "think>" not in first["content"]
    finally:
        assert s.stop() == 0

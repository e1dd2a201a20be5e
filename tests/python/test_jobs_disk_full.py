"""A full disk (issue 36.1): a transcript that cannot be written is never
recorded as succeeded; the manifest and the index only name transcripts on
disk; `parley run` exits 3 (the run failed) and says why; a resume once
there is room redoes what was lost; over HTTP the job ends in state error
with error_code write_failed.

Runs on a small tmpfs (mount needs root and a kernel that lets this
container mount: skipped where it cannot)."""
import json
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import Server, parley_bin

NQ = 400


@pytest.fixture
def small_fs(tmp_path):
    d = tmp_path / "fs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % r.stderr.strip())
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def job_spec(experiment):
    return {"experiment": experiment, "models": {"m": {}},
            "agents": [{"id": "a"}, {"id": "b", "speak_after_within_round": ["a"]}],
            "num_rounds": 2, "validation": {"enabled": False},
            "sampling": {"max_tokens": 48},
            "questions": [{"id": "q%03d" % i, "text": "Question %d?" % i} for i in range(NQ)]}


def check_never_claims_missing(exp_dir, experiment):
    """Every question the manifest or the index calls succeeded has its
    transcript on disk, whole. (The index may run ahead of the manifest: it
    is written first, and the next open reconciles them.) Returns the
    questions recorded as succeeded, and the failed ones with their errors."""
    with open(os.path.join(exp_dir, "task_manifest.json")) as f:
        m = json.load(f)
    ok = {q for q, e in m["questions"].items() if e["status"] == "succeeded"}
    failed = {q: e.get("error", "") for q, e in m["questions"].items() if e["status"] == "failed"}
    index = set()
    path = os.path.join(exp_dir, experiment + "_index.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                index.add(json.loads(line)["question_id"])
    for q in ok | index:
        with open(os.path.join(exp_dir, "transcripts", q + ".json")) as f:
            assert json.load(f)["status"] == "succeeded", q
    return ok | index, failed


def test_run_on_a_full_disk_fails_and_resumes(small_fs, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps(job_spec("full")))
    def run(delay_ms, capacity):
        return subprocess.run([parley_bin(), "run", str(job), "--backend", "mock",
                               "--mock-token-delay-ms", delay_ms, "--mock-capacity", capacity,
                               "--output", str(small_fs), "--progress-interval", "0"],
                              capture_output=True, text=True, timeout=300)
    # Replies trickle in (16 at a time), so steps record results until the
    # disk is full.
    r = run("1", "16")
    assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
    assert "No space left on device" in r.stderr, r.stderr[-2000:]
    assert "%d/%d succeeded" % (NQ, NQ) not in r.stderr
    ok, failed = check_never_claims_missing(str(small_fs / "full"), "full")
    assert 0 < len(ok) < NQ, "results were recorded until the disk filled: %d" % len(ok)
    # A question recorded as failed says why (when the manifest itself
    # could still be written); the others stay pending.
    for q, e in failed.items():
        assert "No space left on device" in e, (q, e)
    # Room again: the resume (at full speed) redoes every question not
    # recorded as done.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    r = run("0", "256")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "%d/%d succeeded (%d from an earlier run)" % (NQ, NQ, len(ok)) in r.stderr, \
        r.stderr[-2000:]
    ok, failed = check_never_claims_missing(str(small_fs / "full"), "full")
    assert len(ok) == NQ and not failed


def test_http_job_reports_the_write_error(small_fs, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(small_fs))
    s = Server("--backend", "mock", "--served-model-name", "m", "--mock-token-delay-ms", "0",
               "--log-level", "error")
    try:
        req = urllib.request.Request(s.url + "/v1/jobs", data=json.dumps(job_spec("hfull")).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            jid = json.loads(r.read())["id"]
        for _ in range(3000):
            with urllib.request.urlopen(s.url + "/v1/jobs/" + jid, timeout=30) as r:
                st = json.loads(r.read())
            if st["state"] not in ("starting", "running"):
                break
            time.sleep(0.02)
        assert st["state"] == "error", st["state"]
        assert st["error_code"] == "write_failed", st
        assert "No space left on device" in st["error"], st["error"]
        assert st["progress"]["succeeded"] < NQ
        check_never_claims_missing(str(small_fs / "hfull"), "hfull")
    finally:
        assert s.stop() == 0

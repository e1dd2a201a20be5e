"""One experiment, several `parley run` processes (issue 35.4): questions
are claimed under the experiment's lock, so each is generated once and
every index line describes the transcript it names, even when processes
are killed (SIGKILL) at random points and others take their claims over.

Real processes, real kills; the mock backend in random mode, so two
processes generating the same question would write different transcripts."""
import glob
import json
import os
import random
import signal
import subprocess
import time

from conftest import parley_bin

NQ = 200


def write_job(path, experiment):
    with open(path, "w") as f:
        f.write("experiment: %s\nmodels:\n  m: {backend: mock}\n"
                "agents:\n  - id: a\n  - id: b\n  - id: mod\n"
                "    speak_after_within_round: [a, b]\n"
                "num_rounds: 2\nvalidation: {enabled: false}\nsampling: {max_tokens: 6}\n"
                "questions:\n" % experiment)
        for i in range(NQ):
            f.write("  - {id: q%03d, text: \"Question %d?\", category: c%d}\n" % (i, i, i % 3))


def start(job, out, stats=None):
    args = [parley_bin(), "run", job, "--output", out, "--mock-token-delay-ms", "2",
            "--mock-capacity", "4", "--progress-interval", "0"]
    if stats:
        args += ["--stats", stats]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def check_consistent(exp_dir, experiment):
    """Index lines unique, each naming a transcript on disk that it
    describes; every transcript the manifest calls succeeded is there."""
    index = {}
    with open(os.path.join(exp_dir, experiment + "_index.jsonl")) as f:
        for line in f:
            if not line.endswith("\n"):
                break                   # a torn last line, cut on the next open
            o = json.loads(line)
            assert o["question_id"] not in index, "indexed twice: %s" % o["question_id"]
            index[o["question_id"]] = o
    for qid, o in index.items():
        with open(os.path.join(exp_dir, o["transcript"])) as f:
            t = json.load(f)
        assert t["status"] == "succeeded"
        assert t["run_id"] == o["run_id"], (qid, t["run_id"], o["run_id"])
        assert t["spec_fingerprint"] == o["spec_fingerprint"]
        for k, v in t["summary"].items():
            assert o[k] == v, (qid, k, o[k], v)
        assert o["metadata"] == {"category": "c%d" % (int(qid[1:]) % 3)}
    with open(os.path.join(exp_dir, "task_manifest.json")) as f:
        m = json.load(f)
    for qid, e in m["questions"].items():
        if e["status"] == "succeeded":
            assert os.path.exists(os.path.join(exp_dir, "transcripts", qid + ".json")), qid
    return index, m


def test_processes_share_an_experiment_under_random_kills(tmp_path):
    seed = int(os.environ.get("PARLEY_TEST_SEED", time.time()))
    rng = random.Random(seed)
    job, out = str(tmp_path / "job.yaml"), str(tmp_path / "out")
    write_job(job, "mp")
    exp = os.path.join(out, "mp")
    kills, index = 0, {}
    # Kill phases: 2-4 processes, then SIGKILL some or all of them at random
    # points (one process alone needs ~10 s here, so the kills land
    # mid-run); the survivors take the dead ones' claims over.
    for phase in range(5):
        procs = [start(job, out) for _ in range(rng.randint(2, 4))]
        time.sleep(rng.uniform(0.2, 2.0))
        for p in rng.sample(procs, rng.randint(1, len(procs))):
            time.sleep(rng.uniform(0, 0.3))
            p.send_signal(signal.SIGKILL)
            kills += 1
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode in (0, -signal.SIGKILL), (seed, p.returncode, err)
        index, m = check_consistent(exp, "mp")
        if len(index) == NQ:
            break
    # Then to the end, without kills.
    procs = [start(job, out) for _ in range(rng.randint(2, 3))]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, (seed, err)
    index, m = check_consistent(exp, "mp")
    assert kills > 0
    assert len(index) == NQ, "every question done: %d (seed %d)" % (len(index), seed)
    assert m["counts"]["succeeded"] == NQ
    assert sorted(os.listdir(os.path.join(exp, "transcripts"))) == \
        sorted("q%03d.json" % i for i in range(NQ)), "no temp or staged file left behind"
    assert os.listdir(os.path.join(exp, ".claims")) == [], "every claimer ended or was swept"


def test_each_question_is_generated_once(tmp_path):
    job, out = str(tmp_path / "job.yaml"), str(tmp_path / "out")
    write_job(job, "once")
    stats = [str(tmp_path / ("s%d.json" % i)) for i in range(3)]
    procs = [start(job, out, s) for s in stats]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    here = [json.load(open(s))["conversations_here"] for s in stats]
    assert sum(here) == NQ, "generated once in all: %s" % here
    assert sum(1 for h in here if h > 0) >= 2, "the work was shared: %s" % here
    index, _ = check_consistent(os.path.join(out, "once"), "once")
    assert len(index) == NQ
    runs = {o["run_id"] for o in index.values()}
    assert len(runs) == sum(1 for h in here if h > 0)
    assert not glob.glob(os.path.join(out, "once", "transcripts", "*.tmp.*"))

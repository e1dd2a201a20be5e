"""A job's memory against questions done: one job of N one-token questions
(one agent, one round) on the mock backend through POST /v1/jobs; RSS is
sampled with the job's progress every 0.2 s. Prints the idle RSS, the RSS
after the submission, the peak while it runs, the RSS at the end, and the
slope of RSS against questions done (succeeded + failed) after the first
10% (KiB per 1,000 questions: ~0 when finished questions are released). Not a test.

    python bench/job_rss.py PARLEY_BIN [N ...]
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def run(binary, n):
    d = tempfile.mkdtemp(prefix="job_rss.")
    p = subprocess.Popen([binary, "serve", "--backend", "mock", "--port", "0",
                          "--log-level", "warn", "--no-access-log", "--jobs-dir", d],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split()[-1].rsplit(":", 1)[1])

    def req(method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request(method, path, body=json.dumps(body) if body else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    spec = {"experiment": "rss", "models": {"mock": {}},
            "agents": [{"id": "a", "model": "mock", "max_tokens": 1}], "num_rounds": 1,
            "questions": [{"id": "q%d" % i, "text": "Question %d?" % i,
                           "choices": ["x", "y"], "answer": "A"} for i in range(n)]}
    time.sleep(0.3)
    idle = rss_kib(p.pid)
    t0 = time.time()
    st, b = req("POST", "/v1/jobs", spec)
    assert st == 201, b
    jid = json.loads(b)["id"]
    submitted = rss_kib(p.pid)
    samples = []                       # (questions done, rss)
    while True:
        st, b = req("GET", "/v1/jobs/" + jid)
        j = json.loads(b)
        pr = j["progress"]
        samples.append((pr["succeeded"] + pr["failed"], rss_kib(p.pid)))
        if j["state"] not in ("running", "starting"):
            break
        time.sleep(0.2)
    dt = time.time() - t0
    end = rss_kib(p.pid)
    p.send_signal(signal.SIGTERM)
    p.wait()
    subprocess.run(["rm", "-rf", d])
    peak = max(r for _, r in samples)
    late = [(q, r) for q, r in samples if q >= n // 10]
    slope = 0.0
    if len(late) >= 2 and late[-1][0] > late[0][0]:
        # least squares of RSS on questions done
        mq = sum(q for q, _ in late) / len(late)
        mr = sum(r for _, r in late) / len(late)
        var = sum((q - mq) ** 2 for q, _ in late)
        if var > 0:
            slope = sum((q - mq) * (r - mr) for q, r in late) / var * 1000
    print("%s N=%d: %.1f s; RSS MiB idle %.1f, submitted %.1f, peak %.1f, end %.1f; "
          "peak - idle %.2f KiB/question; slope after 10%% %.0f KiB per 1k done "
          "(load %.1f)" % (binary, n, dt, idle / 1024, submitted / 1024, peak / 1024,
                            end / 1024, (peak - idle) / n, slope, os.getloadavg()[0]))


if __name__ == "__main__":
    for arg in sys.argv[2:] or ["10000"]:
        run(sys.argv[1], int(arg))

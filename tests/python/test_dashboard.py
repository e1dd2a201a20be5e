"""GET /dashboard in a real browser: headless Chromium (Debian's chromium)
loads the page from a server running a mock job; after its JavaScript has
polled /status, the DOM must show the model, the job's progress, the
three pools' counts, a failed conversation's error and an unhealthy
upstream."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from conftest import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need_browser():
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: scripts/setup.sh --test installs it")
        pytest.skip("chromium is not installed (scripts/setup.sh --test)")


def browser(args, timeout=90):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-dev-shm-usage", "--user-data-dir=" + os.environ["PARLEY_CHROME_DIR"],
           *args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout,
                       text=True)
    assert r.returncode == 0, r.returncode
    return r.stdout


def dump_dom(url, budget_ms=3000):
    return browser(["--virtual-time-budget=%d" % budget_ms, "--dump-dom", url])


@pytest.fixture(autouse=True)
def chrome_dir(tmp_path, monkeypatch):
    need_browser()
    monkeypatch.setenv("PARLEY_CHROME_DIR", str(tmp_path / "chrome"))


def post_job(url, spec):
    req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(spec).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
        return json.loads(r.read())["id"]


def debate(experiment, n, rounds=3, retries=1):
    agents = [{"id": "spkr_%03d" % i, "model": "mock", "system_prompt": "You are %d." % i}
              for i in range(3)]
    agents.append({"id": "mod_001", "model": "mock", "system_prompt": "You decide.",
                   "speak_after_within_round": ["spkr_000", "spkr_001", "spkr_002"]})
    return {"experiment": experiment, "models": {"mock": {}}, "agents": agents,
            "num_rounds": rounds, "max_retries": retries, "sampling": {"max_tokens": 64},
            "questions": [{"id": "q%03d" % i, "text": "Pick one (%d)." % i,
                           "choices": ["x", "y", "z"], "answer": "B"} for i in range(n)]}


def text_of(dom, cls):
    return [re.sub(r"<[^>]+>", "", m) for m in
            re.findall(r'class="%s"[^>]*>(.*?)</span>' % re.escape(cls), dom)]


def test_dashboard_shows_model_pools_and_job_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    s = Server("--backend", "mock", "--log-level", "warn", "--mock-mode", "echo",
               "--mock-token-delay-ms", "40", "--mock-capacity", "24")
    try:
        with urllib.request.urlopen(s.url + "/dashboard", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/html")
            raw = r.read().decode()
        # Before JavaScript runs the page names no model and no job.
        assert 'class="model-name">mock' not in raw and 'data-job="' not in raw
        assert "http://" not in raw and "https://" not in raw, "no external resource"
        jid = post_job(s.url, debate("dash_live", 60))
        time.sleep(0.5)
        dom = dump_dom(s.url + "/dashboard")
        assert text_of(dom, "model-name") == ["mock"]
        assert re.findall(r'class="why capacity-why" title="slots \(24\)">([^<]*)</span>', dom) \
            == ["slots (24)"], \
            "the capacity's why: the mock reports no KV"
        job = dom[dom.index('data-job="%s"' % jid):]
        done, total = map(int, re.search(r'class="job-progress">(\d+) / (\d+)<', job).groups())
        assert total == 60 and 0 <= done < 60, (done, total)
        counts = {k: int(v) for k, v in
                  re.findall(r'data-status="(\w+)">\w[\w-]* <i>(\d+)</i>', job)}
        assert sum(counts[k] for k in ("succeeded", "failed", "cancelled", "active",
                                       "waiting")) == 60, counts
        assert counts["active"] > 0
        pools = {k: int(v) for k, v in re.findall(
            r'data-pool="(\w+)"><h4>[^<]*<span class="count">(\d+)</span>', job)}
        assert set(pools) == {"pending", "pre_departure", "in_flight"}
        assert 0 < pools["in_flight"] <= 24, pools          # bounded by the capacity
        assert pools["pending"] + pools["pre_departure"] + pools["in_flight"] > 0
        assert re.search(r"Progress: \d+/60 conversations \| In-Flight: %d/24 \| Pre-Dep: %d"
                         r" \| Pending: %d" % (pools["in_flight"], pools["pre_departure"],
                                               pools["pending"]), job)
        # The first entries are listed like seed 000's live view.
        assert re.search(r"<li>\[q\d{3}\] r\d spkr_\d{3} \(mock\)</li>", job)
        # Throughput is a number and the chart is drawn.
        assert re.search(r'class="throughput">[\d.]+<', dom)
        assert "<canvas" in dom
        # A screenshot for the README (docs/dashboard.png), refreshed on demand.
        if os.environ.get("PARLEY_SCREENSHOT"):
            browser(["--hide-scrollbars", "--window-size=1280,1000",
                     "--virtual-time-budget=6000",
                     "--screenshot=" + os.environ["PARLEY_SCREENSHOT"], s.url + "/dashboard"])
    finally:
        assert s.stop() == 0


def test_dashboard_shows_failures_and_unhealthy_upstreams(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    # Random words never carry a valid "Answer:" line: every conversation
    # fails once its re-prompts are spent.
    up = Server("--backend", "mock", "--log-level", "warn")
    front = Server("--backend", "parley", "--base-url", up.url + "/v1",
                   "--base-url", "http://127.0.0.1:9/v1", "--served-model-name", "mock",
                   "--log-level", "error")
    try:
        jid = post_job(front.url, debate("dash_fail", 2, rounds=1, retries=0))
        for _ in range(200):
            with urllib.request.urlopen(front.url + "/v1/jobs/" + jid, timeout=10) as r:
                if json.loads(r.read())["state"] != "running":
                    break
            time.sleep(0.05)
        dom = dump_dom(front.url + "/dashboard", 2000)
        fin = dom[dom.index('id="finished-jobs"'):]
        assert 'data-job="%s"' % jid in fin
        errs = re.findall(r"<li>\[(q\d{3})\] ([^<]+)</li>", fin)
        assert {q for q, _ in errs} == {"q000", "q001"}, errs
        assert all(e.strip() for _, e in errs)
        assert re.search(r'data-status="failed">failed <i>2</i>', fin)
        rows = re.findall(r'<tr class="(up|down)"><td>([^<]+)</td>', dom)
        assert ("down", "http://127.0.0.1:9/v1") in rows and ("up", up.url + "/v1") in rows
        assert "1 upstream down" in dom
    finally:
        assert front.stop() == 0
        assert up.stop() == 0


def test_dashboard_shows_each_jobs_accuracy(tmp_path, monkeypatch):
    """The echo mock repeats the answer format, whose last line is
    "Answer: C": a question whose answer is C is right, one whose answer is
    A is wrong. The finished job's card shows 1/2, as its status says."""
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    s = Server("--backend", "mock", "--log-level", "warn", "--mock-mode", "echo")
    try:
        spec = debate("dash_acc", 2, rounds=1)
        spec["questions"][0]["answer"] = "C"
        spec["questions"][1]["answer"] = "A"
        jid = post_job(s.url, spec)
        for _ in range(400):
            with urllib.request.urlopen(s.url + "/v1/jobs/" + jid, timeout=10) as r:
                st = json.loads(r.read())
            if st["state"] != "running" and st["state"] != "starting":
                break
            time.sleep(0.05)
        assert st["state"] == "completed", st
        acc = st["accuracy"]
        assert (acc["correct"], acc["answered"], acc["ratio"]) == (1, 2, 0.5), acc
        assert acc["this_run"]["answered"] == 2, acc
        dom = dump_dom(s.url + "/dashboard", 2000)
        card = dom[dom.index('data-job="%s"' % jid):]
        assert re.search(r'data-accuracy="[^"]*"[^>]*>accuracy <i>1/2 \(50%\)</i>', card), card[:2000]
    finally:
        assert s.stop() == 0


def status_requests(b):
    """Authorization headers of the page's GET /status requests so far."""
    out = [e["params"]["request"]["headers"].get("Authorization")
           for e in b.events if e.get("method") == "Network.requestWillBeSent"
           and e["params"]["request"]["url"].endswith("/status")]
    b.events.clear()
    return out


def server_takes_api_key():
    r = __import__("subprocess").run([os.environ.get("PARLEY_BIN", "build/parley"), "serve",
                                      "--help"], capture_output=True, text=True)
    return "--api-key-file" in r.stdout      # the server-side key options


def test_dashboard_api_key_is_typed_once_and_sent_as_bearer(tmp_path):
    from cdp import Browser
    key = "sk-dash-123"
    auth = server_takes_api_key()
    args = ["--backend", "mock", "--log-level", "warn"] + (["--api-key", key] if auth else [])
    s = Server(*args)
    b = Browser(CHROMIUM, str(tmp_path / "cdp"))
    try:
        b.page("Network.enable")
        b.page("Page.navigate", {"url": s.url + "/dashboard"})
        b.wait_js("location.pathname === '/dashboard' && !!document.getElementById('key')")
        if auth:
            # No key yet: the page asks for one and shows no data.
            b.wait_js("document.getElementById('auth').className === 'shown'")
            assert "API key" in b.js("document.getElementById('status-line').textContent")
            b.js("document.getElementById('key').value = 'wrong';"
                 "document.getElementById('auth').requestSubmit()")
            b.wait_js("document.getElementById('auth-msg').textContent.includes('refused')")
            assert b.js("document.querySelector('.model-name')") is None
        b.js("document.getElementById('key').value = '%s';"
             "document.getElementById('auth').requestSubmit()" % key)
        assert b.wait_js("document.querySelector('.model-name') && "
                         "document.querySelector('.model-name').textContent") == "mock"
        assert b.js("sessionStorage.getItem('parley_api_key')") == key
        assert b.js("document.getElementById('key').value") == "", "the field is cleared"
        b.pump(0.3)
        status_requests(b)                  # from here on, every poll carries the key
        b.pump(1.5)
        sent = status_requests(b)
        assert sent and all(h == "Bearer " + key for h in sent), sent
        # Typed once: a reload of the tab keeps using it, without asking.
        b.page("Page.reload")
        assert b.wait_js("document.querySelector('.model-name') && "
                         "document.querySelector('.model-name').textContent") == "mock"
        assert b.js("document.getElementById('auth').className") == ""
        status_requests(b)
        b.pump(1.5)
        sent = status_requests(b)
        assert sent and all(h == "Bearer " + key for h in sent), sent
        # Forget: no header any more (and, with auth on, the form is back).
        b.js("document.getElementById('forget').click()")
        status_requests(b)
        b.pump(1.5)
        assert b.js("sessionStorage.getItem('parley_api_key')") is None
        sent = status_requests(b)
        assert sent and all(h is None for h in sent), sent
        if auth:
            b.wait_js("document.getElementById('auth').className === 'shown'")
    finally:
        b.close()
        assert s.stop() == 0


def test_dashboard_tiles_hold_numbers_at_1280px(tmp_path):
    """On an engine (capacity by KV blocks) at 1280 px: every tile's value
    is a number (the capacity's reason is its hover text and a short line
    below it, not a sentence in a number cell), and no tile overflows."""
    from cdp import Browser
    from conftest import MODEL_PATH
    s = Server("--model", MODEL_PATH, "--log-level", "warn", "--kv-cache-mb", "64")
    b = Browser(CHROMIUM, str(tmp_path / "cdp"))
    try:
        b.page("Page.navigate", {"url": s.url + "/dashboard"})
        b.wait_js("!!document.querySelector('.model .capacity')")
        assert b.js("window.innerWidth") == 1280
        cells = b.js("[...document.querySelectorAll('.model .kv > div')].map(d => ({"
                     "label: d.firstChild.textContent, value: d.querySelector('b').textContent,"
                     "over: d.scrollWidth > d.clientWidth || "
                     "[...d.children].some(c => c.scrollWidth > c.clientWidth)}))")
        assert cells, "no tiles"
        for c in cells:
            assert re.fullmatch(r"—|-?\d+(\.\d+)?( ms|%)?|\d+ / \d+", c["value"]), c
            assert not c["over"], c
        cap = b.js("(() => { const e = document.querySelector('.model .capacity');"
                   "return {n: e.textContent, title: e.parentElement.title,"
                   "line: e.parentElement.querySelector('.capacity-why').textContent}; })()")
        assert re.fullmatch(r"\d+", cap["n"]) and int(cap["n"]) >= 1, cap
        assert re.search(r"\d+ free − \d+ promised of \d+ blocks .* a request", cap["title"]), cap
        assert cap["line"].startswith("KV: "), cap
    finally:
        b.close()
        assert s.stop() == 0

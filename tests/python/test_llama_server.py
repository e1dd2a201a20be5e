"""Constraints through a real llama-server upstream (backend: llamacpp), the
llama.cpp that bench/build_llama_server.sh builds from llama-cpp-python's
source distribution, serving the default SmolLM2 model:

- the start-up probes find both families enforced (/status);
- a regex, a choice list and a JSON schema sent to parley's
  /v1/chat/completions come back matching (parley writes the regex as a GBNF
  grammar, the schema as llama-server's json_schema);
- README's debate example (examples/debate.yaml, validation.mode:
  constrained) on 4 questions: every conversation succeeds and every reply
  is valid on its first attempt (no re-prompt).

The build takes 15-25 minutes on 2 cores and the debate minutes more, so
the module runs only when PARLEY_LLAMA_SERVER names the binary (CI does not
set it, even on a machine where a build lies around):

  PARLEY_LLAMA_SERVER=$(bench/build_llama_server.sh) \
    .venv/bin/python -m pytest -q tests/python/test_llama_server.py

PARLEY_LLAMA_TIMEOUT (seconds, default 3600) bounds each step: the debate
took 1,769 s with the machine's 2 cores at load 16."""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import MODEL_PATH, ROOT, Server, parley_bin

LLAMA_SERVER = os.environ.get("PARLEY_LLAMA_SERVER", "")
if not os.path.exists(LLAMA_SERVER):
    pytest.skip("no llama-server: set PARLEY_LLAMA_SERVER=$(bench/build_llama_server.sh)",
                allow_module_level=True)
if not os.path.exists(MODEL_PATH):
    pytest.skip("no model file (scripts/fetch_model.sh)", allow_module_level=True)

openai = pytest.importorskip("openai")
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ANSWER = re.compile(r"(?:[ -~]{1,400}\n)?Answer: [A-D]")
# seconds for each step (the debate is 48 constrained replies: minutes on a
# quiet machine, much longer on a loaded one)
SLOW = int(os.environ.get("PARLEY_LLAMA_TIMEOUT", "3600"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def llama():
    port = free_port()
    p = subprocess.Popen([LLAMA_SERVER, "-m", MODEL_PATH, "--host", "127.0.0.1", "--port",
                          str(port), "-c", "8192", "-np", "4", "-t", "2", "--no-webui",
                          "--alias", "smollm"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    try:
        for _ in range(600):
            try:
                if get(url + "/health").get("status") == "ok":
                    break
            except OSError:
                pass
            assert p.poll() is None, "llama-server exited"
            time.sleep(0.2)
        yield url
    finally:
        p.terminate()
        p.wait(timeout=30)


@pytest.fixture(scope="module")
def front(llama):
    s = Server("--backend", "llamacpp", "--base-url", llama + "/v1", "--served-model-name",
               "smollm", "--upstream-probe-timeout-ms", "300000", "--log-level", "warn")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(front):
    return openai.OpenAI(base_url=front.url + "/v1", api_key="unused", timeout=SLOW)


def test_probes_find_both_families_enforced(front):
    """On a loaded machine a start-up probe may time out (unknown): the
    health checks probe again, so wait for both."""
    end = time.time() + SLOW
    while True:
        c = get(front.url + "/status")["models"]["smollm"]["replicas"][0]["constraints"]
        if "unknown" not in (c["regex"], c["json_schema"]) or time.time() > end:
            break
        time.sleep(1)
    assert c["regex"] == "enforced" and c["json_schema"] == "enforced", c
    assert c["fields"].startswith("grammar"), c


def test_regex_and_choice_are_enforced(client):
    pattern = r"The capital is [A-Z][a-z]{2,12}\."
    r = client.chat.completions.create(
        model="smollm", temperature=0.8, max_tokens=24, seed=3,
        messages=[{"role": "user", "content": "Tell me a story about a dragon."}],
        extra_body={"guided_regex": pattern})
    assert re.fullmatch(pattern, r.choices[0].message.content), r.choices[0].message.content
    r = client.chat.completions.create(
        model="smollm", temperature=0.8, max_tokens=8,
        messages=[{"role": "user", "content": "Write a poem."}],
        extra_body={"structured_outputs": {"choice": ["left", "right"]}})
    assert r.choices[0].message.content in ("left", "right")


def test_json_schema_is_enforced(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "rank": {"type": "integer"}},
              "required": ["city", "rank"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="smollm", temperature=0.8, max_tokens=80,
        messages=[{"role": "user", "content": "Say hi."}],
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_debate_example_valid_on_the_first_attempt(llama, tmp_path):
    spec = yaml.safe_load(open(os.path.join(ROOT, "examples", "debate.yaml")))
    assert spec["validation"]["mode"] == "constrained"
    spec["model_definitions"]["smollm"] = {"backend": "llamacpp", "base_url": llama + "/v1",
                                           "vllm_config": {"max_num_seqs_upper_bound": 4}}
    spec["questions"] = spec["questions"][:4]
    job = tmp_path / "debate.yaml"
    job.write_text(yaml.safe_dump(spec, sort_keys=False))
    stats = tmp_path / "stats.json"
    p = subprocess.run([parley_bin(), "run", str(job), "--output", str(tmp_path / "out"),
                        "--stats", str(stats), "--upstream-probe-timeout-ms", "300000"],
                       stderr=subprocess.PIPE, text=True, timeout=SLOW)
    sys.stderr.write(p.stderr[-2000:])
    assert p.returncode == 0, p.stderr[-2000:]
    st = json.loads(stats.read_text())
    assert st["questions"] == 4 and st["succeeded"] == 4 and st["failed"] == 0, st
    assert st["reprompts"] == 0, st
    tdir = tmp_path / "out" / spec["experiment"] / "transcripts"
    replies = 0
    for t in tdir.iterdir():
        for rnd in json.loads(t.read_text())["rounds"]:
            for m in rnd["messages"]:
                assert ANSWER.fullmatch(m["content"]), m["content"]
                replies += 1
    assert replies == 4 * spec["num_rounds"] * len(spec["agent_definitions"])

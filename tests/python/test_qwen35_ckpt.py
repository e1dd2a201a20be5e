"""Prefix caching on the qwen35 hybrid (Gated DeltaNet + gated attention,
tests/fixtures/tiny_qwen35.gguf) through recurrent-state checkpoints
(schedulers/kv_ckpt.h):

- a 20-question, 3-round debate (bench/make_debate_job.py, shared_prefix
  layout, constrained answers, greedy) through `parley run`: with retention
  hints on, at least 85 % of the prompt tokens of rounds 2 and 3 come from
  the cache (the job's stats: cache.round2plus_*); with hints off and no
  periodic checkpoints fewer do (a hit needs a checkpoint: only each
  prompt's end has one, not the round's shared prefix), and with hints off
  but a checkpoint every 4 blocks the figure is reported;
- under a small --kv-cache-mb (few checkpoint slots) checkpoints are
  evicted, prefix hits still resume from the ones left, and every greedy
  reply is the one a server without prefix caching gives (the cold
  computation is the reference).
"""
import json
import os
import subprocess
import sys
import urllib.parse

import pytest

from conftest import ROOT, Server, parley_bin, request

GGUF = os.path.join(ROOT, "tests", "fixtures", "tiny_qwen35.gguf")
WORDS = ("river mountain engine garden signal harbor market lantern window summer "
         "winter paper silver ocean forest bridge castle letter music pencil").split()


def run_debate(tmp_path, name, *flags):
    yaml_path = tmp_path / (name + ".yaml")
    job = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_debate_job.py"),
                          "--questions", "20", "--max-tokens", "450", "--rounds", "3",
                          "--temperature", "0", "--prompt-layout", "shared_prefix",
                          "--max-retries", "0", "--experiment", name],
                         capture_output=True, text=True, timeout=60)
    assert job.returncode == 0, job.stderr
    yaml_path.write_text(job.stdout)
    stats = tmp_path / (name + ".json")
    r = subprocess.run([parley_bin(), "run", str(yaml_path), "--model", GGUF, "--backend", "cpu",
                        "--output", str(tmp_path / "out"), "--stats", str(stats),
                        "--max-model-len", "8192", "--log-level", "warn", *flags],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(stats.read_text())
    assert s["succeeded"] == 20, s
    c = s["cache"]
    assert c["round2plus_prompt_tokens"] > 0
    return c["round2plus_cached_tokens"] / c["round2plus_prompt_tokens"]


def test_debate_rounds_resume_from_checkpoints(tmp_path):
    hinted = run_debate(tmp_path, "hinted")
    unhinted = run_debate(tmp_path, "unhinted", "--kv-eviction", "lru",
                          "--prefix-checkpoint-blocks", "0")
    unhinted_k4 = run_debate(tmp_path, "unhinted_k4", "--kv-eviction", "lru")
    print("round >= 2 prompt tokens from the cache: hints on %.1f %%, hints off %.1f %% "
          "(no periodic checkpoints), hints off with one every 4 blocks %.1f %%"
          % (100 * hinted, 100 * unhinted, 100 * unhinted_k4))
    assert hinted >= 0.85
    assert unhinted < hinted


def complete(s, prompt):
    st, _, data = request(s, "POST", "/v1/completions",
                          {"model": "q", "prompt": prompt, "max_tokens": 6, "temperature": 0},
                          timeout=120)
    assert st == 200, data
    return json.loads(data)["choices"][0]["text"]


def start(*flags):
    s = Server("--model", GGUF, "--served-model-name", "q", "--log-level", "warn",
               "--max-model-len", "512", *flags)
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    return s


def metric(s, name):
    st, _, data = request(s, "GET", "/metrics")
    assert st == 200
    for line in data.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no %s in /metrics" % name)


def test_checkpoint_eviction_under_a_small_cache():
    # 10 prompts of ~200 tokens with a common head, each asked twice, in
    # an order that reuses prefixes after other prompts took slots.
    head = " ".join(WORDS[i * 3 % 20] for i in range(12))
    prompts = [head + " " + " ".join(WORDS[(i * 7 + j * 3) % 20] for j in range(24))
               for i in range(10)]
    order = prompts + prompts[::-1]
    cold = start("--no-prefix-caching")
    try:
        want = [complete(cold, p) for p in order]
    finally:
        assert cold.stop() == 0
    s = start("--kv-cache-mb", "1", "--prefix-checkpoint-blocks", "2")
    try:
        got = [complete(s, p) for p in order]
        st, _, data = request(s, "GET", "/status")
        ck = json.loads(data)["models"]["q"]["kv"]["checkpoints"]
        evictions = metric(s, "parley:kv_checkpoint_evictions_total")
        restores = metric(s, "parley:kv_checkpoint_restores_total")
        used = metric(s, "parley:kv_checkpoints")
    finally:
        assert s.stop() == 0
    print("checkpoints under --kv-cache-mb 1:", ck)
    assert got == want, "a reply resumed from a checkpoint differs from the cold one"
    assert ck["slots"] < 40, ck            # half the budget holds few
    assert evictions > 0 and evictions == ck["evictions"], ck
    assert restores > 0 and restores == ck["restores"], ck
    assert used == ck["used"] <= ck["slots"]

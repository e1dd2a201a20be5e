"""Cache groups on Gemma 3 270M (scripts/fetch_model.sh gemma3; 15 of its 18
layers slide over 512 positions): a long sequence holds only its window's
blocks in the sliding groups (/status kv.groups while it runs), and a prompt
served from the prefix cache after its sliding blocks were released gives
the same bits (the sampled tokens' logprobs and top alternatives) as the
same prompt computed cold on a server without prefix caching."""
import json
import os
import threading
import time
import urllib.request

import pytest

from conftest import Server

GEMMA = os.environ.get("PARLEY_GEMMA_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/gemma-3-270m-q4_k_m.gguf")
BS = 16
WORDS = "the quick brown fox jumps over a lazy dog near an old wooden fence".split()
LONG = " ".join(WORDS[(i * 7) % len(WORDS)] + str(i % 13) for i in range(650))


def model():
    if not os.path.exists(GEMMA):
        if os.environ.get("PARLEY_GEMMA_MODEL"):
            pytest.fail("PARLEY_GEMMA_MODEL=%s is missing" % GEMMA)
        pytest.skip("Gemma 3 270M not found (scripts/fetch_model.sh gemma3)")
    return GEMMA


def start(*extra):
    return Server("--model", model(), "--served-model-name", "g", "--log-level", "warn",
                  "--max-model-len", "4096", "--block-size", str(BS), *extra)


def post(s, body):
    r = urllib.request.Request(s.url + "/v1/completions", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=600))


def kv(s):
    st = json.load(urllib.request.urlopen(s.url + "/status", timeout=30))
    return st["models"]["g"]["kv"]


def groups(s):
    return {g["kind"]: g for g in kv(s)["groups"]}


def test_long_sequence_holds_its_window():
    s = start("--max-num-batched-tokens", "256")
    try:
        g0 = groups(s)
        assert g0["full"]["layers"] == 3 and g0["sliding"]["layers"] == 15
        assert g0["sliding"]["window"] == 512 and kv(s)["layers_per_block"] == 3
        out = {}
        t = threading.Thread(target=lambda: out.update(r=post(s, {
            "model": "g", "prompt": LONG, "max_tokens": 300, "temperature": 0,
            "ignore_eos": True})))
        t.start()
        seen, bound = 0, (511 + BS - 1) // BS + 1 + 256 // BS + 1
        while t.is_alive():
            g = groups(s)
            full, slide = g["full"], g["sliding"]
            if full["used"] * BS > 1200:          # well past the window
                # Each sliding group: the window's blocks, those of one
                # 256-row chunk, and one step in flight.
                assert slide["used"] / slide["groups"] <= bound, g
                seen += full["used"] >= 2 * bound  # the full group keeps on growing
            time.sleep(0.2)
        t.join()
        assert out["r"]["usage"]["completion_tokens"] == 300
        assert seen > 0, "no /status sample while the sequence ran long"
    finally:
        assert s.stop() == 0


def logprobs(s, prompt):
    r = post(s, {"model": "g", "prompt": prompt, "max_tokens": 6, "temperature": 0,
                 "logprobs": 5})
    c = r["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def test_prefix_hit_after_release_is_bit_identical_to_cold():
    prompt = LONG + " And so"
    cold_srv = start("--no-prefix-caching")
    try:
        cold = logprobs(cold_srv, prompt)
    finally:
        assert cold_srv.stop() == 0
    s = start()
    try:
        logprobs(s, LONG + " Then")                # computes and caches the prefix
        hits = kv(s)["prefix_hits"]
        warm = logprobs(s, prompt)
        assert kv(s)["prefix_hits"] - hits >= 1000, "the shared prefix came from the cache"
        assert warm == cold
    finally:
        assert s.stop() == 0

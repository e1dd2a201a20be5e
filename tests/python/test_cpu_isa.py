"""Every CPU kernel path this machine has, end to end (issue 16).

PARLEY_CPU_ISA caps the kernels at a lesser CPU's level, so one machine
runs each path it has: AVX-512 VNNI, AVX-VNNI, AVX2 and the scalar code.
The SIMD paths are bit-identical by construction, so a greedy completion
must give the same tokens and the same logprobs (to the 6 digits the API
prints; the scalar path already differs from AVX2 there, at every one of
the 24 tokens) on each; /status must name the path in use. Both real models:
SmolLM2 (Q4_1) and Gemma 3 270M (Q4_K_M: Q4_K, Q5_0, Q6_K and Q8_0
matrices, sliding-window layers, a prompt longer than its 512 window); and
the tiny gpt-oss with MXFP4 experts and Q8_0 attention (gen_moe.py).
"""
import json
import os
import urllib.request

import pytest

from conftest import MODEL_PATH, Server


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FLAGS = cpu_flags()
HAS_AVX2 = {"avx2", "fma", "f16c"} <= FLAGS
# (cap, the path /status must name, does this CPU have it)
PATHS = [
    ("avx2", "avx2+fma+f16c", HAS_AVX2),
    ("avxvnni", "avxvnni+avx2+fma+f16c", HAS_AVX2 and "avx_vnni" in FLAGS),
    (None, "avx512vnni+avx2+fma+f16c",
     HAS_AVX2 and {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= FLAGS),
]


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


GEMMA = os.environ.get("PARLEY_GEMMA_MODEL") or os.path.expanduser(
    "~/.cache/parley/models/gemma-3-270m-q4_k_m.gguf")


def run(cap, model=MODEL_PATH, repeat=12):
    env = dict(os.environ)
    env.pop("PARLEY_CPU_ISA", None)
    if cap:
        env["PARLEY_CPU_ISA"] = cap
    s = Server("--model", model, "--log-level", "warn", env=env)
    try:
        with urllib.request.urlopen(s.url + "/status", timeout=30) as r:
            status = json.load(r)
        name, st = next(iter(status["models"].items()))
        path = st["cpu_kernels"]
        # A long enough prompt that prefill runs the multi-row kernels.
        prompt = "The history of the printing press begins " * repeat
        out = post(s.url, "/v1/completions", {
            "model": name, "prompt": prompt, "max_tokens": 24,
            "temperature": 0, "logprobs": 1})
        lp = out["choices"][0]["logprobs"]
        return path, lp["tokens"], lp["token_logprobs"]
    finally:
        assert s.stop() == 0


GPTOSS_Q8 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "fixtures", "tiny_gptoss_q8.gguf")


@pytest.mark.parametrize("model", ["smollm2", "gemma3", "gptoss_q8"])
def test_simd_paths_agree_bit_for_bit(model):
    if not HAS_AVX2:
        pytest.skip("no AVX2: only the scalar path exists here")
    path_of = {"smollm2": (MODEL_PATH, 12), "gemma3": (GEMMA, 70), "gptoss_q8": (GPTOSS_Q8, 3)}
    if model == "gemma3" and not os.path.exists(GEMMA):
        if os.environ.get("PARLEY_GEMMA_MODEL"):
            pytest.fail("PARLEY_GEMMA_MODEL=%s is missing" % GEMMA)
        pytest.skip("Gemma 3 270M not found (scripts/fetch_model.sh gemma3)")
    have = [(cap, name) for cap, name, ok in PATHS if ok]
    results = {}
    for cap, name in have:
        path, toks, lps = run(cap, *path_of[model])
        assert path == name, (cap, path)
        results[name] = (toks, lps)
    base_toks, base_lps = results["avx2+fma+f16c"]
    assert len(base_toks) == 24
    for name, (toks, lps) in results.items():
        assert toks == base_toks, name
        assert lps == base_lps, name
    if len(have) < len(PATHS):
        missing = [n for _, n, ok in PATHS if not ok]
        print("paths not on this CPU (not checked here): " + ", ".join(missing))


def test_scalar_path_serves_and_is_named():
    path, toks, lps = run("scalar")
    assert path == "scalar"
    assert len(toks) == 24
    assert all(lp <= 0.0 for lp in lps)

"""Hugging Face checkpoints on parley's engine, against independent references.

Checkpoints are written at test time by tests/fixtures/hf_checkpoints.py with
numpy, the safetensors library's own writer and the tokenizers library; the
same weights as a GGUF with gguf's writer; a float64 numpy forward of the
Hugging Face weights is the arbiter. parley's side is its loaders through
build/tests/hf_tool (logits, tokenization, load errors) and `parley serve`.

- random-weight checkpoints of each supported family: logits equal the GGUF's
  (within 1e-3, f32) and the float64 forward's (within 1e-3), also from bf16
  and f16 files and sharded ones;
- quantised at load (q8_0, q4_0) equal the same weights written as a GGUF of
  that type by gguf (whose quantisers are ggml's);
- FP8 (per tensor, per channel, per block): exact against the float64
  forward of the dequantised weights, and off the bf16 checkpoint's logits by
  no more than the FP8 rounding itself moves the float64 forward;
- the default model's weights written out as a bf16 checkpoint: logits of the
  float64 forward, the GGUF's greedy tokens (a divergence only where the
  GGUF's own top two are within 1 nat), the same tokenization;
- Gemma 3's real 262k SentencePiece vocabulary as tokenizer.json: ids equal
  the tokenizers library's and the GGUF's;
- bad checkpoints: an error naming the file and the tensor or key, no crash;
- the seed's model definition (backend: vllm, model_name, vllm_config, no
  base_url) served by parley's engine from the local Hugging Face cache.
"""
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

from conftest import MODEL_PATH, ROOT, Server, parley_bin  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import hf_checkpoints as hc  # noqa: E402

TOOL = os.path.join(os.path.dirname(parley_bin()), "tests", "hf_tool")
GEMMA = os.path.join(os.path.dirname(MODEL_PATH), "gemma-3-270m-q4_k_m.gguf")
SUPPORTED = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"]


def tool(*args, stdin=None):
    r = subprocess.run([TOOL, *map(str, args)], input=stdin, capture_output=True, text=True,
                       timeout=600)
    return r


def logits(model, ids, wtype="f32"):
    r = tool("logits", model, wtype, stdin=json.dumps([int(i) for i in ids]))
    assert r.returncode == 0, r.stderr
    return np.array(json.loads(r.stdout))


def some_ids(n_vocab, n=48, seed=5):
    return [int(x) for x in np.random.default_rng(seed).integers(0, n_vocab, n)]


@pytest.mark.parametrize("arch", SUPPORTED)
def test_random_checkpoint_equals_gguf_and_float64(arch, tmp_path):
    m = hc.random_checkpoint(arch, tmp_path / "ckpt", "f32")
    hc.write_gguf(m, tmp_path / "m.gguf")
    ids = some_ids(m.config["vocab_size"])
    ref = hc.numpy_logits(m, ids)
    ours = logits(tmp_path / "ckpt", ids)
    gguf = logits(tmp_path / "m.gguf", ids)
    assert np.abs(ours - gguf).max() < 1e-3
    assert np.abs(ours - ref).max() < 1e-3


@pytest.mark.parametrize("arch,config", [
    ("mistral", {"sliding_window": 8}),
    ("gemma3", {"rope_local_base_freq": 20000.0, "sliding_window_pattern": None,
                "layer_types": ["sliding_attention", "full_attention"]}),
    ("gemma3", {"sliding_window_pattern": 2, "rope_scaling": {"rope_type": "linear",
                                                              "factor": 2.0}})])
def test_family_variants(arch, config, tmp_path):
    """Windows shorter than the sequence (Mistral's on every layer, Gemma 3's
    local layers from layer_types), Gemma 3's own local RoPE base and its
    global layers' linear scaling, against the float64 forward."""
    m = hc.random_checkpoint(arch, tmp_path / "ckpt", "f32", config=config)
    if config.get("layer_types"):
        m.config["sliding_window_pattern"] = 2        # what layer_types says, for numpy
    ids = some_ids(m.config["vocab_size"])
    assert np.abs(logits(tmp_path / "ckpt", ids) - hc.numpy_logits(m, ids)).max() < 1e-3


def test_gemma3_multimodal_checkpoint_text_model(tmp_path):
    """Gemma3ForConditionalGeneration: the text model from text_config (with
    transformers' defaults for what it leaves out) and language_model.
    tensors; the vision tower is left aside."""
    m = hc.composite_checkpoint(tmp_path / "ckpt")
    ids = some_ids(m.config["vocab_size"])
    assert np.abs(logits(tmp_path / "ckpt", ids) - hc.numpy_logits(m, ids)).max() < 1e-3


@pytest.mark.parametrize("arch,dtype,shards", [("qwen2", "bf16", 1), ("llama", "f16", 1),
                                               ("mistral", "bf16", 3)])
def test_dtypes_and_shards(arch, dtype, shards, tmp_path):
    m = hc.random_checkpoint(arch, tmp_path / "ckpt", dtype, shards=shards)
    if shards > 1:
        assert os.path.exists(tmp_path / "ckpt" / "model.safetensors.index.json")
    ids = some_ids(m.config["vocab_size"])
    assert np.abs(logits(tmp_path / "ckpt", ids) - hc.numpy_logits(m, ids)).max() < 1e-3


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_quantised_at_load_equals_the_gguf_of_that_type(qtype, tmp_path):
    """A checkpoint quantised at load is the GGUF of that type: the same
    bytes, so the same logits."""
    from gguf import GGMLQuantizationType, quants
    t = GGMLQuantizationType[qtype]
    m = hc.random_checkpoint("llama", tmp_path / "ckpt", "f32")
    hc.write_gguf(m, tmp_path / "f32.gguf")
    r = __import__("gguf").GGUFReader(str(tmp_path / "f32.gguf"))
    w = __import__("gguf").GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    for k, f in r.fields.items():
        if not k.startswith("GGUF.") and k != "general.architecture":
            w.add_key_value(k, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    for x in r.tensors:
        a = np.array(x.data).reshape([int(n) for n in reversed(x.shape)])
        if a.ndim == 2:
            w.add_tensor(x.name, quants.quantize(a, t), raw_dtype=t)
        else:
            w.add_tensor(x.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ids = some_ids(m.config["vocab_size"])
    ours = logits(tmp_path / "ckpt", ids, qtype.lower())
    assert np.array_equal(ours, logits(tmp_path / "q.gguf", ids))


@pytest.mark.parametrize("scheme", ["tensor", "channel", "block"])
def test_fp8_within_its_own_rounding(scheme, tmp_path):
    """FP8 e4m3 has 3 mantissa bits: each weight is rounded by at most 2^-4
    of itself (scales map each tensor, row or block into range, so nothing
    saturates). The bound: parley's FP8 logits are the float64 forward of the
    dequantised weights (within 1e-3), so they differ from the bf16
    checkpoint's by what that rounding does in float64, within 2e-3."""
    m8 = hc.random_checkpoint("llama", tmp_path / "fp8", fp8=scheme, seed=77)
    mb = hc.random_checkpoint("llama", tmp_path / "bf16", "bf16", seed=77)
    ids = some_ids(m8.config["vocab_size"])
    ref8, refb = hc.numpy_logits(m8, ids), hc.numpy_logits(mb, ids)
    l8, lb = logits(tmp_path / "fp8", ids), logits(tmp_path / "bf16", ids)
    assert np.abs(l8 - ref8).max() < 1e-3
    rounding = np.abs(ref8 - refb)
    assert rounding.max() > 1e-2            # FP8 moved the logits: there is a bound to meet
    assert (np.abs(l8 - lb) <= rounding + 2e-3).all()
    assert (l8.argmax(1) == ref8.argmax(1)).all()


# ---- the default model as a checkpoint ----

@pytest.fixture(scope="module")
def smol_checkpoint(tmp_path_factory):
    if not os.path.exists(MODEL_PATH):
        pytest.fail("default model missing: %s (run scripts/fetch_model.sh)" % MODEL_PATH)
    d = tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct"
    m = hc.from_gguf(MODEL_PATH, d, "bf16")
    yield d, m
    shutil.rmtree(d, ignore_errors=True)


def test_default_model_checkpoint_logits(smol_checkpoint):
    d, m = smol_checkpoint
    ids = [504, 1431, 3077, 4022, 359, 260, 3077, 4022, 282, 260, 28489, 2380]
    ours = logits(d, ids, "f32")
    assert np.abs(ours - hc.numpy_logits(m, ids)).max() < 1e-2    # measured 1e-4


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))


PROMPTS = ["The capital of France is", "Write a haiku about the sea:\n", "def fibonacci(n):",
           "Once upon a time", "Q: What is 12 * 7?\nA:", "List three fruits:"]
TEXTS = ["Hello world", "The year 2024 had 365 days.", "Café naïve 日本語 😀🎉",
         "<|im_start|>user\nhi<|im_end|>\n", "def f(x):\n    return x**2\n", "  spaces  \n\n"]


def test_default_model_checkpoint_serves_the_ggufs_tokens(smol_checkpoint, model_url):
    """Served from the bf16 checkpoint (quantised to q8_0 at load) the greedy
    tokens are the GGUF's (Q4_1), up to a point where the GGUF's own top two
    are within 1 nat: the checkpoint's bf16 rounding and q8_0 requantisation
    move logits by 0.3 nats on average (1.5 at most, measured), as the GGUF's
    own kernels do against float64."""
    d, _ = smol_checkpoint
    s = Server("--model", str(d), "--log-level", "warn")
    try:
        name = "smollm2-135m-instruct"       # the folder's name, as for a GGUF file
        for t in TEXTS:
            assert post(s.url, "/tokenize", {"model": name, "prompt": t})["tokens"] == \
                post(model_url, "/tokenize", {"prompt": t})["tokens"], t
        same = 0
        for p in PROMPTS:
            body = {"model": name, "prompt": p, "max_tokens": 24, "temperature": 0,
                    "logprobs": 2}
            a = post(model_url, "/v1/completions", body)["choices"][0]["logprobs"]
            b = post(s.url, "/v1/completions", body)["choices"][0]["logprobs"]
            k = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y),
                     None)
            if k is None:
                same += 1
                continue
            top = sorted(a["top_logprobs"][k].values(), reverse=True)
            assert top[0] - top[1] < 1.0, (p, k, a["tokens"][k], b["tokens"][k])
        assert same >= len(PROMPTS) // 2
    finally:
        assert s.stop() == 0


# ---- tokenizers of real vocabularies ----

def test_gemma3_vocabulary_as_tokenizer_json(tmp_path):
    if not os.path.exists(GEMMA):
        pytest.skip("Gemma 3 270M not fetched: %s" % GEMMA)
    r = tool("vocab", GEMMA)
    assert r.returncode == 0, r.stderr
    tk, _ = hc.tokenizer_from_vocab(json.loads(r.stdout))
    tk.save(str(tmp_path / "tokenizer.json"), pretty=False)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True}))
    texts = TEXTS + ["<start_of_turn>user\nhello<end_of_turn>\n", "ÿþýü ∑∞ ±×÷ ©®™",
                     "tabs\tand\t\ttabs\r\n", "I'm sure they'll say it's fine, DON'T you?"]
    ours = json.loads(tool("tokenize", tmp_path, stdin=json.dumps(texts)).stdout)
    gguf = json.loads(tool("tokenize", GEMMA, stdin=json.dumps(texts)).stdout)
    for i, t in enumerate(texts):
        assert ours["plain"][i] == tk.encode(t, add_special_tokens=False).ids, t
        assert ours["special"][i] == tk.encode(t, add_special_tokens=True).ids, t
        assert ours["plain"][i] == gguf["plain"][i], t


# ---- bad checkpoints ----

def write_raw(path, header, data=b""):
    h = header.encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)


BAD = {
    "no_config": (lambda d: os.remove(d / "config.json"), ["config.json"]),
    "no_tokenizer": (lambda d: os.remove(d / "tokenizer.json"), ["tokenizer.json", "missing"]),
    "no_weights": (lambda d: os.remove(d / "model.safetensors"), ["no model.safetensors"]),
    "unknown_architecture": (lambda d: edit_config(d, architectures=["GPTNeoXForCausalLM"]),
                             ["config.json: key 'architectures'", "GPTNeoXForCausalLM"]),
    "shape_disagrees": (lambda d: edit_config(d, intermediate_size=96),
                        ["model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight'",
                         "disagrees with config.json"]),
    "extra_tensor": (lambda d: add_tensor(d, "model.layers.0.mlp.extra.weight"),
                     ["tensor 'model.layers.0.mlp.extra.weight' is not part"]),
    "absurd_header": (lambda d: open(d / "model.safetensors", "r+b").write(
        (1 << 40).to_bytes(8, "little")), ["model.safetensors", "header length"]),
    "overflowing_offsets": (lambda d: write_raw(
        d / "model.safetensors", '{"w":{"dtype":"F32","shape":[2],"data_offsets":'
        '[0,18446744073709551615]}}', b"\0" * 8), ["model.safetensors", "tensor 'w'"]),
    "duplicate_names": (lambda d: write_raw(
        d / "model.safetensors", '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8),
        ["model.safetensors", "tensor 'w'", "twice"]),
    "missing_shard": (lambda d: shard_then_drop(d), ["model-00002-of-00002.safetensors"]),
}


def edit_config(d, **kv):
    c = json.loads((d / "config.json").read_text())
    c.update(kv)
    (d / "config.json").write_text(json.dumps(c))


def add_tensor(d, name):
    from safetensors.numpy import load_file, save_file
    t = load_file(str(d / "model.safetensors"))
    t[name] = np.zeros((4, 4), dtype=np.float32)
    save_file(t, str(d / "model.safetensors"))


def shard_then_drop(d):
    from safetensors.numpy import load_file, save_file
    t = load_file(str(d / "model.safetensors"))
    os.remove(d / "model.safetensors")
    names = sorted(t)
    fn = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file({k: t[k] for k in names[::2]}, str(d / fn[0]))
    wmap = {k: fn[i % 2] for i, k in enumerate(names)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_checkpoint_is_an_error_naming_file_and_key(case, tmp_path):
    d = tmp_path / "ckpt"
    hc.random_checkpoint("llama", d, "f32")
    mutate, wants = BAD[case]
    mutate(d)
    r = tool("load", d)
    assert r.returncode == 1, (r.returncode, r.stderr)     # an error, not a crash
    for w in wants:
        assert w in r.stderr, (w, r.stderr)
    s = subprocess.run([parley_bin(), "serve", "--port", "0", "--model", str(d)],
                       capture_output=True, text=True, timeout=120)
    assert s.returncode not in (0, -6, -11) and wants[0] in s.stderr, s.stderr


# ---- the seed's configuration ----

def test_seed_model_definition_serves_from_the_hf_cache(tmp_path):
    """Seed 000's model_definitions as written (backend: vllm, no base_url)
    plus its model_name, found offline in the local Hugging Face cache."""
    hub = tmp_path / "hub"
    snap = hub / "models--test-org--tiny-llama" / "snapshots" / "0123abcd"
    hc.random_checkpoint("llama", snap, "bf16")
    (hub / "models--test-org--tiny-llama" / "refs").mkdir()
    (hub / "models--test-org--tiny-llama" / "refs" / "main").write_text("89abcdef")
    (hub / "models--test-org--tiny-llama" / "snapshots" / "89abcdef").mkdir()  # incomplete
    cfg = tmp_path / "seed.yaml"
    cfg.write_text("model_definitions:\n"
                   "  llama31_8b:\n"
                   "    backend: vllm\n"
                   "    model_name: test-org/tiny-llama\n"
                   "    vllm_config:\n"
                   "      max_num_seqs_upper_bound: 256 # Upper bound; limited by KV cache\n"
                   "      attention_backend: \"FLASHINFER\"\n"
                   "      revision: 0123abcd\n")
    env = dict(os.environ, HF_HUB_CACHE=str(hub))
    s = Server("--config", str(cfg), "--log-level", "warn", env=env)
    try:
        models = json.load(urllib.request.urlopen(s.url + "/v1/models"))["data"]
        assert [m["id"] for m in models] == ["llama31_8b"]
        assert models[0]["backend"] in ("cpu", "cuda") and 0 < models[0]["capacity"] <= 256
        r = post(s.url, "/v1/chat/completions", {
            "model": "llama31_8b", "max_tokens": 5, "temperature": 0,
            "messages": [{"role": "user", "content": "hello"}]})
        assert r["usage"]["completion_tokens"] >= 1
        info = json.load(urllib.request.urlopen(s.url + "/tokenizer_info?model=llama31_8b"))
        assert info["bos_token"] == "<|begin_of_text|>"
    finally:
        assert s.stop() == 0
    r = subprocess.run([parley_bin(), "serve", "--port", "0", "--model", "test-org/tiny-llama"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "89abcdef: no config.json" in r.stderr, r.stderr  # refs/main
    env.pop("HF_HUB_CACHE")
    env["HF_HOME"] = str(tmp_path / "empty")
    r = subprocess.run([parley_bin(), "serve", "--port", "0", "--config", str(cfg)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "models--test-org--tiny-llama" in r.stderr, r.stderr


def test_generation_config_defaults_apply_when_left_out(tmp_path):
    """generation_config.json's sampling fields are defaults, as in vLLM: a
    request that leaves them out gets them, one that gives them keeps its own."""
    d = tmp_path / "ckpt"
    m = hc.random_checkpoint("qwen2", d, "f32")
    (d / "generation_config.json").write_text(json.dumps({
        "eos_token_id": [m.config["eos_token_id"]], "temperature": 0.0, "max_new_tokens": 3,
        "do_sample": False}))
    s = Server("--model", str(d), "--log-level", "warn")
    try:
        body = {"model": "ckpt", "prompt": "the world", "ignore_eos": True}
        a = post(s.url, "/v1/completions", body)
        b = post(s.url, "/v1/completions", body)
        assert a["usage"]["completion_tokens"] == 3
        assert a["choices"][0]["text"] == b["choices"][0]["text"]    # temperature 0
        c = post(s.url, "/v1/completions", dict(body, max_tokens=5))
        assert c["usage"]["completion_tokens"] == 5
        chat = post(s.url, "/v1/chat/completions", {
            "model": "ckpt", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True})
        assert chat["usage"]["completion_tokens"] == 3
    finally:
        assert s.stop() == 0
    (d / "generation_config.json").write_text(json.dumps({"temperature": 7}))
    r = tool("load", d)
    assert r.returncode == 1 and "generation_config.json: key 'temperature'" in r.stderr, r.stderr

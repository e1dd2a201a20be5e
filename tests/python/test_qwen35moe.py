"""The qwen35moe family (Qwen3.5 / Qwen3.6 MoE: Gated DeltaNet hybrid
layers, in every layer routed experts beside a shared expert and its
sigmoid gate) from both formats: the checkpoint folder transformers wrote
(tests/fixtures/hf_transformers/qwen35moe/, model.safetensors rebuilt from
its seed) and llama.cpp's converter's GGUF of it (tiny_qwen35moe.gguf),
both made by tests/fixtures/gen_qwen35moe.py with the references in
tiny_qwen35moe_ref.json (transformers' float32 logits, llama-cpp-python
0.3.36's on the GGUF):

- prompt logprobs of each format within 0.02 nats mean of transformers and
  of llama.cpp, greedy tokens equal, logits within 1e-3 of transformers;
- the composite checkpoint (Qwen3_5MoeForConditionalGeneration) reads its
  text model; the experts fused as transformers holds them (gate_up_proj,
  down_proj) give the same logits; missing experts are named;
- behind the server (openai SDK), from either format: concurrent greedy
  streams give what each request gets alone;
- bad input: a missing or contradictory MoE key (expert count, experts
  per token, the shared expert's width) is refused naming the key, in the
  GGUF and in config.json; the shared-expert key is refused elsewhere.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import urllib.parse

import pytest

np = pytest.importorskip("numpy")

from conftest import ROOT, Server, parley_bin  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
sys.path.insert(0, FIX)
import gen_hf_transformers as gen  # noqa: E402

GGUF = os.path.join(FIX, "tiny_qwen35moe.gguf")
REF = json.load(open(os.path.join(FIX, "tiny_qwen35moe_ref.json")))
TOOL = os.path.join(os.path.dirname(parley_bin()), "tests", "hf_tool")
WORDS = ("river mountain engine garden signal harbor market lantern window summer "
         "winter paper silver ocean forest bridge castle letter music pencil").split()


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("q35moe") / "qwen35moe"
    shutil.copytree(os.path.join(FIX, "hf_transformers", "qwen35moe"), d)
    gen.rebuild(str(d))
    return d


def logits(model, ids, wtype="f32"):
    r = subprocess.run([TOOL, "logits", str(model), wtype], input=json.dumps(ids),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.array(json.loads(r.stdout))


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("fmt", ["gguf", "hf"])
@pytest.mark.parametrize("key,what,tol", [("hf_logits", "transformers", 1e-3),
                                          ("llama_logits", "llama.cpp 0.3.36", 1e-2)])
def test_prompt_logprobs_match(fmt, key, what, tol, hf_dir):
    """Each fixture sequence teacher-forced: the prompt logprobs (the next
    id's) within 0.02 nats mean, greedy equal, logits within tol (llama.cpp's
    kernels are 5e-3 from transformers: gen_qwen35moe.py prints it)."""
    assert key in REF, "tiny_qwen35moe_ref.json has no %s (run gen_qwen35moe.py)" % key
    model = GGUF if fmt == "gguf" else hf_dir
    for s, ids in enumerate(REF["ids"]):
        ours, theirs = logits(model, ids), np.array(REF[key][s])
        assert ours.shape == theirs.shape
        a, b = log_softmax(ours.astype(np.float64)), log_softmax(theirs)
        nxt = np.array(ids[1:])
        rows = np.arange(len(ids) - 1)
        dlp = np.abs(a[rows, nxt] - b[rows, nxt]).mean()
        assert dlp < 0.02, f"{fmt} seq {s}: {dlp:.2e} nats mean from {what}"
        assert (ours.argmax(-1) == theirs.argmax(-1)).all(), f"{fmt} seq {s}: greedy"
        err = np.abs(ours - theirs).max()
        assert err < tol, f"{fmt} seq {s}: max |dlogit| {err:.2e} from {what}"


def test_both_formats_agree(hf_dir):
    """The folder and its conversion: the same model (within float
    rounding of the two loaders' layouts)."""
    ids = REF["ids"][0]
    d = np.abs(logits(GGUF, ids) - logits(hf_dir, ids)).max()
    assert d < 1e-4, d


def _rewrite_safetensors(path, rename):
    blob = open(path, "rb").read()
    n = int.from_bytes(blob[:8], "little")
    hdr = json.loads(blob[8:8 + n])
    out = {k if k == "__metadata__" else rename(k): v for k, v in hdr.items()}
    h = json.dumps(out).encode()
    open(path, "wb").write(len(h).to_bytes(8, "little") + h + blob[8 + n:])


def test_composite_checkpoint_reads_its_text_model(hf_dir, tmp_path):
    """Qwen3_5MoeForConditionalGeneration: the text model's keys under
    text_config, its tensors under model.language_model.: the same logits."""
    d = tmp_path / "composite"
    shutil.copytree(hf_dir, d)
    cfg = json.load(open(d / "config.json"))
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "dtype")}
    json.dump({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
               "model_type": "qwen3_5_moe", "dtype": "float32", "text_config": text,
               "tie_word_embeddings": False}, open(d / "config.json", "w"))
    _rewrite_safetensors(d / "model.safetensors",
                         lambda k: k.replace("model.", "model.language_model.", 1))
    ids = REF["ids"][1]
    err = np.abs(logits(d, ids) - np.array(REF["hf_logits"][1])).max()
    assert err < 1e-3, f"composite: max |dlogit| {err:.2e} from transformers"


def _read_st(path):
    blob = open(path, "rb").read()
    n = int.from_bytes(blob[:8], "little")
    hdr = json.loads(blob[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k != "__metadata__":
            assert v["dtype"] == "F32"
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(blob[8 + n + a:8 + n + b], "<f4").reshape(v["shape"])
    return out, hdr.get("__metadata__")


def _write_st(path, tensors, meta):
    hdr, data = ({"__metadata__": meta} if meta else {}), bytearray()
    for k, x in tensors.items():
        b = np.ascontiguousarray(x, "<f4").tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(x.shape),
                  "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode()
    open(path, "wb").write(len(h).to_bytes(8, "little") + h + bytes(data))


def _experts_as(src, d, how):
    """src's folder into d with each layer's experts fused as transformers
    holds them in memory (how "fused": gate_up_proj [n_expert, 2 ff, hidden],
    gate rows first, and down_proj [n_expert, hidden, ff]), or left out
    ("none"), or expert 3 of layer 1 left out ("one")."""
    shutil.copytree(src, d)
    ts, meta = _read_st(d / "model.safetensors")
    n_exp = json.load(open(d / "config.json"))["num_experts"]
    for l in range(json.load(open(d / "config.json"))["num_hidden_layers"]):
        p = "model.layers.%d.mlp.experts." % l
        if how == "one":
            if l == 1:
                for w in ("gate_proj", "up_proj", "down_proj"):
                    del ts[p + "3.%s.weight" % w]
            continue
        w = {n: [ts.pop(p + "%d.%s.weight" % (e, n)) for e in range(n_exp)]
             for n in ("gate_proj", "up_proj", "down_proj")}
        if how == "fused":
            ts[p + "gate_up_proj"] = np.stack([np.concatenate([g, u]) for g, u in
                                               zip(w["gate_proj"], w["up_proj"])])
            ts[p + "down_proj"] = np.stack(w["down_proj"])
    _write_st(d / "model.safetensors", ts, meta)
    return d


def test_fused_experts_checkpoint(hf_dir, tmp_path):
    """The experts as one gate_up_proj and one down_proj tensor per layer
    (what transformers holds in memory; llama.cpp's converter reads it
    too): the same logits as the per-expert checkpoint's reference."""
    d = _experts_as(hf_dir, tmp_path / "fused", "fused")
    ids = REF["ids"][2]
    err = np.abs(logits(d, ids) - np.array(REF["hf_logits"][2])).max()
    assert err < 1e-3, f"fused experts: max |dlogit| {err:.2e} from transformers"


@pytest.mark.parametrize("how,says", [
    ("none", "blk.0.ffn_gate_exps.weight"),
    ("one", "model.layers.1.mlp.experts.3.gate_proj.weight"),
])
def test_missing_experts_named(how, says, hf_dir, tmp_path):
    r = load(_experts_as(hf_dir, tmp_path / how, how))
    assert r.returncode != 0, "loaded a folder without its experts"
    assert "missing" in r.stderr and says in r.stderr, r.stderr


# ---- behind the server ----------------------------------------------------
@pytest.fixture(scope="module", params=["gguf", "hf"])
def srv(request, hf_dir):
    openai = pytest.importorskip("openai")
    model = GGUF if request.param == "gguf" else str(hf_dir)
    s = Server("--model", model, "--served-model-name", "q35moe", "--log-level", "warn",
               "--max-model-len", "256")
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    yield s
    assert s.stop() == 0


def ask(s, i, stream=False):
    msgs = [{"role": "user", "content": " ".join(WORDS[(i * 7 + j) % len(WORDS)]
                                                 for j in range(3 + i % 5))}]
    kw = dict(model="q35moe", messages=msgs, max_tokens=24, temperature=0)
    if not stream:
        return s.client.chat.completions.create(**kw).choices[0].message.content
    out = []
    for ch in s.client.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].delta.content:
            out.append(ch.choices[0].delta.content)
    return "".join(out)


def test_concurrent_streams_equal_alone(srv):
    """Each request's greedy text alone, then six at once streamed and
    twelve at once whole (their experts grouped in one batch, each its own
    recurrent state): the same text."""
    alone = [ask(srv, i) for i in range(6)]
    assert any(alone), "the tiny model produced no text"
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        streamed = list(ex.map(lambda i: ask(srv, i, stream=True), range(6)))
    assert streamed == alone
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        again = list(ex.map(lambda i: ask(srv, i), list(range(6)) * 2))
    assert again == alone * 2


# ---- bad input ------------------------------------------------------------
def rewrite(tmp_path, name, src=GGUF, arch="qwen35moe", kv=None, drop=(), tensor=None):
    """src with metadata keys changed (kv: key -> (value, GGUFValueType))
    or dropped, or one tensor replaced (name, array)."""
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(tmp_path / name), arch)
    kv = kv or {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in drop or k in kv:
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(k, f.contents())
        else:
            w.add_key_value(k, f.contents(), t)
    for k, (v, t) in kv.items():
        w.add_key_value(k, v, t)
    for t in r.tensors:
        data = np.array(t.data)
        if tensor and t.name == tensor[0]:
            data = tensor[1]
        if t.tensor_type == gguf.GGMLQuantizationType.F32 or tensor:
            w.add_tensor(t.name, data.astype(np.float32),
                         raw_dtype=gguf.GGMLQuantizationType.F32)
        else:
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / name)


def load(path):
    return subprocess.run([TOOL, "load", str(path), "f32"], capture_output=True, text=True,
                          timeout=60)


def test_rewritten_file_still_loads(tmp_path):
    """The rewriting itself keeps a good file good (so the failures below
    are the changes')."""
    r = load(rewrite(tmp_path, "same.gguf"))
    assert r.returncode == 0, r.stderr


A = "qwen35moe."


@pytest.mark.parametrize("case,drop,kv,want", [
    ("no_count", (A + "expert_count",), {}, A + "expert_count"),
    ("no_used", (A + "expert_used_count",), {}, A + "expert_used_count"),
    ("no_shexp", (A + "expert_shared_feed_forward_length",), {},
     A + "expert_shared_feed_forward_length"),
    ("no_exp_ff", (A + "expert_feed_forward_length",), {}, A + "expert_feed_forward_length"),
    ("count", (), {A + "expert_count": 8}, A + "expert_count = 8"),
    ("used", (), {A + "expert_used_count": 5}, A + "expert_used_count"),
    ("used0", (), {A + "expert_used_count": 0}, A + "expert_used_count"),
    ("shexp", (), {A + "expert_shared_feed_forward_length": 64},
     A + "expert_shared_feed_forward_length = 64"),
    ("shexp0", (), {A + "expert_shared_feed_forward_length": 0},
     A + "expert_shared_feed_forward_length"),
    ("exp_ff", (), {A + "expert_feed_forward_length": 32}, A + "expert_feed_forward_length = 32"),
    ("shared_count", (), {A + "expert_shared_count": 1}, A + "expert_shared_count"),
])
def test_bad_moe_keys_named(tmp_path, case, drop, kv, want):
    gguf = pytest.importorskip("gguf")
    u32 = gguf.GGUFValueType.UINT32
    r = load(rewrite(tmp_path, case + ".gguf", drop=drop,
                     kv={k: (v, u32) for k, v in kv.items()}))
    assert r.returncode != 0, "loaded a bad file"
    assert want in r.stderr, r.stderr


def test_bad_shared_expert_tensor_named(tmp_path):
    r = load(rewrite(tmp_path, "gate.gguf", tensor=("blk.2.ffn_gate_inp_shexp.weight",
                                                    np.zeros(16, np.float32))))
    assert r.returncode != 0 and "blk.2.ffn_gate_inp_shexp.weight" in r.stderr, r.stderr


def test_shared_expert_key_refused_elsewhere(tmp_path):
    """qwen3moe has no shared expert: the key is refused by name."""
    gguf = pytest.importorskip("gguf")
    src = os.path.join(FIX, "tiny_qwen3moe.gguf")
    if not os.path.exists(src):
        pytest.skip("no tiny_qwen3moe.gguf")
    r = load(rewrite(tmp_path, "q3moe.gguf", src=src, arch="qwen3moe",
                     kv={"qwen3moe.expert_shared_feed_forward_length":
                         (32, gguf.GGUFValueType.UINT32)}))
    assert r.returncode != 0
    assert "qwen3moe.expert_shared_feed_forward_length" in r.stderr, r.stderr


@pytest.mark.parametrize("edit,says", [
    (lambda c: c.pop("shared_expert_intermediate_size"), "shared_expert_intermediate_size"),
    (lambda c: c.update(shared_expert_intermediate_size=64), "shared_expert_intermediate_size"),
    (lambda c: c.pop("num_experts"), "num_experts"),
    (lambda c: c.update(num_experts=8), "the experts per layer"),
    (lambda c: c.update(num_experts_per_tok=5), "num_experts_per_tok"),
    (lambda c: c.pop("num_experts_per_tok"), "num_experts_per_tok"),
    (lambda c: c.update(moe_intermediate_size=32), "an expert's width"),
    (lambda c: c.update(norm_topk_prob=False), "norm_topk_prob"),
])
def test_bad_config_named(edit, says, hf_dir, tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(hf_dir, d)
    cfg = json.load(open(d / "config.json"))
    edit(cfg)
    json.dump(cfg, open(d / "config.json", "w"))
    r = load(d)
    assert r.returncode != 0, "loaded a bad folder"
    assert "config.json" in r.stderr and says in r.stderr, r.stderr

"""The qwen35 family (Gated DeltaNet hybrids) behind the whole server and at
load, on tests/fixtures/tiny_qwen35.gguf (gen_qwen35.py: transformers'
checkpoint through llama.cpp's converter):

- chat completions through the openai SDK, several streams at once: each
  stream's greedy text is the one its request gets alone (every sequence
  keeps its own recurrent state slot), and streaming equals the whole reply;
- prefix caching is on for the hybrid, with recurrent-state checkpoints
  (/status kv.checkpoints);
- bad files: a missing or contradictory ssm key, a wrong recurrent-layer
  list, a misshaped Gated DeltaNet tensor: the load fails with a message
  naming the key or tensor.
"""
import concurrent.futures
import json
import os
import subprocess
import urllib.parse

import pytest

from conftest import ROOT, Server, parley_bin, request

FIX = os.path.join(ROOT, "tests", "fixtures")
GGUF = os.path.join(FIX, "tiny_qwen35.gguf")
TOOL = os.path.join(os.path.dirname(parley_bin()), "tests", "hf_tool")
WORDS = ("river mountain engine garden signal harbor market lantern window summer "
         "winter paper silver ocean forest bridge castle letter music pencil").split()


@pytest.fixture(scope="module")
def srv():
    openai = pytest.importorskip("openai")
    s = Server("--model", GGUF, "--served-model-name", "tiny_qwen35", "--log-level", "warn",
               "--max-model-len", "256")
    u = urllib.parse.urlparse(s.url)
    s.host, s.port = u.hostname, u.port
    s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
    yield s
    assert s.stop() == 0


def ask(s, i, stream=False):
    msgs = [{"role": "user", "content": " ".join(WORDS[(i * 7 + j) % len(WORDS)]
                                                 for j in range(3 + i % 5))}]
    kw = dict(model="tiny_qwen35", messages=msgs, max_tokens=24, temperature=0)
    if not stream:
        return s.client.chat.completions.create(**kw).choices[0].message.content
    out = []
    for ch in s.client.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].delta.content:
            out.append(ch.choices[0].delta.content)
    return "".join(out)


def test_concurrent_streams_keep_their_state(srv):
    alone = [ask(srv, i) for i in range(6)]
    assert any(alone), "the tiny model produced no text"
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        streamed = list(ex.map(lambda i: ask(srv, i, stream=True), range(6)))
    assert streamed == alone
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        again = list(ex.map(lambda i: ask(srv, i), list(range(6)) * 2))
    assert again == alone * 2


def test_prefix_caching_on_with_checkpoints(srv):
    st, _, data = request(srv, "GET", "/status")
    assert st == 200
    stats = json.loads(data)["models"]["tiny_qwen35"]
    assert stats["prefix_caching"] is True
    ck = stats["kv"]["checkpoints"]
    assert ck["slots"] >= 2 and ck["bytes_each"] > 0


def rewrite(tmp_path, name, kv=None, drop=(), tensor=None):
    """tiny_qwen35.gguf with metadata keys changed (kv: key -> (value,
    GGUFValueType)) or dropped, or one tensor replaced (name, array)."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    r = gguf.GGUFReader(GGUF)
    w = gguf.GGUFWriter(str(tmp_path / name), "qwen35")
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
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(k, v)
        else:
            w.add_key_value(k, v, t)
    for t in r.tensors:
        data = np.array(t.data)
        if tensor and t.name == tensor[0]:
            data = tensor[1]
        w.add_tensor(t.name, data.astype(np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / name)


def load_error(path):
    r = subprocess.run([TOOL, "load", path, "f32"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "loaded a bad file"
    return r.stderr


def test_rewritten_file_still_loads(tmp_path):
    """The rewriting itself keeps a good file good (so the failures below
    are the changes')."""
    p = rewrite(tmp_path, "same.gguf")
    r = subprocess.run([TOOL, "load", p, "f32"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


U32 = "UINT32"


@pytest.mark.parametrize("case,change,want", [
    ("no_conv_kernel", dict(drop=("qwen35.ssm.conv_kernel",)), "qwen35.ssm.conv_kernel"),
    ("no_state_size", dict(drop=("qwen35.ssm.state_size",)), "qwen35.ssm.state_size"),
    ("inner_size", dict(kv={"qwen35.ssm.inner_size": (48, U32)}), "qwen35.ssm.inner_size"),
    ("v_heads", dict(kv={"qwen35.ssm.time_step_rank": (3, U32)}), "qwen35.ssm.time_step_rank"),
    ("recurrent_layers", dict(kv={"qwen35.attention.recurrent_layers":
                                  ([True, True, False], "ARRAY")}),
     "qwen35.attention.recurrent_layers"),
    ("sections", dict(kv={"qwen35.rope.dimension_sections": ([2, 2, 1, 0], "ARRAY")}),
     "qwen35.rope.dimension_sections"),
])
def test_bad_ssm_keys_named(tmp_path, case, change, want):
    gguf = pytest.importorskip("gguf")
    kv = {k: (v, getattr(gguf.GGUFValueType, t)) for k, (v, t) in change.get("kv", {}).items()}
    p = rewrite(tmp_path, case + ".gguf", kv=kv, drop=change.get("drop", ()))
    err = load_error(p)
    assert want in err, err


def test_wrong_tensor_shape_named(tmp_path):
    np = pytest.importorskip("numpy")
    p = rewrite(tmp_path, "shape.gguf", tensor=("blk.1.ssm_a", np.zeros(3, np.float32)))
    err = load_error(p)
    assert "blk.1.ssm_a" in err, err
    p = rewrite(tmp_path, "conv.gguf",
                tensor=("blk.0.ssm_conv1d.weight", np.zeros((128, 3), np.float32)))
    err = load_error(p)
    assert "blk.0.ssm_conv1d.weight" in err, err


def test_ssm_keys_refused_elsewhere(tmp_path):
    """An ssm key in a family without recurrent layers is refused by name."""
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(os.path.join(FIX, "tiny_qwen3.gguf"))
    np = pytest.importorskip("numpy")
    w = gguf.GGUFWriter(str(tmp_path / "q3.gguf"), "qwen3")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(k, f.contents())
        else:
            w.add_key_value(k, f.contents(), t)
    w.add_key_value("qwen3.ssm.state_size", 16, gguf.GGUFValueType.UINT32)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    err = load_error(str(tmp_path / "q3.gguf"))
    assert "qwen3.ssm.state_size" in err, err

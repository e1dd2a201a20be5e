"""bench_embed.py - embeddings per second (issue 50's speed check): 1,000
texts of 20-200 tokens on all-MiniLM-L6-v2, 2 threads, three peers side by
side in one run, medians of alternating rounds:

  parley            build/parley --model <HF folder> --threads 2 (or --gguf)
  sentence-transformers  on torch CPU, torch.set_num_threads(2)
  llama-server      0.3.36 --embeddings --pooling mean -t 2 on the f16 and
                    f32 GGUF (tests/fixtures/gen_embed_gguf_ref.py makes them)

Clients send batches of --batch texts per request, one request at a time
(parley and llama-server), encode(batch_size=--batch) for
sentence-transformers. Run with the torch venv (it imports torch):

    /work/torchenv/bin/python bench/bench_embed.py [--quick] [--rounds 5]

Raw figures go to bench/results/embed-<date>-<host>.json; the CPU is named
(bench/cpuinfo.py). --quick: 200 texts, one round (a smoke run, not a
measurement)."""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import cpuinfo  # noqa: E402
import embed_texts  # noqa: E402

MODELS = os.path.expanduser("~/.cache/parley/models")
LLAMA_BIN = os.environ.get("LLAMA_BUILD_DIR",
                           "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")


def make_texts(tok, n, seed=0):
    """n texts of 20-200 tokens (by the model's tokenizer), words drawn from
    embed_texts' texts with a fixed seed."""
    words = [w for w in " ".join(t for t in embed_texts.texts() if t).split() if len(w) <= 12]
    rng = np.random.default_rng(seed)
    out = []
    for target in rng.integers(20, 201, n):
        w = list(rng.choice(words, int(target)))
        while len(w) > 1 and len(tok.encode(" ".join(w)).ids) > target:
            w = w[:-max(1, len(w) // 8)]
        out.append(" ".join(w))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url, p):
    for _ in range(1200):
        if p.poll() is not None:
            raise RuntimeError("server exited: %s" % p.returncode)
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError("server did not come up")


class HttpPeer:
    def __init__(self, name, argv, env=None):
        self.name, self.port = name, free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.p = subprocess.Popen([a.replace("{port}", str(self.port)) for a in argv],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_up(self.url, self.p)
        self.model = json.load(urllib.request.urlopen(self.url + "/v1/models"))["data"][0]["id"]

    def run(self, texts, batch):
        n = 0
        for i in range(0, len(texts), batch):
            body = json.dumps({"model": self.model, "input": texts[i:i + batch]}).encode()
            req = urllib.request.Request(self.url + "/v1/embeddings", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                n += len(json.load(urllib.request.urlopen(req, timeout=3600))["data"])
            except urllib.error.HTTPError as e:
                raise RuntimeError("%s: %s" % (self.name, e.read()[:500])) from None
        return n

    def stop(self):
        self.p.terminate()
        self.p.wait()


class StPeer:
    def __init__(self, folder, threads):
        import torch
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(threads)
        self.name = "sentence-transformers (torch %s CPU)" % torch.__version__
        self.m = SentenceTransformer(folder, device="cpu")

    def run(self, texts, batch):
        return len(self.m.encode(texts, batch_size=batch, convert_to_numpy=True))

    def stop(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parley", default=os.path.join(ROOT, "build", "parley"))
    ap.add_argument("--folder", default=os.path.join(MODELS, "all-MiniLM-L6-v2"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.texts = 1, 200
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(os.path.join(a.folder, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    texts = make_texts(tok, a.texts)
    n_tok = sum(len(tok.encode(t).ids) for t in texts)
    t = str(a.threads)
    lenv = dict(os.environ, LD_LIBRARY_PATH=LLAMA_BIN)
    peers = [HttpPeer("parley", [a.parley, "serve", "--model", a.folder, "--port", "{port}",
                                 "--threads", t, "--log-level", "warn"]),
             StPeer(a.folder, a.threads)]
    for q in ("f16", "f32"):
        g = os.path.join(MODELS, "all-MiniLM-L6-v2-%s.gguf" % q)
        if os.path.exists(g):
            peers.append(HttpPeer("llama-server 0.3.36 %s GGUF" % q, [
                os.path.join(LLAMA_BIN, "llama-server"), "-m", g, "--embeddings", "--pooling",
                "mean", "-t", t, "-tb", t, "-c", "8192", "-b", "8192", "-ub", "8192",
                "--host", "127.0.0.1", "--port", "{port}"], env=lenv))
        else:
            print("no %s: llama-server %s skipped (tests/fixtures/gen_embed_gguf_ref.py)" % (g, q))
    times = {p.name: [] for p in peers}
    try:
        for p in peers:
            p.run(texts[:a.batch], a.batch)   # warm-up
        for r in range(a.rounds):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            for p in order:
                t0 = time.perf_counter()
                assert p.run(texts, a.batch) == len(texts)
                times[p.name].append(time.perf_counter() - t0)
    finally:
        for p in peers:
            p.stop()
    cpu = cpuinfo.describe()
    print("CPU: %s\n%d texts (%d tokens, 20-200 each), batch %d, %s threads, %d round(s)%s" % (
        cpu, len(texts), n_tok, a.batch, t, a.rounds, " (--quick: indicative only)"
        if a.quick else ""))
    res = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        res[name] = {"seconds": ts, "median_s": med, "texts_per_s": len(texts) / med}
        print("  %-42s %8.1f texts/s  (median %.2f s of %s)" % (
            name, len(texts) / med, med, ", ".join("%.2f" % x for x in ts)))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "embed-%s-%s%s.json" % (
        datetime.date.today().isoformat(), socket.gethostname(), "-quick" if a.quick else ""))
    with open(out, "w") as f:
        json.dump({"cpu": cpu, "texts": len(texts), "tokens": n_tok, "batch": a.batch,
                   "threads": a.threads, "rounds": a.rounds, "quick": a.quick,
                   "peers": res}, f, indent=1)
    print("raw:", out)


if __name__ == "__main__":
    main()

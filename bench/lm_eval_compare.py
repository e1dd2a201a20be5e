#!/usr/bin/env python3
"""lm-evaluation-harness end to end against parley, and the same tasks
through llama-cpp-python as the peer; accuracies and per-item logprob
differences side by side.

  1. parley serve on the model (127.0.0.1, port 0);
  2. `lm_eval --model local-completions --model_args base_url=URL/v1/completions,
     model=NAME --batch_size B`, no tokenizer named: lm_eval finds parley's
     GET /tokenizer_info and takes its remote tokenizer (/tokenize,
     /detokenize), since no Hugging Face tokenizer can be downloaded here;
     tasks parley_mc (multiple choice = loglikelihood, echo + logprobs) and
     parley_gen (generate_until) from tests/lm_eval/;
  3. every context and continuation tokenized by parley and by llama.cpp
     (the same GGUF): the token ids must agree for the comparison to mean
     anything;
  4. the same command with --model llama-cpp-direct (bench/lm_eval_llama_cpp.py:
     llama_cpp.Llama in process, float64 log-softmax over its logits);
  5. a report: each task's metric on both, per choice |d loglikelihood|
     (max, mean), the items whose predicted choice differs (with both
     margins), the generations that differ.

Not in CI: lm_eval and its dependencies are ~760 MB. Set-up, once:
  python3 -m venv .venv-lmeval
  .venv-lmeval/bin/pip install "lm_eval[api]" diskcache jinja2
The peer needs llama-cpp-python importable (PYTHONPATH and
LLAMA_CPP_LIB_PATH, as for tests/fixtures/gen_echo_fixtures.py); without
it, --no-peer runs parley only.

Usage, from the repository root:
  .venv-lmeval/bin/python bench/lm_eval_compare.py [--batch-size 8] [--limit N]
Writes bench/out/lm_eval/{parley,llama_cpp}/ (lm_eval's results and
samples) and bench/out/lm_eval/report.json; prints the summary.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = "parley_mc,parley_gen"
DEFAULT_MODEL = os.environ.get("PARLEY_MODEL", os.path.expanduser(
    "~/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


def start_parley(binary, model, threads):
    p = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--model",
                          model, "--threads", str(threads), "--log-level", "warn"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        sys.exit("parley did not start: %r" % line)
    return p, line.split()[-1]


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def http_json(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def lm_eval_env():
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    return env


def run_lm_eval(argv0, model, model_args, out, a):
    cmd = argv0 + ["--model", model, "--model_args", model_args, "--tasks", TASKS,
                   "--include_path", os.path.join(ROOT, "tests", "lm_eval"),
                   "--batch_size", str(a.batch_size), "--log_samples", "--output_path", out,
                   "--seed", "1234"]
    if a.limit:
        cmd += ["--limit", str(a.limit)]
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT, env=lm_eval_env())
    if rc != 0:
        sys.exit("lm_eval failed (%d): %s" % (rc, " ".join(cmd)))
    return time.monotonic() - t0


def load_run(out):
    """(results of the run, {task: [samples by doc_id]})."""
    res = sorted(glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True))
    if not res:
        sys.exit("no lm_eval results under " + out)
    with open(res[-1]) as f:
        results = json.load(f)["results"]
    samples = {}
    for task in TASKS.split(","):
        files = sorted(glob.glob(os.path.join(out, "**", "samples_%s_*.jsonl" % task),
                                 recursive=True))
        with open(files[-1]) as f:
            rows = [json.loads(line) for line in f]
        samples[task] = sorted(rows, key=lambda r: r["doc_id"])
    return results, samples


def metric(results, task, name):
    r = results[task]
    for k, v in r.items():
        if k.split(",")[0] == name and not k.split(",")[0].endswith("_stderr"):
            return v
    return None


def mc_lls(row):
    """[(loglikelihood, is_greedy) per choice] of one multiple-choice sample."""
    return [(float(x[0]), bool(x[1])) for x in row["filtered_resps"]]


def compare_mc(a_rows, b_rows):
    diffs, flips, items = [], [], []
    for ra, rb in zip(a_rows, b_rows):
        la, lb = mc_lls(ra), mc_lls(rb)
        diffs += [abs(x[0] - y[0]) for x, y in zip(la, lb)]
        items.append({"doc_id": ra["doc_id"], "target": int(ra["target"]),
                      "parley": [x[0] for x in la], "peer": [y[0] for y in lb],
                      "diff": [round(x[0] - y[0], 4) for x, y in zip(la, lb)],
                      "acc": [ra["acc"], rb["acc"]]})
        pa = max(range(len(la)), key=lambda i: la[i][0])
        pb = max(range(len(lb)), key=lambda i: lb[i][0])
        if pa != pb:
            sa, sb = sorted(x[0] for x in la), sorted(y[0] for y in lb)
            flips.append({"doc_id": ra["doc_id"], "question": ra["doc"]["question"],
                          "parley_pick": pa, "peer_pick": pb, "target": ra["target"],
                          "parley_margin": sa[-1] - sa[-2], "peer_margin": sb[-1] - sb[-2],
                          "max_choice_diff": max(abs(x[0] - y[0]) for x, y in zip(la, lb))})
    return {"choices": len(diffs), "max_abs_diff": max(diffs),
            "mean_abs_diff": sum(diffs) / len(diffs), "pick_differs": flips,
            "acc_items_differ": sum(ra["acc"] != rb["acc"] for ra, rb in zip(a_rows, b_rows)),
            "items": items}


def compare_gen(a_rows, b_rows):
    differ = []
    for ra, rb in zip(a_rows, b_rows):
        ga, gb = ra["resps"][0][0], rb["resps"][0][0]
        if ga != gb:
            differ.append({"doc_id": ra["doc_id"], "question": ra["doc"]["question"],
                           "target": ra["target"], "parley": ga, "peer": gb})
    return {"items": len(a_rows), "generations_differ": differ,
            "em_items_differ": sum(ra["exact_match"] != rb["exact_match"]
                                   for ra, rb in zip(a_rows, b_rows))}


def tokenization_check(url, model, samples):
    """Every string lm_eval tokenized, through parley and through llama.cpp."""
    try:
        import llama_cpp
    except ImportError as e:
        return {"skipped": "llama_cpp not importable: %s" % e}
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    texts = set()
    for row in samples["parley_mc"]:
        for arg in row["arguments"].values():
            ctx, cont = arg["arg_0"], arg["arg_1"]
            texts.update([ctx, ctx + cont])
    for row in samples["parley_gen"]:
        texts.add(row["arguments"]["gen_args_0"]["arg_0"])
    bad = []
    for t in sorted(texts):
        ours = http_json(url + "/tokenize", {"prompt": t, "add_special_tokens": False})
        peer = llm.tokenize(t.encode(), add_bos=False, special=True)
        if ours["tokens"] != peer:
            bad.append(t)
    return {"texts": len(texts), "differ": bad}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parley", default=os.path.join(ROOT, "build", "parley"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--name", default="smollm2-135m-instruct", help="parley's served name")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="items per task (0: all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "lm_eval"))
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    lm_eval_cli = [sys.executable, "-m", "lm_eval"]
    report = {"model": a.model, "batch_size": a.batch_size, "threads": a.threads}

    srv, url = start_parley(a.parley, a.model, a.threads)
    try:
        info = http_json(url + "/tokenizer_info")
        report["tokenizer_info"] = {k: info.get(k) for k in
                                    ("tokenizer_class", "bos_token", "eos_token",
                                     "model_max_length")}
        out_p = os.path.join(a.out, "parley")
        margs = "base_url=%s/v1/completions,model=%s,max_retries=1" % (url, a.name)
        report["parley_wall_s"] = run_lm_eval(lm_eval_cli, "local-completions", margs, out_p, a)
        res_p, smp_p = load_run(out_p)
        if not a.no_peer:
            report["tokenization"] = tokenization_check(url, a.model, smp_p)
    finally:
        report["parley_exit"] = stop(srv)

    report["parley"] = {"acc": metric(res_p, "parley_mc", "acc"),
                        "acc_norm": metric(res_p, "parley_mc", "acc_norm"),
                        "exact_match": metric(res_p, "parley_gen", "exact_match")}
    if not a.no_peer:
        out_l = os.path.join(a.out, "llama_cpp")
        peer = [sys.executable, os.path.join(ROOT, "bench", "lm_eval_llama_cpp.py")]
        margs = "model_path=%s,n_threads=%d" % (a.model, a.threads)
        report["peer_wall_s"] = run_lm_eval(peer, "llama-cpp-direct", margs, out_l, a)
        res_l, smp_l = load_run(out_l)
        report["llama_cpp"] = {"acc": metric(res_l, "parley_mc", "acc"),
                               "acc_norm": metric(res_l, "parley_mc", "acc_norm"),
                               "exact_match": metric(res_l, "parley_gen", "exact_match")}
        report["mc"] = compare_mc(smp_p["parley_mc"], smp_l["parley_mc"])
        report["gen"] = compare_gen(smp_p["parley_gen"], smp_l["parley_gen"])
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print_summary(report)


def print_summary(r):
    print("\nmodel %s, batch %d, %d threads" % (os.path.basename(r["model"]), r["batch_size"],
                                              r["threads"]))
    print("%-12s %8s %8s %12s %8s" % ("", "acc", "acc_norm", "exact_match", "wall s"))
    for side, wall in (("parley", "parley_wall_s"), ("llama_cpp", "peer_wall_s")):
        if side in r:
            m = r[side]
            print("%-12s %8.4f %8.4f %12.4f %8.1f" % (side, m["acc"], m["acc_norm"],
                                                    m["exact_match"], r[wall]))
    if "mc" in r:
        mc, gen, tok = r["mc"], r["gen"], r["tokenization"]
        print("tokenization: %d texts, %d differ" % (tok.get("texts", 0),
                                                     len(tok.get("differ", []))))
        print("loglikelihood per choice (%d): |d| max %.4f, mean %.4f nats; "
              "picked choice differs on %d items, acc on %d" % (
                  mc["choices"], mc["max_abs_diff"], mc["mean_abs_diff"],
                  len(mc["pick_differs"]), mc["acc_items_differ"]))
        for f in mc["pick_differs"]:
            print("  doc %d %r: parley picks %d (margin %.3f), llama.cpp %d (margin %.3f), "
                  "target %s, max |d| %.3f" % (f["doc_id"], f["question"], f["parley_pick"],
                                               f["parley_margin"], f["peer_pick"],
                                               f["peer_margin"], f["target"],
                                               f["max_choice_diff"]))
        print("generations (%d): %d differ, exact_match on %d items" % (
            gen["items"], len(gen["generations_differ"]), gen["em_items_differ"]))
        for g in gen["generations_differ"]:
            print("  doc %d %r: parley %r, llama.cpp %r (target %r)" % (
                g["doc_id"], g["question"], g["parley"], g["peer"], g["target"]))


if __name__ == "__main__":
    main()

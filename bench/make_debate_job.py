#!/usr/bin/env python3
"""make_debate_job.py - scale examples/debate.yaml up for the makespan
benchmark: N questions (the example's 20, cycled, with unique ids), the same
agents, rounds and dependencies; max_tokens and the engine's sequence bound
set from the command line. Prints the job file (YAML) on stdout.

    bench/make_debate_job.py --questions 200 --max-tokens 64 > /tmp/debate200.yaml
"""
import argparse
import copy
import pathlib
import sys

import yaml


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=None, help="default: the example's")
    ap.add_argument("--max-retries", type=int, default=None, help="default: the example's")
    ap.add_argument("--temperature", type=float, default=None,
                    help="job and agent temperature (default: the example's)")
    ap.add_argument("--no-validation", action="store_true",
                    help="accept every reply: the same work (12 requests a question) for any strategy")
    ap.add_argument("--prompt-layout", choices=["seed", "shared_prefix"], default=None,
                    help="the job's prompt_layout (default: the example's)")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="every model's max_num_seqs_upper_bound (default: the example's)")
    ap.add_argument("--experiment", default="debate_scaled")
    ap.add_argument("--example", default=str(pathlib.Path(__file__).resolve().parent.parent
                                             / "examples" / "debate.yaml"))
    a = ap.parse_args()
    job = yaml.safe_load(open(a.example))
    base = job["questions"]
    qs = []
    for i in range(a.questions):
        q = copy.deepcopy(base[i % len(base)])
        q["id"] = "%s_%04d" % (q["id"], i)
        qs.append(q)
    job["questions"] = qs
    job["experiment"] = a.experiment
    job["sampling"]["max_tokens"] = a.max_tokens
    if a.temperature is not None:
        job["sampling"]["temperature"] = a.temperature
        for ag in job["agent_definitions"]:
            ag.pop("temperature", None)
    if a.no_validation:
        job["validation"] = {"enabled": False}
    if a.prompt_layout is not None:
        job["prompt_layout"] = a.prompt_layout
    if a.max_num_seqs is not None:
        for md in job["model_definitions"].values():
            md.setdefault("vllm_config", {})["max_num_seqs_upper_bound"] = a.max_num_seqs
    if a.rounds is not None:
        job["num_rounds"] = a.rounds
    if a.max_retries is not None:
        job["max_retries"] = a.max_retries
    yaml.safe_dump(job, sys.stdout, sort_keys=False, width=120)


if __name__ == "__main__":
    main()

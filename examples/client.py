#!/usr/bin/env python3
"""client.py - submit a multi-agent job to a parley server, follow its events
over SSE, and print each question's answer.

    parley serve --backend mock --mock-mode echo &      # or a real model
    python3 examples/client.py --url http://127.0.0.1:8000 --model mock

Uses only `requests` and the standard library. --tokens streams the agents'
token deltas too. The job is the same schema as examples/debate.yaml, built
here as JSON (the server's models are referred to by name).
"""
import argparse
import json
import sys

import requests

QUESTIONS = [
    ("geo_01", "What is the capital of Australia?", ["Sydney", "Melbourne", "Canberra", "Perth"], "C"),
    ("sci_02", "What is the chemical symbol for sodium?", ["So", "Na", "Sd", "S"], "B"),
    ("math_01", "What is 17 multiplied by 6?", ["96", "102", "108", "112"], "B"),
    ("hist_01", "In which year did the Berlin Wall fall?", ["1987", "1989", "1991", "1993"], "B"),
    ("cs_03", "Which sorting algorithm is stable?",
     ["Heapsort", "Quicksort", "Merge sort", "Selection sort"], "C"),
]


def make_job(model, experiment, rounds):
    participants = [
        {"id": f"spkr_{i:03d}", "role": "participant", "model": model,
         "system_prompt": persona}
        for i, persona in enumerate([
            "You are a careful participant in a debate.",
            "You are a skeptical participant; look for flaws.",
            "You are a concise participant.",
        ])
    ]
    moderator = {
        "id": "mod_001", "role": "moderator", "model": model,
        "system_prompt": "You moderate the debate and decide.",
        "speak_after_within_round": [p["id"] for p in participants],
    }
    return {
        "experiment": experiment,
        "models": {model: {}},
        "agents": participants + [moderator],
        "num_rounds": rounds,
        "max_retries": 2,
        "sampling": {"temperature": 0.7, "max_tokens": 1024},
        "questions": [
            {"id": qid, "text": text, "choices": choices, "answer": answer}
            for qid, text, choices, answer in QUESTIONS
        ],
    }


def sse_events(resp):
    """Yield (event, data) pairs from a text/event-stream response."""
    event, data = None, []
    for raw in resp.iter_lines(decode_unicode=True):
        if raw is None:
            continue
        if raw == "":
            if data:
                yield event or "message", json.loads("\n".join(data))
            event, data = None, []
        elif raw.startswith("event:"):
            event = raw[6:].strip()
        elif raw.startswith("data:"):
            data.append(raw[5:].lstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="mock", help="a model the server serves")
    ap.add_argument("--experiment", default="client_demo")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", action="store_true", help="print token deltas")
    args = ap.parse_args()

    r = requests.post(f"{args.url}/v1/jobs", json=make_job(args.model, args.experiment, args.rounds))
    if r.status_code != 201:
        err = r.json().get("error", {})
        print(f"job refused ({r.status_code}): {err.get('message')}", file=sys.stderr)
        for p in err.get("problems", []):
            print(f"  {p['path']}: {p['message']}", file=sys.stderr)
        return 2
    job = r.json()
    print(f"job {job['id']} submitted ({job['progress']['total']} questions)")

    url = f"{args.url}/v1/jobs/{job['id']}/events" + ("?tokens=1" if args.tokens else "")
    answers, status = {}, None
    with requests.get(url, stream=True, timeout=(5, None)) as resp:
        resp.raise_for_status()
        for event, data in sse_events(resp):
            if event == "state":
                p = data["progress"]
                print(f"state: {data['state']}, {p['succeeded']}/{p['total']} done")
            elif event == "token":
                sys.stdout.write(data["delta"])
                sys.stdout.flush()
            elif event == "message_completed":
                mark = "ok" if data["valid"] else "invalid"
                print(f"\n[{data['question_id']}] round {data['round']} {data['agent_id']}: "
                      f"answer {data.get('answer')} ({mark})")
            elif event == "reprompt":
                print(f"[{data['question_id']}] re-prompting {data['agent_id']}")
            elif event == "conversation_completed":
                answers[data["question_id"]] = data.get("answer")
            elif event == "conversation_failed":
                answers[data["question_id"]] = None
                print(f"[{data['question_id']}] failed: {data.get('error')}")
            elif event == "job_completed":
                status = data["status"]
                break

    truth = {qid: ans for qid, _, _, ans in QUESTIONS}
    print("\nquestion   answer  expected")
    for qid, _, _, _ in QUESTIONS:
        print(f"{qid:10} {str(answers.get(qid)):7} {truth[qid]}")
    if status:
        p = status["progress"]
        print(f"\n{p['succeeded']}/{p['total']} succeeded, {p['failed']} failed; "
              f"transcripts: GET /v1/jobs/{job['id']}/transcripts/<question_id>")
    return 0 if status and status["progress"]["succeeded"] == status["progress"]["total"] else 1


if __name__ == "__main__":
    sys.exit(main())

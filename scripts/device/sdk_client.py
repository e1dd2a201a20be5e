#!/usr/bin/env python3
"""sdk_client.py - N concurrent streaming chat completions through the
official `openai` SDK (AsyncOpenAI; carried to the GPU machine as wheels),
with usage in the last chunk (stream_options.include_usage).

Every request must complete and its usage must be exact:
  - completion_tokens == max_tokens (ignore_eos, so the length is known);
  - prompt_tokens == the server's /tokenize count of the same messages with
    the generation prompt (one tokenizer, two code paths: the request's
    usage and the tokenize endpoint);
  - total_tokens == prompt_tokens + completion_tokens.
A second mode sends constrained requests (response_format json_schema with
an enum and an integer): every reply that stops by itself must parse and
match the schema (those cut at max_tokens are counted apart).

usage: sdk_client.py --port P [--requests N] [--max-tokens T] [--constrained]
                     --out F.json
Prints one summary line (JSON); exit status 1 when any check fails.
"""
import argparse
import asyncio
import json
import sys
import time
import urllib.request

import openai

SCHEMA = {"type": "object",
          "properties": {"answer": {"type": "string", "enum": ["A", "B", "C", "D"]},
                         "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}


def messages(i):
    return [{"role": "system", "content": "You answer multiple-choice questions."},
            {"role": "user", "content": f"Question {i}: which of A, B, C or D is "
                                        f"{i * 7919 % 1000}? Reply in JSON."}]


def tokenize_count(port, model, msgs):
    body = json.dumps({"model": model, "messages": msgs,
                       "add_generation_prompt": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["count"]


def check_constrained(text):
    """The reply against SCHEMA, by hand (no jsonschema package there)."""
    try:
        v = json.loads(text)
    except ValueError as e:
        return f"not JSON: {e}: {text[:120]!r}"
    if not isinstance(v, dict) or set(v) != {"answer", "confidence"}:
        return f"keys: {text[:120]!r}"
    if v["answer"] not in ("A", "B", "C", "D"):
        return f"answer {v['answer']!r}"
    c = v["confidence"]
    if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c <= 100:
        return f"confidence {c!r}"
    return None


async def one(client, model, i, a, res):
    r = {"i": i, "ok": False, "text": "", "usage": None, "error": None, "ttft": None,
         "finish": None}
    kw = {}
    if a.constrained:
        kw["response_format"] = {"type": "json_schema",
                                 "json_schema": {"name": "answer", "schema": SCHEMA,
                                                 "strict": True}}
    else:
        kw["extra_body"] = {"ignore_eos": True}
    t0 = time.monotonic()
    try:
        stream = await client.chat.completions.create(
            model=model, messages=messages(i), max_tokens=a.max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True}, **kw)
        async for ch in stream:
            if ch.usage is not None:
                r["usage"] = ch.usage.model_dump()
            for c in ch.choices:
                if c.finish_reason:
                    r["finish"] = c.finish_reason
                if c.delta and c.delta.content:
                    if r["ttft"] is None:
                        r["ttft"] = time.monotonic() - t0
                    r["text"] += c.delta.content
        r["ok"] = True
    except Exception as e:  # noqa: BLE001 - recorded per request
        r["error"] = repr(e)[:300]
    res[i] = r


def verify(r, a, prompt_count):
    if not r["ok"]:
        return r["error"]
    u = r["usage"]
    if u is None:
        return "no usage chunk"
    if u["prompt_tokens"] != prompt_count:
        return f"prompt_tokens {u['prompt_tokens']} != /tokenize {prompt_count}"
    if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
        return f"total_tokens {u['total_tokens']}"
    if a.constrained:
        if not 0 < u["completion_tokens"] <= a.max_tokens:
            return f"completion_tokens {u['completion_tokens']}"
        if r["finish"] != "stop":   # cut at max_tokens: a prefix, not a reply
            return None if r["finish"] == "length" else f"finish_reason {r['finish']}"
        return check_constrained(r["text"])
    if u["completion_tokens"] != a.max_tokens:
        return f"completion_tokens {u['completion_tokens']} != max_tokens {a.max_tokens}"
    return None


async def run(a):
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{a.port}/v1", api_key="none",
                                max_retries=0, timeout=900)
    model = (await client.models.list()).data[0].id
    res = {}
    t0 = time.monotonic()
    await asyncio.gather(*(one(client, model, i, a, res) for i in range(a.requests)))
    wall = time.monotonic() - t0
    rs = [res[i] for i in range(a.requests)]
    bad = []
    for r in rs:
        why = verify(r, a, tokenize_count(a.port, model, messages(r["i"])))
        r["check"] = why
        if why:
            bad.append(f"{r['i']}: {why}")
    gen = sum(r["usage"]["completion_tokens"] for r in rs if r["usage"])
    ttft = sorted(r["ttft"] for r in rs if r["ttft"] is not None)
    summary = {"client": "openai " + openai.__version__, "constrained": a.constrained,
               "requests": a.requests, "passed": a.requests - len(bad),
               "completion_tokens": gen,
               "cut_at_max_tokens": sum(r["finish"] == "length" for r in rs), "wall_s": round(wall, 2),
               "tok_per_s": round(gen / wall, 1) if wall else 0,
               "ttft_p50_ms": round(ttft[len(ttft) // 2] * 1e3, 1) if ttft else None,
               "ttft_p99_ms": round(ttft[min(len(ttft) - 1, int(.99 * len(ttft)))] * 1e3, 1)
               if ttft else None, "failures": bad[:5]}
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "results": rs}, f)
    print(json.dumps(summary))
    await client.close()
    return 0 if not bad else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--constrained", action="store_true")
    ap.add_argument("--out", required=True)
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

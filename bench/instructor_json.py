#!/usr/bin/env python3
"""instructor_json.py - how often structured-output clients get a valid
object from parley, and from llama-server on the same GGUF, with greedy
decoding over a fixed set of prompts and pydantic models (issue 34).

Two ways a client asks for JSON, each counted over the same 16 cases:
  instructor JSON mode: instructor.from_openai(..., mode=Mode.JSON): the
      schema goes into the system message and the request carries
      response_format {"type": "json_object"}; success = instructor returns
      the validated model on its first try (max_retries=0);
  openai .parse(): client.chat.completions.parse(response_format=Model):
      a strict json_schema response_format; success = message.parsed is
      an instance of the model (no length error, no validation error).
--modes also takes instructor's JSON_SCHEMA and TOOLS modes.

Every request: temperature 0, max_tokens 256. The peer is llama.cpp's
llama-server (bench/build_llama_server.sh builds it); --no-peer skips it.
Prints the command, the CPU, the model, each side's rate per mode and the
cases that fail. Needs `pip install instructor` (bench only, not CI).

Usage, from the repository root:
  .venv/bin/python bench/instructor_json.py [--parley build/parley]
      [--llama-server PATH | --no-peer] [--threads 2] [--modes json,parse]
      [--extra=--structured-whitespace=compact]
"""
import argparse
import logging
import os
import sys
import time
import warnings
from typing import List, Literal, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_engine import DEFAULT_MODEL, LLAMA_BUILT, Server, free_port  # noqa: E402
from cpuinfo import describe  # noqa: E402

import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402


class User(BaseModel):
    name: str
    age: int


class City(BaseModel):
    name: str
    country: str
    population: int


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]


class Recipe(BaseModel):
    title: str
    ingredients: List[str]


class Book(BaseModel):
    title: str
    author: str
    year: int


class Contact(BaseModel):
    name: str
    email: str
    phone: Optional[str] = None


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    name: str
    address: Address


class Product(BaseModel):
    name: str
    price: float
    in_stock: bool


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: str


class Task(BaseModel):
    title: str
    done: bool


class TaskList(BaseModel):
    tasks: List[Task]


class Movie(BaseModel):
    title: str
    director: str
    genres: List[str]


class Ticket(BaseModel):
    category: Literal["bug", "feature", "question"]
    summary: str


class Meeting(BaseModel):
    topic: str
    participants: List[str]


class Country(BaseModel):
    name: str
    capital: str
    languages: List[str]


class Pet(BaseModel):
    name: str
    species: str
    age: int


class Order(BaseModel):
    order_id: int
    items: List[str]
    total: float


CASES = [
    (User, "John Doe is 30 years old."),
    (City, "Paris is the capital of France and has about 2100000 inhabitants."),
    (Sentiment, "Classify the sentiment: I love this phone, it works great!"),
    (Recipe, "Pancakes: mix flour, milk, eggs and sugar, then fry."),
    (Book, "'1984' was written by George Orwell and published in 1949."),
    (Contact, "Reach Alice Smith at alice@example.com or 555-1234."),
    (Person, "Bob lives at 12 Main Street in Springfield."),
    (Product, "The blue kettle costs 24.99 dollars and is in stock."),
    (Weather, "It is 18.5 degrees and sunny in Madrid today."),
    (TaskList, "My tasks: buy milk (done), call mom (not done)."),
    (Movie, "Inception, directed by Christopher Nolan, is a science fiction thriller."),
    (Ticket, "The app crashes when I press the save button."),
    (Meeting, "Anna, Ben and Carla will meet to discuss the budget."),
    (Country, "Canada's capital is Ottawa; people there speak English and French."),
    (Pet, "Rex is a 4 year old dog."),
    (Order, "Order 1042 contains a lamp and a chair, 89.5 in total."),
]
MAX_TOKENS = 256


def instructor_client(base, mode):
    import instructor
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0,
                           timeout=600)
    return instructor.from_openai(client, mode=getattr(instructor.Mode, mode))


def run_instructor(base, model, mode):
    client = instructor_client(base, mode)
    out = []
    for cls, text in CASES:
        try:
            client.chat.completions.create(
                model=model, response_model=cls, max_retries=0, temperature=0,
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": "Extract the data. " + text}])
            out.append((cls.__name__, True, ""))
        except Exception as e:  # noqa: BLE001 - any failure counts as one
            out.append((cls.__name__, False, type(e).__name__ + ": " + str(e)[:160]))
    return out


def run_parse(base, model):
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0,
                           timeout=600)
    out = []
    for cls, text in CASES:
        try:
            r = client.chat.completions.parse(
                model=model, response_format=cls, temperature=0, max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": "Extract the data. " + text}])
            ok = isinstance(r.choices[0].message.parsed, cls)
            out.append((cls.__name__, ok, "" if ok else "parsed is None"))
        except Exception as e:  # noqa: BLE001
            out.append((cls.__name__, False, type(e).__name__ + ": " + str(e)[:160]))
    return out


MODES = {"json": ("instructor JSON mode", lambda b, m: run_instructor(b, m, "JSON")),
         "json_schema": ("instructor JSON_SCHEMA mode",
                         lambda b, m: run_instructor(b, m, "JSON_SCHEMA")),
         "tools": ("instructor TOOLS mode", lambda b, m: run_instructor(b, m, "TOOLS")),
         "parse": ("openai .parse()", run_parse)}


def measure(name, srv, modes):
    base = "http://127.0.0.1:%d" % srv.port
    res = {}
    for m in modes:
        t0 = time.monotonic()
        rows = MODES[m][1](base, srv.model)
        res[m] = rows
        ok = sum(1 for r in rows if r[1])
        print("%-13s %-28s %2d/%d (%.0f%%)  %.0f s" % (name, MODES[m][0], ok, len(rows),
              100.0 * ok / len(rows), time.monotonic() - t0), flush=True)
        for case, good, why in rows:
            if not good:
                print("    fail %-10s %s" % (case, why.replace("\n", " ")), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parley", default=os.path.join("build", "parley"))
    ap.add_argument("--model", default=os.environ.get("PARLEY_MODEL", DEFAULT_MODEL))
    ap.add_argument("--llama-server", default=LLAMA_BUILT)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="json,parse")
    ap.add_argument("--extra", action="append", default=[],
                    help="an extra argument for parley serve (repeatable)")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("instructor").setLevel(logging.CRITICAL)
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit("unknown mode %r (one of %s)" % (m, ", ".join(MODES)))
    print("command: " + " ".join([sys.executable] + sys.argv))
    print("cpu: " + describe())
    print("model: %s; %d cases, temperature 0, max_tokens %d, load %.1f" %
          (a.model, len(CASES), MAX_TOKENS, os.getloadavg()[0]), flush=True)
    srv = Server("parley", [a.parley, "serve", "--port", "0", "--threads", str(a.threads),
                            "--model", a.model, "--log-level", "warn", *a.extra],
                 ready_line="parley listening on")
    try:
        measure("parley", srv, modes)
    finally:
        srv.stop()
    if a.no_peer or not os.path.exists(a.llama_server):
        print("peer: skipped" + ("" if a.no_peer else " (no %s)" % a.llama_server))
        return
    port = free_port()
    peer = Server("llama-server", [a.llama_server, "-m", a.model, "-t", str(a.threads),
                                   "-c", "4096", "--host", "127.0.0.1", "--port", str(port),
                                   "--no-webui", "--jinja"], port=port)
    try:
        measure("llama-server", peer, modes)
    finally:
        peer.stop()


if __name__ == "__main__":
    main()

"""The GBNF grammar parley sends a llama-server upstream (regex_gbnf.c)
against parley's own constraint core: on random regexes, choice lists and
JSON schemas, the grammar (judged by gbnf.py, an independent GBNF
interpreter) and parley's DFA (build/tests/gbnf_tool) accept and refuse the
same strings: strings the DFA samples, their mutations, and random text."""
import json
import os
import random
import subprocess

import pytest

from conftest import parley_bin
from gbnf import Grammar, GrammarError
from gbnf_cases import ALPHABET, mutate, rand_schema, rand_seq

TOOL = os.path.join(os.path.dirname(parley_bin()), "tests", "gbnf_tool")


@pytest.fixture(scope="module")
def tool():
    if not os.path.exists(TOOL):
        pytest.skip("no %s (build the tests)" % TOOL)
    p = subprocess.Popen([TOOL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         encoding="utf-8")

    def ask(req):
        p.stdin.write(json.dumps(req) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())
    yield ask
    p.stdin.close()
    assert p.wait(timeout=10) == 0


def check_agreement(ask, kind, text, r):
    """Both judges on DFA samples, mutations and random strings; returns the
    numbers accepted and refused, so the caller knows both sides ran."""
    first = ask({"kind": kind, "text": text, "samples": 12, "seed": r.randrange(1 << 30)})
    if "error" in first:
        return None
    g = Grammar(first["gbnf"])
    strings = list(first["samples"])
    strings += [mutate(r, s) for s in first["samples"]]
    strings += ["".join(r.choice(ALPHABET) for _ in range(r.randint(0, 6))) for _ in range(8)]
    dfa = ask({"kind": kind, "text": text, "samples": 0, "strings": strings})["verdicts"]
    for s, want in zip(strings, dfa):
        assert g.matches(s) == want, "%s %r: grammar %s, DFA %s on %r\n%s" % (
            kind, text, not want, want, s, first["gbnf"])
    assert all(dfa[:len(first["samples"])]), "a DFA sample the DFA refuses"
    return sum(dfa), len(dfa) - sum(dfa)


def run_many(ask, kind, gen, n, seed):
    r = random.Random(seed)
    acc = ref = done = 0
    for _ in range(n):
        res = check_agreement(ask, kind, gen(r), r)
        if res:
            acc, ref, done = acc + res[0], ref + res[1], done + 1
    assert done >= n // 2 and acc > 50 and ref > 50, (done, acc, ref)


def test_random_regexes(tool):
    run_many(tool, "regex", lambda r: rand_seq(r) or "a", 200, 40)


def test_random_schemas(tool):
    run_many(tool, "json_schema", lambda r: json.dumps(rand_schema(r)), 150, 41)


def test_choices_and_json_object(tool):
    r = random.Random(42)
    for _ in range(30):
        words = ["".join(r.choice(ALPHABET[:-1]) for _ in range(r.randint(1, 4)))
                 for _ in range(r.randint(1, 4))]
        words = [w for w in words if w] or ["x"]
        assert check_agreement(tool, "choice", json.dumps(words), r)
    assert check_agreement(tool, "json_object", "", r)


def test_job_answer_regex(tool):
    """The constrained-mode answer line of examples/debate.yaml."""
    res = check_agreement(tool, "regex", "(?:[ -~]{1,400}\\n)?Answer: [A-D]", random.Random(1))
    assert res and res[0] > 0 and res[1] > 0


def test_star_over_empty_is_not_left_recursive(tool):
    """llama.cpp refuses x* when x matches "" (left recursion): the grammar
    writes the star over x's non-empty parts instead."""
    out = tool({"kind": "regex", "text": "(a?b?)*c(d|)+", "samples": 0})
    assert "(\"a\" | \"b\")*" in out["gbnf"] and "(\"d\")*" in out["gbnf"], out["gbnf"]


def test_interpreter_itself():
    """gbnf.py on grammars written by hand (llama.cpp's README examples)."""
    g = Grammar('root ::= "a" b{2,3} ("x" | [0-9])?\nb ::= [^\\n\\x41]  # comment\n')
    assert g.matches("abb") and g.matches("abbb7") and not g.matches("ab")
    assert not g.matches("aAbb") and not g.matches("abbbb")
    g = Grammar('root ::= [\\u00E9-\\U0001F600]+ | "\\x22"')
    assert g.matches("é😀") and g.matches('"') and not g.matches("e")
    with pytest.raises(GrammarError):
        Grammar('root ::= "a" \\q')


FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gbnf_llama.json")


def test_llama_cpp_verdicts(tool):
    """llama.cpp's own grammar sampler (tests/fixtures/gen_gbnf_llama.py,
    llama-cpp-python 0.3.16) on grammars regex_gbnf.c wrote: gbnf.py judges
    every stored string as llama.cpp did, and parley's DFA does too where
    the grammar is still the one written today."""
    cases = json.load(open(FIXTURE, encoding="utf-8"))["cases"]
    n = same_grammar = 0
    for c in cases:
        g = Grammar(c["gbnf"])
        for s, want in zip(c["strings"], c["llama"]):
            assert g.matches(s) == want, "gbnf.py vs llama.cpp on %r\n%s" % (s, c["gbnf"])
            n += 1
        now = tool({"kind": c["kind"], "text": c["text"], "samples": 0, "strings": c["strings"]})
        if now.get("gbnf") == c["gbnf"]:
            same_grammar += 1
            assert now["verdicts"] == c["llama"], "DFA vs llama.cpp: %s %r" % (c["kind"], c["text"])
    assert n > 1000 and same_grammar > len(cases) // 2, (n, same_grammar)

"""Random constraints and string mutations for the GBNF tests
(test_gbnf.py, tests/fixtures/gen_gbnf_llama.py): regexes in the syntax
parley's regex.h takes, JSON schemas in what json_schema.h takes."""

ALPHABET = list("abcxyz019 _-.,:;\"'\\{}[]()\n\t") + ["é", "ü", "中", "😀", "\x7f", "\x00"]


def rand_atom(r, depth):
    k = r.randrange(11 if depth < 2 else 8)
    if k < 3:
        return r.choice(["a", "b", "c", "x", "0", "é", "中", "😀", "\\.", "\\-", " ", "\\n"])
    if k == 3:
        return r.choice(["[a-c]", "[^ab]", "[0-9x]", "[éü]", "[a\\-z]", "[^\\n]"])
    if k == 4:
        return r.choice(["\\d", "\\w", "\\s", "\\D", "\\W", "\\S"])
    if k == 5:
        return "."
    if k in (6, 7):
        return "\\" + r.choice("{}()[]|*+?")
    alts = [rand_seq(r, depth + 1) for _ in range(r.randint(1, 3))]
    return "(" + r.choice(["", "?:"]) + "|".join(alts) + ")"


def rand_quant(r):
    return r.choice(["", "", "", "?", "*", "+", "{2}", "{0,2}", "{1,3}", "{2,}", "*?", "{0}"])


def rand_seq(r, depth=0):
    return "".join(rand_atom(r, depth) + rand_quant(r) for _ in range(r.randint(0, 4 - depth)))


def rand_schema(r, depth=0):
    k = r.randrange(10 if depth < 2 else 6)
    if k == 0:
        return {"type": "string", "maxLength": r.randint(0, 4)}
    if k == 1:
        return {"type": "integer", "minimum": r.randint(-20, 0), "maximum": r.randint(0, 300)}
    if k == 2:
        return {"type": r.choice(["boolean", "null", "number", "integer"])}
    if k == 3:
        return {"enum": r.sample(["red", "é", 1, 2.5, None, True, "a\"b"], r.randint(1, 3))}
    if k == 4:
        return {"type": "string", "pattern": r.choice(["^[a-z]{1,3}$", "^x?y$", "[0-9]+"])}
    if k == 5:
        return {"const": r.choice(["ok", 7, False])}
    if k in (6, 7):
        props = {"p%d" % i: rand_schema(r, depth + 1) for i in range(r.randint(1, 3))}
        req = r.sample(sorted(props), r.randint(0, len(props)))
        return {"type": "object", "properties": props, "required": req,
                "additionalProperties": False}
    if k == 8:
        return {"type": "array", "items": rand_schema(r, depth + 1), "maxItems": r.randint(1, 3)}
    return {"anyOf": [rand_schema(r, depth + 1), rand_schema(r, depth + 1)]}


def mutate(r, s):
    s = list(s)
    for _ in range(r.randint(1, 2)):
        k = r.randrange(3)
        i = r.randint(0, len(s))
        if k == 0 and s:
            del s[min(i, len(s) - 1)]
        elif k == 1:
            s.insert(i, r.choice(ALPHABET))
        elif s:
            s[min(i, len(s) - 1)] = r.choice(ALPHABET)
    return "".join(s)



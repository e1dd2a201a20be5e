"""A small GBNF interpreter (llama.cpp's grammar format), written from its
description in llama.cpp's grammars/README.md, independent of parley's C
code: parse a grammar, then tell whether a whole string matches rule root.

Supported: rules `name ::= alternatives`, "literals", [classes] and [^...]
with ranges, escapes \\xHH \\uHHHH \\UHHHHHHHH \\t \\r \\n \\\\ \\" \\[ \\],
rule references, (groups), '.', the quantifiers * + ? {m} {m,} {m,n}, and
# comments. Matching works on code points, as llama.cpp's does: each node
gives the set of end positions it can reach from a start position
(memoised), so ambiguity costs no backtracking."""
import re

ESC = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}


class GrammarError(ValueError):
    pass


class Parser:
    def __init__(self, text):
        self.s = text
        self.i = 0
        self.rules = {}

    def err(self, msg):
        raise GrammarError("%s at offset %d: %r" % (msg, self.i, self.s[self.i:self.i + 20]))

    def space(self, newline_ok):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                self.i += 1
            else:
                break

    def name(self):
        m = re.compile(r"[A-Za-z0-9-]+").match(self.s, self.i)
        if not m:
            self.err("expecting a name")
        self.i = m.end()
        return m.group()

    def char(self):
        s = self.s
        if s[self.i] == "\\":
            e = s[self.i + 1]
            if e in "xuU":
                n = {"x": 2, "u": 4, "U": 8}[e]
                h = s[self.i + 2:self.i + 2 + n]
                if len(h) != n or not re.fullmatch(r"[0-9A-Fa-f]+", h):
                    self.err("bad \\%s escape" % e)
                self.i += 2 + n
                return int(h, 16)
            if e not in ESC:
                self.err("unknown escape")
            self.i += 2
            return ord(ESC[e])
        c = s[self.i]
        self.i += 1
        return ord(c)

    def alternatives(self, nested):
        alts = [self.sequence(nested)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return ("alt", alts)

    def sequence(self, nested):
        items = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                lit = []
                while True:
                    if self.i >= len(s):
                        self.err("unterminated literal")
                    if s[self.i] == '"':
                        break
                    lit.append(self.char())
                self.i += 1
                items.append(("lit", lit))
            elif c == "[":
                self.i += 1
                neg = self.i < len(s) and s[self.i] == "^"
                self.i += neg
                ranges = []
                while True:
                    if self.i >= len(s):
                        self.err("unterminated class")
                    if s[self.i] == "]":
                        break
                    lo = self.char()
                    hi = lo
                    if s[self.i] == "-" and s[self.i + 1] != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                items.append(("class", neg, ranges))
            elif re.match(r"[A-Za-z0-9-]", c):
                items.append(("ref", self.name()))
            elif c == "(":
                self.i += 1
                self.space(True)
                inner = self.alternatives(True)
                if self.i >= len(s) or s[self.i] != ")":
                    self.err("expecting ')'")
                self.i += 1
                items.append(inner)
            elif c == ".":
                self.i += 1
                items.append(("any",))
            elif c in "*+?{":
                if not items:
                    self.err("quantifier with nothing before it")
                lo, hi = self.quantifier()
                items[-1] = ("rep", items[-1], lo, hi)
            else:
                break
            self.space(nested)
        return ("seq", items)

    def quantifier(self):
        c = self.s[self.i]
        self.i += 1
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        m = re.compile(r"\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
        if not m:
            self.err("bad {m,n}")
        self.i = m.end()
        lo = int(m.group(1))
        hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
        return lo, hi

    def parse(self):
        self.space(True)
        while self.i < len(self.s):
            name = self.name()
            self.space(False)
            if not self.s.startswith("::=", self.i):
                self.err("expecting ::=")
            self.i += 3
            self.space(True)
            self.rules[name] = self.alternatives(False)
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                self.err("expecting newline or end")
            self.space(True)
        if "root" not in self.rules:
            raise GrammarError("no rule root")
        return self.rules


class Grammar:
    def __init__(self, text):
        self.rules = Parser(text).parse()

    def matches(self, text):
        cps = [ord(c) for c in text]
        memo = {}

        def ends(node, i):
            key = (id(node), i)
            if key in memo:
                return memo[key]
            memo[key] = frozenset()        # a left-recursive loop finds nothing
            r = frozenset(step(node, i))
            memo[key] = r
            return r

        def step(node, i):
            t = node[0]
            if t == "alt":
                out = set()
                for a in node[1]:
                    out |= ends(a, i)
                return out
            if t == "seq":
                pos = {i}
                for it in node[1]:
                    pos = set().union(*(ends(it, p) for p in pos)) if pos else set()
                return pos
            if t == "lit":
                n = len(node[1])
                return {i + n} if cps[i:i + n] == node[1] else set()
            if t == "class":
                if i >= len(cps):
                    return set()
                inside = any(lo <= cps[i] <= hi for lo, hi in node[2])
                return {i + 1} if inside != node[1] else set()
            if t == "any":
                return {i + 1} if i < len(cps) else set()
            if t == "ref":
                if node[1] not in self.rules:
                    raise GrammarError("undefined rule %s" % node[1])
                return ends(self.rules[node[1]], i)
            if t == "rep":
                return repeat(node[1], node[2], node[3], i)
            raise GrammarError("bad node %r" % (t,))

        def repeat(item, lo, hi, i):
            out, frontier, seen, k = set(), {i}, set(), 0
            while frontier and (hi is None or k <= hi):
                if k >= lo:
                    out |= frontier
                if hi is not None and k == hi:
                    break
                nxt = set().union(*(ends(item, p) for p in frontier))
                if k >= lo:                  # past the minimum, a position once is enough
                    nxt -= seen
                    seen |= nxt
                frontier = nxt
                k += 1
            return out

        return len(cps) in ends(self.rules["root"], 0)

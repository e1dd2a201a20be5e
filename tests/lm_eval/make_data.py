#!/usr/bin/env python3
"""Write the two small local lm-evaluation-harness data sets the task YAMLs
beside this file read (no dataset hub is reachable from here):

  data/mc.jsonl   multiple choice (loglikelihood): {"question", "choices",
                  "answer"}: capitals, the next weekday, opposites, the
                  next number word, animal sounds; the right choice's
                  place is shuffled with a fixed seed.
  data/gen.jsonl  generate_until: {"question", "answer"}, one-word answers
                  after a fixed few-shot prefix (parley_gen.yaml).
  data/eos.jsonl  multiple choice whose choices are one token, the mark that
                  ends an assistant's reply in a ChatML conversation
                  (parley_eos.yaml): after most of them SmolLM2's next token
                  is its end-of-sequence, the case where lm_eval's
                  echo + logprobs slice needs that token's entry.

Deterministic: running it again rewrites the same bytes.
Usage: python3 tests/lm_eval/make_data.py
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Germany", "Berlin"),
            ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Egypt", "Cairo"),
            ("Russia", "Moscow"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("England", "London"), ("Austria", "Vienna"), ("Ireland", "Dublin")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"),
             ("fast", "slow"), ("happy", "sad"), ("open", "closed"), ("old", "new"),
             ("left", "right"), ("black", "white")]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
           "ten", "eleven", "twelve"]
SOUNDS = [("cow", "moo"), ("dog", "woof"), ("cat", "meow"), ("duck", "quack"),
          ("pig", "oink"), ("sheep", "baa")]


def mc_item(rng, question, right, pool):
    wrong = rng.sample([p for p in pool if p != right], 3)
    choices = wrong + [right]
    rng.shuffle(choices)
    return {"question": question, "choices": choices, "answer": choices.index(right)}


def mc_items(rng):
    items = []
    caps = [c for _, c in CAPITALS]
    for country, cap in CAPITALS[:10]:
        items.append(mc_item(rng, "Q: What is the capital of %s?\nA:" % country, cap, caps))
    for i, d in enumerate(DAYS):
        items.append(mc_item(rng, "The day after %s is" % d, DAYS[(i + 1) % 7], DAYS))
    opp = [o for _, o in OPPOSITES]
    for w, o in OPPOSITES[:8]:
        items.append(mc_item(rng, "The opposite of %s is" % w, o, opp))
    for i in range(8):
        q = "Counting: %s, %s, %s," % tuple(NUMBERS[i:i + 3])
        items.append(mc_item(rng, q, NUMBERS[i + 3], NUMBERS))
    snd = [s for _, s in SOUNDS]
    for a, s in SOUNDS:
        items.append(mc_item(rng, "The %s says" % a, s, snd))
    return items


def gen_items():
    items = []
    for country, cap in CAPITALS[:8]:
        items.append({"question": "What is the capital of %s?" % country, "answer": cap})
    for i, d in enumerate(DAYS[1:], 1):
        items.append({"question": "What day comes after %s?" % d, "answer": DAYS[(i + 1) % 7]})
    for i, m in enumerate(MONTHS[1:9], 1):
        items.append({"question": "What month comes after %s?" % m, "answer": MONTHS[i + 1]})
    for w, o in OPPOSITES[3:]:
        items.append({"question": "What is the opposite of %s?" % w, "answer": o})
    return items


EOS_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
EOS_REPLIES = [("What color is the sky on a clear day?", "The sky is blue"),
               ("What is the capital of France?", "The capital of France is Paris"),
               ("What is the opposite of up?", "The opposite of up is down"),
               ("What is the capital of Italy?", "The capital of Italy is Rome"),
               ("What color is grass?", "Grass is green"),
               ("What is the opposite of hot?", "The opposite of hot is cold"),
               ("What animal says moo?", "A cow says moo"),
               ("What is two plus two?", "Two plus two is four")]
EOS_MARKS = [".", "!", "?", ","]


def eos_items(rng):
    items = []
    for q, reply in EOS_REPLIES:
        marks = EOS_MARKS[:]
        rng.shuffle(marks)
        items.append({"context": EOS_SYSTEM + "<|im_start|>user\n" + q +
                      "<|im_end|>\n<|im_start|>assistant\n" + reply,
                      "choices": marks, "answer": marks.index(".")})
    return items


def write(name, items):
    with open(os.path.join(HERE, "data", name), "w") as f:
        for it in items:
            f.write(json.dumps(it, sort_keys=True) + "\n")


def main():
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    write("mc.jsonl", mc_items(random.Random(19)))
    write("gen.jsonl", gen_items())
    write("eos.jsonl", eos_items(random.Random(34)))


if __name__ == "__main__":
    main()

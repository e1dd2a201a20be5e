#!/usr/bin/env bash
# check_families.sh - a model family is described in one place: its file in
# backends/engine/families/ (issue 46, DESIGN.md "Model families"). Outside
# that folder nothing
#   - names an architecture enum (PL_MODEL_ARCH_*: gone; a new one would be
#     a second table),
#   - refers to a built-in family's row (pl_family_<name>) to compare
#     against it, except tests/ (which check what a fixture loads as),
#   - compares a string with a family's GGUF or Hugging Face name
#     (strcmp/strncmp/strcasecmp/memcmp against the literal; tests/ may, to
#     check what a file says), or compares a model's arch_name at all.
# The names are read from the family files themselves. Exits 1 and lists
# every violation.
set -u
cd "$(dirname "$0")/.."

FAM=backends/engine/families
# Sources outside the family folder (the shared builders live inside it).
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v "^$FAM/" |
        while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done)

# Words that name a family and something else: "file:name" per line.
# tokenizer_gguf.c compares tokenizer.ggml.model, whose SentencePiece
# vocabularies are called "llama".
allow="backends/text/tokenizer_gguf.c:llama"

bad=0
report() { echo "check_families: $1"; bad=1; }

while IFS= read -r hit; do
    report "$hit: the architecture enum is gone; ask the family (families/family.h)"
done < <(grep -n 'PL_MODEL_ARCH_' $files /dev/null)

while IFS= read -r hit; do
    case "$hit" in tests/*) continue ;; esac
    report "$hit: a family's row outside its file; ask pl_family's fields instead"
done < <(grep -nE '&pl_family_[a-z0-9_]+\b|\bpl_family_[a-z0-9_]+\.' $files /dev/null)

names=$( (grep -ho '\.name = "[^"]*"' $FAM/*.c | sed 's/.*"\(.*\)"/\1/'
          grep -ho '{"[A-Za-z0-9]*For[A-Za-z]*"' $FAM/*.c | sed 's/{"\(.*\)"/\1/') | sort -u)
for n in $names; do
    while IFS= read -r hit; do
        f=${hit%%:*}
        case "$f" in tests/*) continue ;; esac
        case "$allow" in *"$f:$n"*) continue ;; esac
        report "$hit: compares a family's name ('$n'); ask the family registry"
    done < <(grep -nE "(strn?cmp|strn?casecmp|memcmp)\(.*\"$n\"" $files /dev/null)
done

while IFS= read -r hit; do
    report "$hit: compares arch_name; ask m->family"
done < <(grep -nE '(strn?cmp|strn?casecmp|memcmp)\([^;]*arch_name' $files /dev/null)

exit $bad

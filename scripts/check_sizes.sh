#!/usr/bin/env bash
# check_sizes.sh - STYLE.md's size limits on the C/CUDA sources under src/,
# api/, schedulers/ and backends/: no file over 800 lines, no function over
# 80 lines. A function's length is the number of lines of its body, between
# the opening "{" and the closing "}" that stand alone at the start of a line
# (the project's style for function bodies; struct and table initialisers
# open their brace on the declaration's line, so they are not counted).
# The tests (C and Python under tests/, not the generated fixtures) get
# the file limit only: a test's body may run long where it reads as one
# story.
# Exits 1 and lists every violation.
set -u
cd "$(dirname "$0")/.."
MAX_FILE=${MAX_FILE:-800}
MAX_FUNC=${MAX_FUNC:-80}

files=$(git ls-files 'src/*' 'api/*' 'schedulers/*' 'backends/*' | grep -E '\.(c|h|cu|cuh)$')
bad=0
for f in $files; do
    [ -f "$f" ] || continue
    n=$(wc -l < "$f")
    if [ "$n" -gt "$MAX_FILE" ]; then
        echo "$f: $n lines (limit $MAX_FILE)"
        bad=1
    fi
    out=$(awk -v max="$MAX_FUNC" -v file="$f" '
        /^[A-Za-z_].*\(/ { sig = $0; sigline = NR }   # last signature-like line
        /^\{[[:space:]]*$/ { start = NR; name = sig; next }
        /^\}/ && start {
            len = NR - start - 1
            if (len > max) {
                sub(/\(.*/, "", name)
                n = split(name, w, /[ *]+/)
                printf "%s:%d: function %s is %d lines (limit %d)\n", file, sigline, w[n], len, max
            }
            start = 0
        }' "$f")
    if [ -n "$out" ]; then
        echo "$out"
        bad=1
    fi
done
for f in $(git ls-files 'tests/*' | grep -v '^tests/fixtures/' | grep -E '\.(c|h|py)$'); do
    [ -f "$f" ] || continue
    n=$(wc -l < "$f")
    if [ "$n" -gt "$MAX_FILE" ]; then
        echo "$f: $n lines (limit $MAX_FILE)"
        bad=1
    fi
done
if [ $bad = 0 ]; then
    echo "check_sizes: ok"
fi
exit $bad

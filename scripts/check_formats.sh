#!/usr/bin/env bash
# check_formats.sh - tool-call and reasoning formats are vtables
# (backends/text/tool_format.h, reasoning_format.h), one file each: nothing
# outside those files names a format, let alone compares its name. A
# format's name is a string literal ("hermes", "llama3", "mistral",
# "harmony", "qwen3", "generic") in C code (comments aside); the only
# places that may hold one are the format files and their tables (which
# look a name up for an option or a test), the tests, and the few files
# where the same word names something else (listed below, with why).
# Exits 1 and lists every violation.
set -u
cd "$(dirname "$0")/.."

names='hermes|llama3|mistral|harmony|qwen3|generic'

# Files whose literals of these words are not formats.
other_meaning() {
    case "$1" in
    backends/text/tool_*.c | backends/text/reasoning_*.c) return 0 ;;  # the formats
    backends/text/tool_format.[ch] | backends/text/reasoning_format.[ch]) return 0 ;;
    backends/text/pretokenize.c) return 0 ;;     # GGUF pre-tokenizer names
    backends/engine/model/* | backends/engine/families/*) return 0 ;;  # architectures, rope_scaling types
    tests/*) return 0 ;;
    esac
    return 1
}

bad=0
while IFS= read -r f; do
    other_meaning "$f" && continue
    # comments out: /* ... */ on one line, lines inside a block comment
    # (starting with '*'), and // comments
    # (and the --chat-template name table: [PL_CHAT_TMPL_X] = "name")
    hits=$(sed -E -e 's#/\*.*\*/##g' -e 's#^[[:space:]]*(/\*|\*).*##' -e 's#//.*##' \
               -e 's#\[PL_CHAT_TMPL_[A-Z0-9_]+\][[:space:]]*=[[:space:]]*"[a-z0-9]+"##g' "$f" |
           grep -nE "\"($names)\"") || continue
    while IFS= read -r h; do
        echo "$f:${h%%:*}: names a format: ${h#*:}"
        bad=1
    done <<< "$hits"
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

if [ $bad = 0 ]; then
    echo "check_formats: ok"
fi
exit $bad

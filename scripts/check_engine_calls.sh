#!/usr/bin/env bash
# check_engine_calls.sh - the engine's files call one way (STYLE.md: a split
# along a seam, not files that call each other in circles through
# engine_internal.h).
#
#   scripts/check_engine_calls.sh BUILD_DIR [FOLDER ...]
#
# Reads the objects BUILD_DIR compiled from each FOLDER/*.c (default
# backends/engine; the files of the folder itself, not its subfolders) and
# draws the file graph from their symbols: a -> b when a.c refers to a
# global that b.c defines (a call, or a function or object whose address
# it takes). Exits 1 when the graph has a cycle, listing each one's files
# and the symbols of its edges; prints the layers (files that call only
# files of the layers below) when there is none.
set -u
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || [ ! -f "$1/compile_commands.json" ]; then
    echo "usage: $0 BUILD_DIR [FOLDER ...] (BUILD_DIR: a configured and built meson dir)" >&2
    exit 2
fi
build=$1
shift
[ $# -gt 0 ] || set -- backends/engine

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# source file -> object, from meson's compile_commands.json ("file" comes
# before "output" in each entry; paths relative to BUILD_DIR)
awk -F'"' '/"file":/ {f = $4} /"output":/ {print f "\t" $4}' \
    "$build/compile_commands.json" >"$tmp/objs"

status=0
for folder in "$@"; do
    folder=${folder%/}
    : >"$tmp/defs"
    : >"$tmp/refs"
    n=0
    for src in "$folder"/*.c; do
        [ -e "$src" ] || continue
        obj=$(awk -F'\t' -v s="$src" '{f = $1; sub(/^(\.\.\/)+/, "", f)} f == s {print $2; exit}' \
            "$tmp/objs")
        name=$(basename "$src" .c)
        if [ -z "$obj" ]; then
            continue    # not compiled in this configuration (cuda/ without nvcc)
        fi
        if [ ! -f "$build/$obj" ]; then
            echo "$0: $build/$obj missing: build $build first" >&2
            exit 2
        fi
        n=$((n + 1))
        nm --defined-only -g "$build/$obj" | awk -v f="$name" 'NF == 3 {print $3 "\t" f}' \
            >>"$tmp/defs"
        nm -u "$build/$obj" | awk -v f="$name" '{print f "\t" $NF}' >>"$tmp/refs"
    done
    if [ "$n" = 0 ]; then
        echo "$0: no compiled .c files in $folder" >&2
        exit 2
    fi
    # edges: file \t file \t symbol (references between files of the folder)
    awk -F'\t' 'NR == FNR {def[$1] = $2; next}
                ($2 in def) && def[$2] != $1 {print $1 "\t" def[$2] "\t" $2}' \
        "$tmp/defs" "$tmp/refs" | sort -u >"$tmp/edges"
    # Tarjan's strongly connected components: each one of more than one
    # file is a cycle; otherwise the layers, lowest first.
    awk -F'\t' -v folder="$folder" '
        { if (!(($1, $2) in seen)) { seen[$1, $2] = 1; adj[$1] = adj[$1] " " $2 }
          syms[$1, $2] = syms[$1, $2] " " $3; node[$1]; node[$2] }
        function visit(v,    ws, k, i, w) {
            index_[v] = low[v] = ++counter; stack[++sp] = v; on[v] = 1
            k = split(adj[v], ws, " ")
            for (i = 1; i <= k; i++) {
                w = ws[i]
                if (!(w in index_)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
                else if (on[w] && index_[w] < low[v]) low[v] = index_[w]
            }
            if (low[v] == index_[v]) {
                ncomp++; size = 0
                do { w = stack[sp--]; on[w] = 0; comp[w] = ncomp; members[ncomp] = members[ncomp] " " w; size++ }
                while (w != v)
                csize[ncomp] = size
            }
        }
        function depth(v,    ws, k, i, d, best) {
            if (v in dep) return dep[v]
            best = 0; k = split(adj[v], ws, " ")
            for (i = 1; i <= k; i++) { d = depth(ws[i]) + 1; if (d > best) best = d }
            return dep[v] = best
        }
        END {
            for (v in node) if (!(v in index_)) visit(v)
            bad = 0
            for (c = 1; c <= ncomp; c++) {
                if (csize[c] < 2) continue
                bad = 1
                printf "%s: files calling each other in a circle:%s\n", folder, members[c]
                for (p in seen) {
                    split(p, ab, SUBSEP)
                    if (comp[ab[1]] == c && comp[ab[2]] == c)
                        printf "  %s.c -> %s.c:%s\n", ab[1], ab[2], syms[ab[1], ab[2]]
                }
            }
            if (bad) exit 1
            for (v in node) { d = depth(v); layer[d] = layer[d] " " v; if (d > top) top = d }
            printf "%s: no circle; layers (0 calls none of these files, each layer only those below it):\n", folder
            for (d = 0; d <= top; d++) if (d in layer) printf "  %d:%s\n", d, layer[d]
        }' "$tmp/edges" || status=1
done
exit $status

# common.sh - sourced by the device calls (scripts/device/calls/*.sh, copied
# to .device/calls/ by scripts/device_bundle.sh): stages of .device/run.sh
# under one wall-clock budget, and what goes back through $OUT (at most 8
# files: the summary, the JSON lines, one tarball of every log).
D="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T0=$(date +%s)

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# stage LIMIT NAME [ARGS...]: .device/run.sh NAME $W ARGS within
# min(LIMIT, what the budget has left); skipped under 20 s.
stage() {
    local limit=$1 name=$2 l t rc
    shift 2
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        echo "== $name $*: skipped, $l s of the budget left" | tee -a "$W/summary.txt"
        return 1
    fi
    t=$(date +%s)
    timeout "$limit" "$D/run.sh" "$name" "$W" "$@"
    rc=$?
    echo "== $name $*: rc=$rc in $(( $(date +%s) - t )) s (limit $limit s)" \
        | tee -a "$W/summary.txt"
    return $rc
}

# Everything under $W back: the summary and JSON lines as files, the rest
# in one tarball.
send_back() {
    local dest="${OUT:-$W/out}" f
    mkdir -p "$dest"
    cp "$W/summary.txt" "$dest/" 2>/dev/null
    for f in "$W"/*.jsonl; do
        [ -f "$f" ] && cp "$f" "$dest/"
    done
    tar -C "$W" -czf "$dest/$(basename "$W").tar.gz" . 2>/dev/null
    ls -l "$dest"
}

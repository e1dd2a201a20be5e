#!/usr/bin/env bash
# gpu_validate.sh - a thin wrapper over the device bundle: on a CPU machine
# with nvcc, scripts/device_bundle.sh builds .device/ (binaries, libraries,
# model writer, CPU reference figures); on the GPU machine, .device/run.sh
# runs the stages. This runs the given stages one after the other.
#
# usage: scripts/gpu_validate.sh OUT_DIR [STAGE...]
#   stages: env test sanitize serve "bench 1b" "bench 8b"  (default: env test)
#   Each stage fits one 10-minute command; see .device/run.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: $0 OUT_DIR [STAGE...]}"
shift
[ -x .device/run.sh ] || {
    echo "gpu_validate: no .device/ here: run scripts/device_bundle.sh on a machine with nvcc" >&2
    exit 1
}
[ $# -eq 0 ] && set -- env test
status=0
for stage in "$@"; do
    # shellcheck disable=SC2086 # "bench 1b" is a stage and its argument
    set -- $stage
    .device/run.sh "$1" "$OUT" "${@:2}" || status=1
done
exit $status

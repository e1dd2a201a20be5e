#!/usr/bin/env bash
# serve.sh - set everything up, then start parley on the default model.
# Extra arguments go to `parley serve` (e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/parley serve "$@"

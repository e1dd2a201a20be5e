#!/usr/bin/env bash
# check_layers.sh - DESIGN.md's layering, read from the #include lines:
#   src/base <- schedulers <- backends <- src/jobs <- api <- src
# A folder may include its own files and those of the layers below it.
# Nothing outside backends/engine/ includes backends/engine/* (the
# libraries the engine shares, backends/text, constrain and formats, sit
# beside it), so CUDA code stays in backends/engine/cuda/ too. Above backends/, requests reach a backend only through a model's
# dispatch (schedulers/dispatch.h): its submit callbacks, in the OpenAI
# request core and the job, are the only callers of the submit. Exits 1
# and lists every violation.
set -u
cd "$(dirname "$0")/.."

# layer name: include prefixes allowed besides its own folder
allowed_for() {
    case "$1" in
    src/base/*)    echo "src/base/" ;;
    schedulers/*)  echo "src/base/ schedulers/" ;;
    backends/*)    echo "src/base/ schedulers/ backends/" ;;
    src/jobs/*)    echo "src/base/ schedulers/ backends/ src/jobs/" ;;
    api/*)         echo "src/base/ schedulers/ backends/ src/jobs/ api/" ;;
    src/*)         echo "src/ schedulers/ backends/ api/" ;;
    *)             echo "" ;;
    esac
}

bad=0
while IFS= read -r f; do
    allow=$(allowed_for "$f")
    [ -n "$allow" ] || continue
    while IFS= read -r line; do
        inc=${line#*\"}; inc=${inc%%\"*}
        case "$inc" in */*) ;; *) continue ;; esac   # same-folder or system
        ok=0
        for p in $allow; do
            case "$inc" in "$p"*) ok=1 ;; esac
        done
        # The engine is a backend like the others: nothing outside
        # backends/engine/ names its files (its public face is
        # backends/engine_open.h and backends/engine_config.h), and only the
        # engine names the CUDA runner.
        case "$inc" in
        backends/engine/*)
            case "$f" in backends/engine/*) ;; *) ok=0 ;; esac ;;
        esac
        if [ $ok = 0 ]; then
            echo "$f: includes \"$inc\" (not allowed in this layer)"
            bad=1
        fi
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$f")
done < <(git ls-files 'src/*' 'schedulers/*' 'backends/*' 'api/*' | grep -E '\.(c|h|cu|cuh)$')

# api -> schedulers/dispatch -> backends is the only path.
submit_ok="api/oai_request.c src/jobs/jobs.c"
while IFS=: read -r f line _; do
    case " $submit_ok " in *" $f "*) continue ;; esac
    echo "$f:$line: submits to a backend outside a dispatch callback ($submit_ok)"
    bad=1
done < <(git grep -nE 'pl_backend_submit[[:space:]]*\(|ops->submit[[:space:]]*\(' -- 'api/*.c' 'src/*.c')

if [ $bad = 0 ]; then
    echo "check_layers: ok"
fi
exit $bad

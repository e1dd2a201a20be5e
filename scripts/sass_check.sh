#!/usr/bin/env bash
# sass_check.sh - what the attention kernels' machine code holds, read
# without a GPU (issue 38: check the machine code before any device time).
# For every kernel of the attention, expert (issue 51), norm and Gated
# DeltaNet (issue 47) objects of a build, per architecture:
# registers, stack/spills (ptxas's counts, from cuobjdump -res-usage), and
# the SASS instructions that matter: 16-byte cp.async (LDGSTS...128),
# ldmatrix (LDSM), movmatrix (MOVM), tensor-core MMAs (HMMA), shared stores
# of 1 or 2 bytes (STS.U8/STS.U16: the bank-conflicting V transposition the
# tensor-core decode kernel must not have), local memory (STL/LDL).
# Then the checks the issue asks of the tensor-core kernels: no 2-byte
# shared stores, 16-byte cp.async present, no spills; of the expert and
# norm kernels and the DeltaNet conv and rule (row-by-row and chunked):
# no local memory. Exit 1 if one fails.
#
# usage: scripts/sass_check.sh [BUILD_DIR] (default build)
#   cuobjdump: from the CUDA toolkit, else the PyPI wheel
#   nvidia-cuda-cuobjdump installed into ~/.cache/parley/cudatools; the
#   nvdisasm it runs for -sass likewise (nvidia-cuda-nvdisasm, its own
#   folder: pip --target will not merge into the first).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OBJ="$BUILD/backends/engine/cuda/libplcuda.a.p"
[ -d "$OBJ" ] || { echo "sass_check: $OBJ absent (build with CUDA first)" >&2; exit 1; }
if ! command -v cuobjdump >/dev/null; then
    TOOLS="$HOME/.cache/parley/cudatools"
    if [ ! -x "$TOOLS/nvidia/cu13/bin/cuobjdump" ]; then
        python3 -m pip install -q --target "$TOOLS" nvidia-cuda-cuobjdump >&2
    fi
    export PATH="$PATH:$TOOLS/nvidia/cu13/bin"
fi
if ! command -v nvdisasm >/dev/null; then
    DIS="$HOME/.cache/parley/nvdisasm"
    if [ ! -x "$DIS/nvidia/cu13/bin/nvdisasm" ]; then
        python3 -m pip install -q --target "$DIS" nvidia-cuda-nvdisasm >&2
    fi
    export PATH="$PATH:$DIS/nvidia/cu13/bin"
fi
status=0
printf '%-6s %-58s %4s %5s %5s %6s %5s %5s %5s %7s %5s\n' arch kernel regs stack spill \
    cp16 ldsm movm hmma sts1/2 lmem
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for f in attn_decode attn_decode_split attn_decode_mma attn_prefill attn_prefill_mma kv_write \
         moe_route moe_plan moe_gemm rmsnorm ssm; do
    for arch in sm_90 sm_80; do
        cuobjdump -res-usage -arch "$arch" "$OBJ/$f.cu.o" >"$TMP/res" 2>/dev/null || true
        cuobjdump -sass -arch "$arch" "$OBJ/$f.cu.o" >"$TMP/sass" 2>/dev/null || true
        # per function: cp16 ldsm movm hmma sts1/2 lmem (one pass over the SASS)
        awk '/Function : / {fn = $3; next}
             fn != "" {
                 c[fn] += 0
                 if ($0 ~ /LDGSTS[.A-Z0-9]*\.128/) cp[fn]++
                 if ($0 ~ /LDSM/) ld[fn]++
                 if ($0 ~ /MOVM/) mv[fn]++
                 if ($0 ~ /HMMA/) mm[fn]++
                 if ($0 ~ /STS\.(U|S)(8|16)/) st[fn]++
                 if ($0 ~ /(STL|LDL)/) lm[fn]++ }
             END { for (f in c) print f, cp[f]+0, ld[f]+0, mv[f]+0, mm[f]+0, st[f]+0, lm[f]+0 }' \
            "$TMP/sass" >"$TMP/counts"
        while read -r fn cp16 ldsm movm hmma sts12 lmem; do
            line="$(grep -A1 "Function $fn:" "$TMP/res" | tail -1)"
            regs="$(grep -o 'REG:[0-9]*' <<<"$line" | cut -d: -f2)"
            stack="$(grep -o 'STACK:[0-9]*' <<<"$line" | cut -d: -f2)"
            spill=$([ "$lmem" -gt 0 ] && echo yes || echo no)
            short="$(sed 's/^_Z[0-9]*//; s/EEv.*//; s/ILi/</; s/ILb/</; s/ELb/,/; s/ELi/,/g' <<<"$fn")"
            printf '%-6s %-58s %4s %5s %5s %6s %5s %5s %5s %7s %5s\n' "$arch" "${short:0:58}" \
                "$regs" "$stack" "$spill" "$cp16" "$ldsm" "$movm" "$hmma" "$sts12" "$lmem"
            case "$fn" in
            *attn_mma_dec_kernel*|*attn_prefill_mma_kernel*)
                if [ "$sts12" -gt 0 ] || [ "$cp16" -eq 0 ] || [ "$lmem" -gt 0 ] \
                   || [ "$ldsm" -eq 0 ] || [ "$hmma" -eq 0 ]; then
                    echo "sass_check: $arch $fn: 1/2-byte shared stores $sts12, 16-byte" \
                         "cp.async $cp16, ldmatrix $ldsm, HMMA $hmma, local memory $lmem" >&2
                    status=1
                fi ;;
            *route_kernel*|*group_kernel*|*moe_gemm_kernel*|*combine_kernel*|*rmsnorm_kernel*|\
            *conv_kernel*|*rule_kernel*|*chunk_kernel*)
                # issue 51: the expert block's kernels keep their state in
                # registers (the router's 16 logits per lane: unrolled loops);
                # the DeltaNet ones their per-thread sums and the conv's history
                if [ "$lmem" -gt 0 ] || [ "$spill" = yes ]; then
                    echo "sass_check: $arch $fn: local memory $lmem" >&2
                    status=1
                fi ;;
            esac
            [ "$lmem" -gt 0 ] && echo "sass_check: $arch $fn uses local memory ($lmem)" >&2
        done < <(sort "$TMP/counts")
    done
done
[ $status -eq 0 ] && echo "sass_check: tensor-core attention kernels: no 1/2-byte shared stores, 16-byte cp.async, ldmatrix and HMMA present, no local memory; expert, norm and DeltaNet kernels: no local memory"
exit $status

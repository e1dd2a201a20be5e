/* ops_moe.c - the routing and grouping of a mixture-of-experts layer
 * (ops.h): the C references of the CUDA runner's moe_route.cu and
 * moe_plan.cu, and what forward_moe.c runs. */
#include "backends/engine/cpu/ops.h"

#include <string.h>

#define MAX_EXPERTS 512             /* model.h's PL_MOE_MAX_EXPERTS */

/* The k largest of v[0..n) in descending order into idx (ties: the lower
 * index first); n <= MAX_EXPERTS. */
static void top_k(const float *v, int n, int k, int32_t *idx)
{
    uint64_t taken[MAX_EXPERTS / 64] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++)
            if (!(taken[e >> 6] >> (e & 63) & 1) && (best < 0 || v[e] > v[best]))
                best = e;
        idx[j] = best;
        taken[best >> 6] |= 1ull << (best & 63);
    }
}

void pl_op_moe_route(float *logits, int n_expert, int k, int topk_softmax, int norm_w,
                     int32_t *sel, float *w)
{
    if (!topk_softmax)
        pl_op_softmax(logits, n_expert);
    top_k(logits, n_expert, k, sel);
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += w[j] = logits[sel[j]];
    if (topk_softmax)
        pl_op_softmax(w, k);
    else
        for (int j = 0; norm_w && j < k; j++)
            w[j] /= sum;
}

void pl_op_moe_group(const int32_t *sel, int n_pairs, int k, int n_expert, int32_t *counts,
                     int32_t *offsets, int32_t *slot_of, int32_t *row_of)
{
    memset(counts, 0, sizeof(int32_t) * (size_t)n_expert);
    for (int i = 0; i < n_pairs; i++)
        counts[sel[i]]++;
    offsets[0] = 0;
    for (int e = 0; e < n_expert; e++)
        offsets[e + 1] = offsets[e] + counts[e];
    for (int i = 0; i < n_pairs; i++) {
        int e = sel[i], s = offsets[e + 1] - counts[e]--;
        slot_of[i] = s;
        row_of[s] = i / k;
    }
    for (int i = 0; i < n_pairs; i++)   /* the counts, restored */
        counts[sel[i]]++;
}

void pl_op_moe_gather(const void *x, size_t row_bytes, const int32_t *row_of, int s0, int s1,
                      void *out)
{
    for (int s = s0; s < s1; s++)
        memcpy((char *)out + (size_t)s * row_bytes,
               (const char *)x + (size_t)row_of[s] * row_bytes, row_bytes);
}

void pl_op_moe_combine(const float *y, const int32_t *slot, const float *w, int k, int dim,
                       float *out)
{
    for (int j = 0; j < k; j++) {
        const float *yj = y + (size_t)slot[j] * (size_t)dim;
        for (int c = 0; c < dim; c++)
            out[c] = j ? out[c] + w[j] * yj[c] : w[j] * yj[c];
    }
}

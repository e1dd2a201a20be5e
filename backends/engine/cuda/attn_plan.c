/* attn_plan.c - the split count of split-KV decode attention for even
 * waves (see attn_plan.h). */
#include "backends/engine/cuda/attn_plan.h"

int pl_cuda_attn_split_plan(int work, int blocks_per_sm, int n_sm, int max_splits)
{
    long long w = work < 1 ? 1 : work;
    long long slots = (long long)(blocks_per_sm < 1 ? 1 : blocks_per_sm) * (n_sm < 1 ? 1 : n_sm);
    int best = 1;
    double best_fill = 0.0;
    for (int ns = 1; ns <= (max_splits < 1 ? 1 : max_splits); ns++) {
        long long blocks = w * ns, waves = (blocks + slots - 1) / slots;
        double fill = (double)blocks / (double)(waves * slots);
        if (fill >= 0.9)
            return ns;
        if (fill > best_fill) {
            best_fill = fill;
            best = ns;
        }
    }
    return best;
}

/* runner.c - what the CPU and CUDA runners share: their geometry from the
 * model and the geometry asked for. */
#include "backends/engine/runner.h"

#include "backends/engine/model/model.h"

int pl_runner_info_init(pl_runner_info *inf, const pl_model *m, const pl_runner_info *want)
{
    *inf = *want;
    inf->n_vocab = m->n_vocab;
    inf->eos_id = m->eos_id;
    if (inf->max_model_len <= 0)
        inf->max_model_len = m->n_ctx_train;
    if (inf->block_size <= 0)
        inf->block_size = 16;
    if (inf->max_seqs <= 0 || inf->max_rows <= 0 || inf->max_model_len <= 0)
        return -1;
    return 0;
}

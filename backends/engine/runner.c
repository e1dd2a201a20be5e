/* runner.c - what the CPU and CUDA runners share: their geometry from the
 * model and the geometry asked for. */
#include "backends/engine/runner.h"

#include "backends/engine/model/model.h"

int pl_runner_kv_layout(pl_kv_layout *lo, const pl_model *m, bool grouped)
{
    int w[PL_KV_MAX_LAYERS];
    if (m->n_layer < 1 || m->n_layer > PL_KV_MAX_LAYERS)
        return -1;
    for (int l = 0; l < m->n_layer; l++)
        w[l] = m->layers[l].no_kv || m->layers[l].recurrent ? PL_KV_WINDOW_NONE : m->layers[l].n_swa;
    return pl_kv_layout_init(lo, m->n_layer, w, grouped);
}

int pl_runner_info_init(pl_runner_info *inf, const pl_model *m, const pl_runner_info *want)
{
    *inf = *want;
    /* The runner without cache groups, or one asked for nothing: every
     * paged layer in one full group (a runner with groups sets its own). */
    if (inf->kv_layout.n_groups == 0 && pl_runner_kv_layout(&inf->kv_layout, m, false) != 0)
        return -1;
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

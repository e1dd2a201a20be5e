/* cuda_constrain.c - the CUDA runner's device copies of constraint tables
 * (constrain.cuh): a constraint is packed (fsm_flat.c, every state's mask
 * row) and uploaded the first time a step uses it, the vocabulary once;
 * up to CR_FSM_CACHE constraints stay on the device (least recently used
 * goes, never one the step being packed uses). The runner holds a
 * reference on each, so its address keys the cache safely. */
#include <string.h>

#include "backends/constrain/token_fsm.h"
#include "backends/engine/cuda/cuda_runner_internal.h"
#include "src/base/log.h"

/* Copy a blob to new device memory; NULL on failure. Synchronous (first
 * use only): the device is idle for this copy when a step's kernels run. */
static void *upload(const pl_fsm_blob *b)
{
    void *d = NULL;
    if (pl_cuda_check_(cudaMalloc(&d, b->bytes), __FILE__, __LINE__))
        return NULL;
    if (pl_cuda_check_(cudaMemcpy(d, b->data, b->bytes, cudaMemcpyHostToDevice), __FILE__,
                       __LINE__) || pl_cuda_check_(cudaDeviceSynchronize(), __FILE__, __LINE__)) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static int vocab_ready(cuda_runner *r, const pl_token_fsm *f)
{
    if (r->fsm_vocab_dev && r->fsm_vocab_key == (const void *)f->vocab)
        return 0;
    if (r->fsm_vocab_dev)        /* one model per runner: never expected */
        return pl_cuda_fail_(__FILE__, __LINE__, "a constraint for another vocabulary");
    pl_fsm_blob b;
    if (pl_fsm_pack_vocab(f->vocab, f->n_vocab, &b) < 0)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of memory packing the vocabulary");
    r->fsm_vocab_dev = upload(&b);
    if (r->fsm_vocab_dev) {
        r->fsm_vocab = pl_fsm_vocab_at(&b, r->fsm_vocab_dev, f->n_vocab);
        r->fsm_vocab_key = f->vocab;
    }
    pl_fsm_blob_free(&b);
    return r->fsm_vocab_dev ? 0 : -1;
}

/* The slot to fill: a free one, else the least recently used one that the
 * step being packed does not use (its tables are freed after the steps in
 * flight end). */
static cr_fsm *victim(cuda_runner *r)
{
    cr_fsm *v = NULL;
    for (int i = 0; i < CR_FSM_CACHE; i++) {
        cr_fsm *e = &r->fsm[i];
        if (!e->f)
            return e;
        if (e->pack != r->fsm_pack && (!v || e->used < v->used))
            v = e;
    }
    if (v) {
        cudaStreamSynchronize(r->cs);
        cudaFree(v->dev);
        pl_token_fsm_release(v->f);
        memset(v, 0, sizeof *v);
    }
    return v;
}

static cr_fsm *tables_of(cuda_runner *r, const pl_token_fsm *f)
{
    for (int i = 0; i < CR_FSM_CACHE; i++)
        if (r->fsm[i].f == f)
            return &r->fsm[i];
    cr_fsm *e = victim(r);
    if (!e) {
        pl_cuda_fail_(__FILE__, __LINE__, "more than %d constraints in one step", CR_FSM_CACHE);
        return NULL;
    }
    pl_fsm_blob b;
    if (pl_fsm_pack_tables(f, &b) < 0) {
        pl_cuda_fail_(__FILE__, __LINE__, "out of memory packing a constraint");
        return NULL;
    }
    e->dev = upload(&b);
    if (e->dev) {
        e->t = pl_fsm_tables_at(&b, e->dev, f);
        pl_token_fsm_retain(f);
        e->f = f;
        pl_debug("cuda: constraint of %d states uploaded (%zu bytes)", f->n_states, b.bytes);
    }
    pl_fsm_blob_free(&b);
    return e->dev ? e : NULL;
}

int pl_cuda_fsm_attach(cuda_runner *r, const pl_step_input *in, int s, pl_cuda_samp *o)
{
    const pl_seq_sampling *p = &in->sampling[s];
    if (!p->fsm || !in->seq_sample[s])
        return 0;
    if (vocab_ready(r, p->fsm) < 0)
        return -1;
    cr_fsm *e = tables_of(r, p->fsm);
    if (!e)
        return -1;
    e->pack = r->fsm_pack;
    e->used = ++r->fsm_clock;
    o->fsm = e->t;
    o->vocab = r->fsm_vocab;
    o->fsm_state = p->fsm_state;
    int last = in->seq_first_row[s] + in->seq_n_rows[s] - 1;
    o->fsm_ph_row1 = in->tokens[last] == PL_TOKEN_PLACEHOLDER ? last + 1 : 0;
    return 0;
}

void pl_cuda_fsm_free(cuda_runner *r)
{
    for (int i = 0; i < CR_FSM_CACHE; i++) {
        if (r->fsm[i].f) {
            cudaFree(r->fsm[i].dev);
            pl_token_fsm_release(r->fsm[i].f);
        }
    }
    memset(r->fsm, 0, sizeof r->fsm);
    cudaFree(r->fsm_vocab_dev);
    r->fsm_vocab_dev = NULL;
}

/* cpu_runner.c - runner.h on the CPU: a worker thread executes queued steps
 * (forward + sampling) while the engine thread schedules the next one. */
#include "backends/engine/cpu/cpu_runner.h"

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/qdot_amx.h"
#include "backends/constrain/token_fsm.h"
#include "backends/engine/sampler.h"

#define N_OUTBUF (PL_RUNNER_MAX_INFLIGHT + 1)

typedef struct outbuf {
    pl_step_output o;
    int status;
} outbuf;

/* A copy_block() request that must run before step `ticket`. */
typedef struct block_copy {
    int32_t src, dst;
    int ticket;
} block_copy;

/* Threads that sample a step's sequences (each sampler's scratch is 20
 * bytes per vocabulary entry: 5 MB for Gemma's). */
#define MAX_SAMPLERS 8

typedef struct cpu_runner {
    pl_runner base;
    const pl_model *m;
    pl_pool *pool;
    pl_cpu_fwd *fwd;
    pl_sampler *sampler[MAX_SAMPLERS];  /* one per sampling thread */
    int n_samplers;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const pl_step_input *queue[PL_RUNNER_MAX_INFLIGHT];
    int next_ticket;             /* tickets launched */
    int started;                 /* tickets taken by the worker */
    int done;                    /* tickets finished */
    int waited;                  /* tickets waited for */
    bool quit;
    block_copy *copies;          /* pending copies, in call order */
    int n_copies, cap_copies;
    outbuf out[N_OUTBUF];
    int32_t *slot_last;          /* (max_seqs) last sampled id per slot */
    int32_t *tokens, *out_rows;  /* (max_rows), (max_seqs) */
    int32_t *ph_tok;             /* (max_seqs) id a sequence's placeholder row
                                    stood for this step, or -1 */
    int32_t *hist;               /* (n_samplers, max_model_len + 1) penalty-history
                                    scratch, one per sampling thread */
    float *logits;               /* (max_seqs, n_vocab) */
} cpu_runner;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Placeholders take the slot's last sampled id; sampled rows are listed. */
static int resolve_inputs(cpu_runner *r, const pl_step_input *in, int *n_out)
{
    const pl_runner_info *inf = &r->base.info;
    if (in->n_rows < 1 || in->n_rows > inf->max_rows || in->n_seqs < 1 ||
        in->n_seqs > inf->max_seqs)
        return -1;
    for (int i = 0; i < in->n_rows; i++) {
        int32_t t = in->tokens[i], s = in->row_seq[i];
        if (s < 0 || s >= in->n_seqs)
            return -1;
        int32_t slot = in->seq_slot[s];
        r->ph_tok[s] = -1;
        if (t == PL_TOKEN_PLACEHOLDER) {
            t = slot >= 0 && slot < inf->max_seqs ? r->slot_last[slot] : -1;
            r->ph_tok[s] = t;
        }
        if (t < 0)
            return -1;
        r->tokens[i] = t;
    }
    *n_out = 0;
    for (int s = 0; s < in->n_seqs; s++)
        if (in->seq_sample[s]) {
            if (in->seq_n_rows[s] < 1)
                return -1;
            r->out_rows[(*n_out)++] = in->seq_first_row[s] + in->seq_n_rows[s] - 1;
        }
    return 0;
}

/* The host's history of a sequence lacks the id its placeholder row stood
 * for (sampled by the step still in flight when this one was scheduled).
 * Penalties must count it, or async sampling would differ from sync. */
static const int32_t *penalty_history(cpu_runner *r, const pl_step_input *in, int s,
                                      int32_t *scratch, int *n_hist)
{
    const int32_t *hist = in->seq_hist ? in->seq_hist[s] : NULL;
    *n_hist = in->seq_hist_len ? in->seq_hist_len[s] : 0;
    const pl_seq_sampling *p = &in->sampling[s];
    bool penalised = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                     p->frequency_penalty != 0.0f;
    if (r->ph_tok[s] < 0 || !penalised || *n_hist >= r->base.info.max_model_len)
        return hist;
    if (*n_hist > 0)
        memcpy(scratch, hist, sizeof(int32_t) * (size_t)*n_hist);
    scratch[(*n_hist)++] = r->ph_tok[s];
    return scratch;
}

/* Sequence s of the step, whose logits are row k, on sampling thread t. */
static void sample_one(cpu_runner *r, const pl_step_input *in, pl_step_output *o, int s, int k,
                       int t)
{
    int nv = r->base.info.n_vocab;
    pl_sample smp;
    const float *lg = r->logits + (size_t)k * nv;
    int n_hist;
    const int32_t *hist = penalty_history(
        r, in, s, r->hist + (size_t)t * ((size_t)r->base.info.max_model_len + 1), &n_hist);
    pl_seq_sampling sp = in->sampling[s];
    if (sp.fsm && r->ph_tok[s] >= 0)    /* the id the host has not seen yet */
        sp.fsm_state = pl_token_fsm_next(sp.fsm, sp.fsm_state, r->ph_tok[s]);
    pl_sampler_sample(r->sampler[t], lg, &sp, hist, n_hist, r->base.info.eos_id, &smp);
    o->sampled[s] = smp.id;
    o->logprob[s] = smp.logprob;
    for (int j = 0; j < PL_MAX_TOP_LOGPROBS; j++) {
        o->top_ids[s * PL_MAX_TOP_LOGPROBS + j] = j < smp.n_top ? smp.top_ids[j] : -1;
        o->top_logprobs[s * PL_MAX_TOP_LOGPROBS + j] = j < smp.n_top ? smp.top_logprobs[j] : 0;
    }
    if (o->logits)
        memcpy(o->logits + (size_t)s * nv, lg, sizeof(float) * nv);
    r->slot_last[in->seq_slot[s]] = smp.id;
}

typedef struct sample_job {
    cpu_runner *r;
    const pl_step_input *in;
    pl_step_output *o;
    int n;                       /* sequences to sample: their indices in out_rows */
} sample_job;

static void sample_worker(void *arg, int ith, int nth)
{
    (void)nth;
    sample_job *j = arg;
    if (ith >= j->r->n_samplers)
        return;
    for (int i; (i = pl_pool_take(j->r->pool)) < j->n;)
        sample_one(j->r, j->in, j->o, j->r->out_rows[i], i, ith);
}

/* Each sampled sequence is one pass (or several) over a vocabulary-wide
 * row, 0.05-0.7 ms at 262k entries: with many sequences in a step the
 * pool's threads share them (each with its own sampler and history
 * scratch; a sequence's draw depends only on its own row, seed and step,
 * so who samples it does not matter). */
static void sample_all(cpu_runner *r, const pl_step_input *in, pl_step_output *o)
{
    int n = 0;
    for (int s = 0; s < in->n_seqs; s++) {
        o->sampled[s] = -1;
        if (in->seq_sample[s])
            r->out_rows[n++] = s;  /* logits row n -> sequence s (the forward is
                                      done with out_rows) */
    }
    if (n > 1 && r->n_samplers > 1) {
        sample_job j = {r, in, o, n};
        pl_pool_run(r->pool, sample_worker, &j);
        return;
    }
    for (int i = 0; i < n; i++)
        sample_one(r, in, o, r->out_rows[i], i, 0);
}

/* Prompt logprobs: rows with a next id get their logits in chunks of
 * max_seqs rows (the logits buffer), after sampling used it. */
static int prompt_logprobs(cpu_runner *r, const pl_step_input *in, pl_step_output *o)
{
    int nv = r->base.info.n_vocab, chunk = r->base.info.max_seqs, row = 0;
    pl_sample smp;
    while (row < in->n_rows) {
        int n = 0;
        for (; row < in->n_rows && n < chunk; row++)
            if (in->row_next[row] >= 0)
                r->out_rows[n++] = row;
        if (n == 0)
            break;
        if (pl_cpu_fwd_row_logits(r->fwd, r->out_rows, n, r->logits) != 0)
            return -1;
        for (int i = 0; i < n; i++) {
            int rw = r->out_rows[i];
            int32_t next = in->row_next[rw];
            if (next >= nv)
                return -1;
            int top = in->sampling[in->row_seq[rw]].top_logprobs;
            pl_sampler_raw_logprobs(r->logits + (size_t)i * nv, nv, next, top, &smp);
            o->row_lp[rw] = smp.logprob;
            for (int j = 0; j < PL_MAX_TOP_LOGPROBS; j++) {
                size_t d = (size_t)rw * PL_MAX_TOP_LOGPROBS + (size_t)j;
                o->row_top_ids[d] = j < smp.n_top ? smp.top_ids[j] : -1;
                o->row_top_lp[d] = j < smp.n_top ? smp.top_logprobs[j] : 0.0f;
            }
        }
    }
    return 0;
}

static int run_step(cpu_runner *r, const pl_step_input *in, pl_step_output *o)
{
    double t0 = now_ms();
    int n_out = 0;
    if (resolve_inputs(r, in, &n_out) != 0)
        return -1;
    pl_fwd_batch b = {.n_rows = in->n_rows, .tokens = r->tokens, .positions = in->positions,
                      .row_seq = in->row_seq, .block_table = in->block_table,
                      .max_blocks_per_seq = in->max_blocks_per_seq,
                      .n_groups = in->n_groups,
                      .n_out = n_out, .out_rows = r->out_rows, .seq_slot = in->seq_slot,
                      .n_ck_save = in->n_ck_save, .ck_save_slot = in->ck_save_slot,
                      .ck_save_id = in->ck_save_id, .ck_save_pos = in->ck_save_pos};
    for (int i = 0; i < in->n_ck_load; i++)   /* resumed prefixes, before the rows */
        if (pl_cpu_fwd_ckpt_load(r->fwd, in->ck_load_id[i], in->ck_load_slot[i],
                                 in->ck_load_pos[i]) != 0)
            return -1;
    if (pl_cpu_forward(r->fwd, &b, r->logits) != 0)
        return -1;
    o->n_seqs = in->n_seqs;
    if (r->base.keep_logits && !o->logits) {  /* once per buffer, set by tests */
        o->logits = malloc(sizeof(float) * (size_t)r->base.info.max_seqs * r->base.info.n_vocab);
        if (!o->logits)
            return -1;
    }
    sample_all(r, in, o);
    if (in->n_row_next > 0 && prompt_logprobs(r, in, o) != 0)
        return -1;
    o->exec_ms = now_ms() - t0;
    return 0;
}

/* Apply the copies queued before step t was launched (mutex held). */
static void run_copies_locked(cpu_runner *r, int t)
{
    int k = 0;
    for (; k < r->n_copies && r->copies[k].ticket <= t; k++)
        pl_cpu_fwd_copy_block(r->fwd, r->copies[k].src, r->copies[k].dst);
    if (k == 0)
        return;                  /* also keeps NULL copies away from memmove */
    memmove(r->copies, r->copies + k, sizeof(block_copy) * (size_t)(r->n_copies - k));
    r->n_copies -= k;
}

static void *worker_main(void *arg)
{
    cpu_runner *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->started == r->next_ticket && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->quit)
            break;
        int t = r->started++;
        run_copies_locked(r, t);
        const pl_step_input *in = r->queue[t % PL_RUNNER_MAX_INFLIGHT];
        outbuf *ob = &r->out[t % N_OUTBUF];
        pthread_mutex_unlock(&r->mu);
        int st = run_step(r, in, &ob->o);
        pthread_mutex_lock(&r->mu);
        ob->status = st;
        r->done = t + 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int cpu_launch(pl_runner *base, const pl_step_input *in)
{
    cpu_runner *r = (cpu_runner *)base;
    pthread_mutex_lock(&r->mu);
    if (r->next_ticket - r->waited >= PL_RUNNER_MAX_INFLIGHT) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    int t = r->next_ticket++;
    r->queue[t % PL_RUNNER_MAX_INFLIGHT] = in;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return t;
}

static int cpu_wait(pl_runner *base, int ticket, const pl_step_output **out)
{
    cpu_runner *r = (cpu_runner *)base;
    pthread_mutex_lock(&r->mu);
    if (ticket < 0 || ticket >= r->next_ticket) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    while (r->done <= ticket)
        pthread_cond_wait(&r->cv, &r->mu);
    if (ticket + 1 > r->waited)
        r->waited = ticket + 1;
    outbuf *ob = &r->out[ticket % N_OUTBUF];
    pthread_mutex_unlock(&r->mu);
    *out = &ob->o;
    return ob->status;
}

/* Ordered after the steps launched so far and before the next one: done at
 * once when the worker is idle, else queued for the worker. */
static void cpu_copy_block(pl_runner *base, int32_t src, int32_t dst)
{
    cpu_runner *r = (cpu_runner *)base;
    pthread_mutex_lock(&r->mu);
    if (r->n_copies == r->cap_copies) {
        int cap = r->cap_copies ? 2 * r->cap_copies : 16;
        block_copy *c = realloc(r->copies, sizeof(*c) * (size_t)cap);
        if (!c) {                /* out of memory: wait for the worker instead */
            while (r->done < r->next_ticket)
                pthread_cond_wait(&r->cv, &r->mu);
        } else {
            r->copies = c;
            r->cap_copies = cap;
        }
    }
    if (r->done == r->next_ticket) {
        run_copies_locked(r, r->next_ticket);
        pl_cpu_fwd_copy_block(r->fwd, src, dst);
    } else {
        r->copies[r->n_copies++] = (block_copy){src, dst, r->next_ticket};
    }
    pthread_mutex_unlock(&r->mu);
}

static void cpu_free(pl_runner *base)
{
    cpu_runner *r = (cpu_runner *)base;
    if (!r)
        return;
    if (r->th_started) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
    }
    for (int i = 0; i < N_OUTBUF; i++) {
        pl_step_output *o = &r->out[i].o;
        free(o->sampled);
        free(o->logprob);
        free(o->top_ids);
        free(o->top_logprobs);
        free(o->row_lp);
        free(o->row_top_ids);
        free(o->row_top_lp);
        free(o->logits);
    }
    pl_cpu_fwd_free(r->fwd);
    pl_pool_free(r->pool);
    for (int i = 0; i < r->n_samplers; i++)
        pl_sampler_free(r->sampler[i]);
    free(r->copies);
    free(r->slot_last);
    free(r->tokens);
    free(r->out_rows);
    free(r->ph_tok);
    free(r->hist);
    free(r->logits);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static const pl_runner_ops cpu_ops = {
    .name = "cpu",
    .launch = cpu_launch,
    .wait = cpu_wait,
    .copy_block = cpu_copy_block,
    .free = cpu_free,
};

int pl_cpu_runner_set_amx(pl_runner *base, pl_amx_mode mode, char *err, size_t errlen)
{
    cpu_runner *r = (cpu_runner *)base;
    char why[200];
    if (mode == PL_AMX_TILES && pl_amx_self_check(why, sizeof why) != 0) {
        snprintf(err, errlen, "--cpu-amx: %s", why);
        return -1;
    }
    pl_cpu_fwd_set_amx(r->fwd, mode);
    snprintf(base->kernels, sizeof base->kernels, "%s%s", pl_op_kernel_path(),
             mode == PL_AMX_TILES ? "+amx-int8" : mode ? "+amx-int8-emulated" : "");
    return 0;
}

void pl_cpu_runner_set_gemm_min_rows(pl_runner *base, int rows)
{
    pl_cpu_fwd_set_gemm_min_rows(((cpu_runner *)base)->fwd, rows);
}

void pl_cpu_runner_pool_stats(pl_runner *base, pl_pool_counters *c)
{
    pl_pool_stats(((cpu_runner *)base)->pool, c);
}

static int alloc_buffers(cpu_runner *r)
{
    const pl_runner_info *inf = &r->base.info;
    size_t S = (size_t)inf->max_seqs, V = (size_t)inf->n_vocab;
    r->slot_last = malloc(sizeof(int32_t) * S);
    r->tokens = malloc(sizeof(int32_t) * (size_t)inf->max_rows);
    r->out_rows = malloc(sizeof(int32_t) * S);
    r->ph_tok = malloc(sizeof(int32_t) * S);
    r->hist = malloc(sizeof(int32_t) * (size_t)r->n_samplers * ((size_t)inf->max_model_len + 1));
    r->logits = malloc(sizeof(float) * S * V);
    if (!r->slot_last || !r->tokens || !r->out_rows || !r->logits || !r->ph_tok || !r->hist)
        return -1;
    for (size_t i = 0; i < S; i++)
        r->slot_last[i] = -1;
    for (int i = 0; i < N_OUTBUF; i++) {
        pl_step_output *o = &r->out[i].o;
        o->sampled = malloc(sizeof(int32_t) * S);
        o->logprob = malloc(sizeof(float) * S);
        o->top_ids = malloc(sizeof(int32_t) * S * PL_MAX_TOP_LOGPROBS);
        o->top_logprobs = malloc(sizeof(float) * S * PL_MAX_TOP_LOGPROBS);
        size_t R = (size_t)inf->max_rows;
        o->row_lp = malloc(sizeof(float) * R);
        o->row_top_ids = malloc(sizeof(int32_t) * R * PL_MAX_TOP_LOGPROBS);
        o->row_top_lp = malloc(sizeof(float) * R * PL_MAX_TOP_LOGPROBS);
        if (!o->sampled || !o->logprob || !o->top_ids || !o->top_logprobs || !o->row_lp ||
            !o->row_top_ids || !o->row_top_lp)
            return -1;
    }
    return 0;
}

/* Shared geometry with the model's cache groups unless asked otherwise,
 * then the CPU's default cache: every sequence at full length. */
static int fill_info(pl_runner_info *inf, const pl_model *m, const pl_runner_info *want)
{
    pl_runner_info w = *want;
    if (w.kv_layout.n_groups == 0 && pl_runner_kv_layout(&w.kv_layout, m, true) != 0)
        return -1;
    if (pl_runner_info_init(inf, m, &w) != 0)
        return -1;
    const pl_kv_layout *lo = &inf->kv_layout;
    inf->num_ckpts = m->n_recurrent > 0 && want->num_ckpts > 0 ? want->num_ckpts : 0;
    inf->ckpt_bytes = inf->num_ckpts ? pl_cpu_fwd_ckpt_bytes(m) : 0;
    if (inf->num_blocks <= 0)
        inf->num_blocks = inf->max_seqs *
            (int)pl_kv_layout_need(lo->n_kinds, lo->kind_window, lo->kind_groups,
                                   inf->block_size, inf->max_model_len);
    return 0;
}

pl_runner *pl_cpu_runner_new(const pl_model *m, const pl_runner_info *want, int n_threads,
                             char *err, size_t errlen)
{
    return pl_cpu_runner_new_kv(m, want, n_threads, 0, err, errlen);
}

pl_runner *pl_cpu_runner_open(const pl_model *m, const pl_runner_info *want,
                              const pl_cpu_opts *o, char *err, size_t errlen)
{
    pl_runner *r = pl_cpu_runner_new_kv(m, want, o->threads, o->kv_f16, err, errlen);
    if (r && o->batch_invariant)
        pl_cpu_runner_set_gemm_min_rows(r, INT_MAX);
    if (r && o->amx && pl_cpu_runner_set_amx(r, PL_AMX_TILES, err, errlen) != 0) {
        r->ops->free(r);
        return NULL;
    }
    return r;
}

pl_runner *pl_cpu_runner_new_kv(const pl_model *m, const pl_runner_info *want, int n_threads,
                                int kv_f16, char *err, size_t errlen)
{
    cpu_runner *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->base.ops = &cpu_ops;
    r->base.can_constrain = true;
    r->base.can_prompt_logprobs = true;
    r->base.kv_groups = true;
    snprintf(r->base.kernels, sizeof r->base.kernels, "%s", pl_op_kernel_path());
    r->m = m;
    if (fill_info(&r->base.info, m, want) != 0) {
        snprintf(err, errlen, "max_seqs, max_rows and max_model_len must be positive, and "
                 "the model's layers fit a K/V layout (at most %d layers, %d windows)",
                 PL_KV_MAX_LAYERS, PL_KV_MAX_KINDS);
        goto fail;
    }
    if (n_threads <= 0)
        n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(1); /* the pool splits GEMMs itself */
    const pl_runner_info *inf = &r->base.info;
    pl_fwd_opts fo = {.max_rows = inf->max_rows, .max_out = inf->max_seqs,
                      .max_ctx = inf->max_model_len, .num_blocks = inf->num_blocks,
                      .block_size = inf->block_size, .gemm_min_rows = 20, .kv_f16 = kv_f16,
                      .kv_layout = &inf->kv_layout,
                      .max_ckpts = m->n_recurrent > 0 ? inf->num_ckpts : 0,
                      .gdn_align = inf->block_size};
    r->pool = pl_pool_new(n_threads);
    if (!r->pool)
        goto oom;
    int ns = n_threads < MAX_SAMPLERS ? n_threads : MAX_SAMPLERS;
    for (; r->n_samplers < ns; r->n_samplers++)
        if (!(r->sampler[r->n_samplers] = pl_sampler_new(inf->n_vocab)))
            goto oom;
    r->fwd = pl_cpu_fwd_new(m, r->pool, &fo, err, errlen);
    if (!r->fwd)
        goto fail;
    if (alloc_buffers(r) != 0)
        goto oom;
    if (pthread_create(&r->th, NULL, worker_main, r) != 0)
        goto oom;
    r->th_started = true;
    return &r->base;
oom:
    snprintf(err, errlen, "out of memory creating the CPU runner");
fail:
    cpu_free(&r->base);
    return NULL;
}

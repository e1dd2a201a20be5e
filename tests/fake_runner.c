/* fake_runner.c - deterministic runner over a paged KV cache of token ids,
 * executing launched steps in order on its own thread. */
#include "tests/fake_runner.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOUT 4                   /* output slots, by ticket */

typedef struct fake_out {
    pl_step_output out;
    int32_t *sampled;
    float *logprob;
    int32_t *top_ids;
    float *top_lp;
} fake_out;

typedef struct fake_runner {
    pl_runner base;
    int sleep_us, no_token_at_ctx;
    int32_t *kv;                 /* (num_blocks, block_size) token ids */
    int32_t *last;               /* (max_seqs) last sample of each slot */
    fake_out outs[NOUT];
    const pl_step_input *queue[PL_RUNNER_MAX_INFLIGHT + 1];
    int q_head, q_len;
    int next_ticket, done_ticket;
    bool stop;
    uint64_t steps, errors, placeholders;
    int waited, max_inflight;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
} fake_runner;

int32_t pl_fake_runner_next(const int32_t *ids, int n, int n_vocab)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)ids[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return (int32_t)(h % (uint64_t)n_vocab);
}

static bool kv_slot_(fake_runner *f, const pl_step_input *in, int k, int pos,
                     int32_t **cell)
{
    const pl_runner_info *ri = &f->base.info;
    int bi = pos / ri->block_size;
    if (bi >= in->max_blocks_per_seq)
        return false;
    int32_t blk = in->block_table[(size_t)k * (size_t)in->max_blocks_per_seq + (size_t)bi];
    if (blk < 0 || blk >= ri->num_blocks)
        return false;
    *cell = &f->kv[(size_t)blk * (size_t)ri->block_size + (size_t)(pos % ri->block_size)];
    return true;
}

/* Sample for sequence k: hash of its context read back from the KV. */
static int32_t sample_(fake_runner *f, const pl_step_input *in, int k)
{
    int n = in->seq_ctx_len[k];
    int32_t *ctx = malloc((size_t)n * sizeof *ctx);
    int32_t *cell;
    for (int p = 0; p < n; p++) {
        if (!kv_slot_(f, in, k, p, &cell)) {
            f->errors++;
            free(ctx);
            return 0;
        }
        ctx[p] = *cell;
    }
    int32_t t = pl_fake_runner_next(ctx, n, f->base.info.n_vocab);
    free(ctx);
    return t;
}

static void execute_(fake_runner *f, const pl_step_input *in, fake_out *o)
{
    for (int k = 0; k < in->n_seqs; k++) {
        int slot = in->seq_slot[k];
        for (int j = 0; j < in->seq_n_rows[k]; j++) {
            int r = in->seq_first_row[k] + j;
            int32_t tok = in->tokens[r], *cell;
            if (tok == PL_TOKEN_PLACEHOLDER) {
                tok = f->last[slot];
                f->placeholders++;
                if (tok < 0)
                    f->errors++;
            }
            if (in->row_seq[r] != k || !kv_slot_(f, in, k, in->positions[r], &cell))
                f->errors++;
            else
                *cell = tok;
        }
        o->sampled[k] = -1;
        if (in->seq_sample[k] && in->seq_ctx_len[k] == f->no_token_at_ctx) {
            o->sampled[k] = -2;      /* no token; last[slot] keeps the good one */
        } else if (in->seq_sample[k]) {
            o->sampled[k] = sample_(f, in, k);
            f->last[slot] = o->sampled[k];
            o->logprob[k] = -0.25f;
            o->top_ids[(size_t)k * PL_MAX_TOP_LOGPROBS] = o->sampled[k];
            o->top_lp[(size_t)k * PL_MAX_TOP_LOGPROBS] = -0.25f;
        }
    }
    o->out.n_seqs = in->n_seqs;
}

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *worker_(void *arg)
{
    fake_runner *f = arg;
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (!f->q_len && !f->stop)
            pthread_cond_wait(&f->cond, &f->lock);
        if (f->stop)
            break;
        const pl_step_input *in = f->queue[f->q_head];
        int ticket = f->done_ticket + 1;
        pthread_mutex_unlock(&f->lock);
        double t0 = now_ms_();
        fake_out *o = &f->outs[ticket % NOUT];
        execute_(f, in, o);
        if (f->sleep_us)
            usleep((useconds_t)f->sleep_us);
        o->out.exec_ms = now_ms_() - t0;
        pthread_mutex_lock(&f->lock);
        f->q_head = (f->q_head + 1) % (PL_RUNNER_MAX_INFLIGHT + 1);
        f->q_len--;
        f->done_ticket = ticket;
        f->steps++;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static int fake_launch_(pl_runner *r, const pl_step_input *in)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    if (f->next_ticket - f->done_ticket >= PL_RUNNER_MAX_INFLIGHT ||
        in->n_rows > r->info.max_rows || in->n_seqs > r->info.max_seqs) {
        f->errors++;
        pthread_mutex_unlock(&f->lock);
        return -1;
    }
    int tail = (f->q_head + f->q_len) % (PL_RUNNER_MAX_INFLIGHT + 1);
    f->queue[tail] = in;
    f->q_len++;
    int ticket = ++f->next_ticket;
    if (ticket - f->waited > f->max_inflight)
        f->max_inflight = ticket - f->waited;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return ticket;
}

static int fake_wait_(pl_runner *r, int ticket, const pl_step_output **out)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    while (f->done_ticket < ticket)
        pthread_cond_wait(&f->cond, &f->lock);
    f->waited = ticket;
    pthread_mutex_unlock(&f->lock);
    *out = &f->outs[ticket % NOUT].out;
    return 0;
}

static void fake_copy_block_(pl_runner *r, int32_t src, int32_t dst)
{
    fake_runner *f = (fake_runner *)r;
    size_t bs = (size_t)r->info.block_size;
    /* Before the next step, after those launched (the runner contract):
     * let the launched steps finish, then copy. */
    pthread_mutex_lock(&f->lock);
    while (f->done_ticket < f->next_ticket)
        pthread_cond_wait(&f->cond, &f->lock);
    memcpy(f->kv + (size_t)dst * bs, f->kv + (size_t)src * bs, bs * sizeof *f->kv);
    pthread_mutex_unlock(&f->lock);
}

static void fake_free_(pl_runner *r)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    f->stop = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    pthread_join(f->thread, NULL);
    for (int i = 0; i < NOUT; i++) {
        free(f->outs[i].sampled);
        free(f->outs[i].logprob);
        free(f->outs[i].top_ids);
        free(f->outs[i].top_lp);
    }
    free(f->kv);
    free(f->last);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f);
}

static const pl_runner_ops fake_ops = {
    .name = "fake",
    .launch = fake_launch_,
    .wait = fake_wait_,
    .copy_block = fake_copy_block_,
    .free = fake_free_,
};

pl_runner *pl_fake_runner_new(const pl_fake_runner_opts *o)
{
    fake_runner *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->base.ops = &fake_ops;
    f->base.info = o->info;
    f->sleep_us = o->step_sleep_us;
    f->no_token_at_ctx = o->no_token_at_ctx;
    const pl_runner_info *ri = &o->info;
    f->kv = calloc((size_t)ri->num_blocks * (size_t)ri->block_size, sizeof *f->kv);
    f->last = malloc((size_t)ri->max_seqs * sizeof *f->last);
    for (int i = 0; i < NOUT; i++) {
        size_t n = (size_t)ri->max_seqs;
        f->outs[i].sampled = malloc(n * sizeof(int32_t));
        f->outs[i].logprob = malloc(n * sizeof(float));
        f->outs[i].top_ids = calloc(n * PL_MAX_TOP_LOGPROBS, sizeof(int32_t));
        f->outs[i].top_lp = calloc(n * PL_MAX_TOP_LOGPROBS, sizeof(float));
        f->outs[i].out.sampled = f->outs[i].sampled;
        f->outs[i].out.logprob = f->outs[i].logprob;
        f->outs[i].out.top_ids = f->outs[i].top_ids;
        f->outs[i].out.top_logprobs = f->outs[i].top_lp;
    }
    for (int i = 0; f->last && i < ri->max_seqs; i++)
        f->last[i] = -1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    if (!f->kv || !f->last || pthread_create(&f->thread, NULL, worker_, f) != 0) {
        free(f->kv);
        free(f->last);
        free(f);
        return NULL;
    }
    return &f->base;
}

uint64_t pl_fake_runner_steps(pl_runner *r)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    uint64_t n = f->steps;
    pthread_mutex_unlock(&f->lock);
    return n;
}

uint64_t pl_fake_runner_errors(pl_runner *r)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    uint64_t n = f->errors;
    pthread_mutex_unlock(&f->lock);
    return n;
}

uint64_t pl_fake_runner_placeholders(pl_runner *r)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    uint64_t n = f->placeholders;
    pthread_mutex_unlock(&f->lock);
    return n;
}

int pl_fake_runner_max_inflight(pl_runner *r)
{
    fake_runner *f = (fake_runner *)r;
    pthread_mutex_lock(&f->lock);
    int n = f->max_inflight;
    pthread_mutex_unlock(&f->lock);
    return n;
}

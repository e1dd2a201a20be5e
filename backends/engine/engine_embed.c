/* engine_embed.c - the encoder backend (engine_embed.h).
 *
 * Main thread: embed() copies a request into a job and queues it; the
 * eventfd's callback delivers finished jobs to their sinks (an aborted
 * job is dropped). Worker thread: takes every queued job, tokenises and
 * checks each input, then embeds all their inputs together in steps of at
 * most budget tokens (pl_encode_batch), and posts the jobs back. The two
 * share only the queues, under one lock. */
#include "backends/engine/engine_embed.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cblas.h>
#include <event2/event.h>

#include "backends/engine/cpu/encode.h"
#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/families/family.h"
#include "backends/engine/model/encoder.h"
#include "backends/engine/model/model.h"
#include "backends/engine/model/st_config.h"
#include "backends/formats/hf_json.h"
#include "backends/text/tokenizer.h"
#include "src/base/log.h"

#define DEFAULT_BUDGET 8192      /* tokens of one forward step */
#define DECODER_MAX_LEN 8192     /* a decoder's default limit (its context may be far longer) */
#define DECODER_SEQS 64          /* most inputs in a decoder's step */
#define BLOCK 16                 /* a decoder's K/V block, in tokens */
#define MAX_MRL 64               /* most matryoshka_dimensions listed */
#define CAPACITY 64              /* what it reports to dispatch (it generates nothing) */

typedef struct job {
    struct job *next;            /* queue (under mu) */
    struct job *live_next;       /* main thread's list of jobs not delivered */
    uint64_t id;
    pl_embed_sink sink;
    int n;
    char **texts;                /* (n) owned copies; NULL entries: ids given */
    size_t *lens;
    int32_t **ids;               /* (n) owned; the worker tokenises texts here */
    int *n_ids;
    int truncate;
    float *vecs;                 /* (n, dim), filled by the worker */
    int tokens;
    pl_err err;
    bool failed;
    atomic_bool aborted;
} job;

typedef struct emb {
    pl_backend base;             /* first */
    pl_encoder *m;               /* an encoder, or NULL: */
    pl_model *dm;                /* a decoder, its final hidden states pooled */
    pl_cpu_fwd *fwd;             /* dm's forward pass and K/V blocks */
    int32_t *rows, *pos, *seq, *blocks; /* a decoder step's batch (budget rows) */
    float *hid;                  /* (budget, dim) its hidden states */
    int dim, n_pos, n_vocab, max_seqs;
    const char *arch;
    bool mrl;                    /* Matryoshka: shorter vectors asked for are
                                    the first dimensions, renormalised */
    int mrl_dims[MAX_MRL], n_mrl; /* the lengths allowed (none listed: any) */
    pl_tokenizer *tok;
    pl_gguf *gguf;
    pl_engine_hf hf;
    pl_pool *pool;
    pl_pooling pooling;
    bool normalize;
    int max_len, budget, lead, trail;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *in, *out;               /* under mu (LIFO, reversed when taken) */
    bool stop;                   /* under mu */
    int wake_fd;
    struct event *wake_ev;
    job *live;                   /* main thread */
    uint64_t next_id;
    long n_requests, n_inputs, n_tokens; /* main thread */
} emb;

static void job_free_(job *j)
{
    for (int i = 0; j && i < j->n; i++) {
        free(j->texts[i]);
        free(j->ids[i]);
    }
    if (j) {
        free(j->texts), free(j->lens), free(j->ids), free(j->n_ids), free(j->vecs);
        free(j);
    }
}

/* The list reversed (queues are pushed at the head). */
static job *reverse_(job *j)
{
    job *r = NULL;
    while (j) {
        job *next = j->next;
        j->next = r;
        r = j;
        j = next;
    }
    return r;
}

/* ---- worker thread ---------------------------------------------------- */

/* Input i of j as ids: tokenised, truncated as asked, checked. */
static int prepare_input_(emb *e, job *j, int i)
{
    int32_t *ids = j->ids[i];
    int n = j->n_ids[i];
    bool text = j->texts[i] != NULL;
    if (text) {
        if (pl_tokenizer_encode(e->tok, j->texts[i], j->lens[i], true, true, &ids, &n) < 0)
            return pl_err_set(&j->err, 500, "server_error", NULL, NULL, "tokenizer out of "
                              "memory");
        j->ids[i] = ids;
    }
    int limit = j->truncate < 0 ? e->max_len : j->truncate;
    if (limit > 0 && n > limit) {
        int keep = text && limit > e->lead + e->trail ? e->trail : 0;
        memmove(ids + limit - keep, ids + n - keep, sizeof *ids * (size_t)keep);
        n = limit;
    }
    j->n_ids[i] = n;
    if (n > e->max_len)
        return pl_err_set(&j->err, 400, "invalid_request_error", "input",
                          "context_length_exceeded", "input[%d] has %d tokens, more than "
                          "the model's %d (pass truncate_prompt_tokens to cut it)", i, n,
                          e->max_len);
    if (n < 1)
        return pl_err_set(&j->err, 400, "invalid_request_error", "input", NULL,
                          "input[%d] is empty", i);
    char param[32];
    snprintf(param, sizeof param, "input[%d]", i);
    return pl_backend_check_ids(ids, n, e->n_vocab, param, &j->err);
}

static void prepare_(emb *e, job *j)
{
    for (int i = 0; i < j->n && !j->failed; i++) {
        if (prepare_input_(e, j, i) < 0)
            j->failed = true;
        else
            j->tokens += j->n_ids[i];
    }
    if (!j->failed && !(j->vecs = malloc(sizeof(float) * (size_t)j->n * e->dim))) {
        pl_err_set(&j->err, 500, "server_error", NULL, NULL, "out of memory");
        j->failed = true;
    }
}

/* A decoder's step: the k inputs as one batch of rows (each its own
 * sequence from position 0, in blocks of its own), their final hidden
 * states pooled and normalised into out (k, dim). */
static int decode_batch_(emb *e, const int32_t *const *ids, const int *lens, int k, float *out)
{
    int rows = 0, nb = 0, mbs = (e->max_len + BLOCK - 1) / BLOCK, d = e->dim;
    for (int s = 0; s < k; s++) {
        for (int t = 0; t < lens[s]; t++, rows++) {
            e->rows[rows] = ids[s][t];
            e->pos[rows] = t;
            e->seq[rows] = s;
        }
        for (int b = 0; b < mbs; b++)
            e->blocks[(size_t)s * mbs + b] = b * BLOCK < lens[s] ? nb++ : 0;
    }
    pl_fwd_batch b = {.n_rows = rows, .tokens = e->rows, .positions = e->pos,
                      .row_seq = e->seq, .block_table = e->blocks, .max_blocks_per_seq = mbs,
                      .n_groups = 1};
    if (pl_cpu_forward(e->fwd, &b, NULL) < 0)
        return -1;
    for (int i = 0; i < rows; i++)
        e->pos[i] = i;           /* the rows whose hidden states are read */
    if (pl_cpu_fwd_row_hidden(e->fwd, e->pos, rows, e->hid) < 0)
        return -1;
    for (int s = 0, r0 = 0; s < k; r0 += lens[s++]) {
        float *v = out + (size_t)s * d;
        if (e->pooling == PL_POOLING_MEAN) {
            for (int j = 0; j < d; j++) {
                double acc = 0;
                for (int t = 0; t < lens[s]; t++)
                    acc += e->hid[(size_t)(r0 + t) * d + j];
                v[j] = (float)(acc / lens[s]);
            }
        } else {
            int r = e->pooling == PL_POOLING_CLS ? r0 : r0 + lens[s] - 1;
            memcpy(v, e->hid + (size_t)r * d, sizeof(float) * d);
        }
        double n2 = 0;
        for (int j = 0; e->normalize && j < d; j++)
            n2 += (double)v[j] * v[j];
        float inv = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0;
        for (int j = 0; e->normalize && j < d; j++)
            v[j] *= inv;
    }
    return 0;
}

static int encode_(emb *e, const int32_t **ids, const int *lens, int k, float *out)
{
    if (e->dm)
        return decode_batch_(e, ids, lens, k, out);
    return pl_encode_batch(e->m, e->pool, ids, lens, k, e->pooling, e->normalize, out);
}

/* Every input of the jobs in list (not failed), in steps of the budget. */
static void run_jobs_(emb *e, job *list)
{
    int cap = 0, k = 0, rows = 0;
    for (job *j = list; j; j = j->next)
        cap += j->failed ? 0 : j->n;
    const int32_t **ids = malloc(sizeof *ids * (size_t)(cap ? cap : 1));
    int *lens = malloc(sizeof *lens * (size_t)(cap ? cap : 1));
    float **dst = malloc(sizeof *dst * (size_t)(cap ? cap : 1));
    float *out = malloc(sizeof(float) * (size_t)(cap ? cap : 1) * e->dim);
    bool oom = !ids || !lens || !dst || !out;
    int d = e->dim;
    for (job *j = list; j && !oom; j = j->next)
        for (int i = 0; !j->failed && i < j->n; i++) {
            if (k > 0 && (rows + j->n_ids[i] > e->budget || k == e->max_seqs)) {
                oom |= encode_(e, ids, lens, k, out) < 0;
                for (int t = 0; t < k && !oom; t++)
                    memcpy(dst[t], out + (size_t)t * d, sizeof(float) * d);
                k = rows = 0;
            }
            ids[k] = j->ids[i];
            lens[k] = j->n_ids[i];
            dst[k++] = j->vecs + (size_t)i * d;
            rows += j->n_ids[i];
        }
    if (k > 0 && !oom) {
        oom |= encode_(e, ids, lens, k, out) < 0;
        for (int t = 0; t < k && !oom; t++)
            memcpy(dst[t], out + (size_t)t * d, sizeof(float) * d);
    }
    for (job *j = list; j && oom; j = j->next)
        if (!j->failed) {
            pl_err_set(&j->err, 500, "server_error", NULL, NULL, "out of memory");
            j->failed = true;
        }
    free(ids), free(lens), free(dst), free(out);
}

static void *worker_(void *arg)
{
    emb *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->in)
            pthread_cond_wait(&e->cv, &e->mu);
        job *list = reverse_(e->in);
        e->in = NULL;
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) {
            while (list) {
                job *next = list->next;
                job_free_(list);
                list = next;
            }
            return NULL;
        }
        for (job *j = list; j; j = j->next)
            if (!atomic_load(&j->aborted))
                prepare_(e, j);
            else
                j->failed = true;
        run_jobs_(e, list);
        pthread_mutex_lock(&e->mu);
        while (list) {
            job *next = list->next;
            list->next = e->out;
            e->out = list;
            list = next;
        }
        pthread_mutex_unlock(&e->mu);
        uint64_t one = 1;
        if (write(e->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            pl_warn("embeddings: the wake-up write failed");
    }
}

/* ---- main thread ------------------------------------------------------ */

static void unlink_live_(emb *e, job *j)
{
    for (job **p = &e->live; *p; p = &(*p)->live_next)
        if (*p == j) {
            *p = j->live_next;
            return;
        }
}

static void wake_cb_(evutil_socket_t fd, short what, void *ud)
{
    emb *e = ud;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof v) < 0 && errno != EAGAIN)
        return;
    pthread_mutex_lock(&e->mu);
    job *list = reverse_(e->out);
    e->out = NULL;
    pthread_mutex_unlock(&e->mu);
    while (list) {
        job *j = list, *next = j->next;
        unlink_live_(e, j);
        if (!atomic_load(&j->aborted)) {
            pl_embed_result r = {.vectors = j->failed ? NULL : j->vecs, .n = j->n,
                                 .dim = e->dim, .prompt_tokens = j->tokens,
                                 .error = j->failed ? &j->err : NULL};
            e->n_tokens += j->failed ? 0 : j->tokens;
            j->sink.on_done(j->sink.ud, &r);
        }
        job_free_(j);
        list = next;
    }
}

static job *job_new_(const pl_embed_request *r)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->n = r->n;
    j->truncate = r->truncate;
    j->texts = calloc((size_t)r->n, sizeof *j->texts);
    j->lens = calloc((size_t)r->n, sizeof *j->lens);
    j->ids = calloc((size_t)r->n, sizeof *j->ids);
    j->n_ids = calloc((size_t)r->n, sizeof *j->n_ids);
    bool ok = j->texts && j->lens && j->ids && j->n_ids;
    for (int i = 0; ok && i < r->n; i++) {
        const pl_embed_input *in = &r->inputs[i];
        if (in->text) {
            ok = (j->texts[i] = malloc(in->len + 1)) != NULL;
            if (ok) {
                memcpy(j->texts[i], in->text, in->len);
                j->texts[i][in->len] = '\0';
                j->lens[i] = in->len;
            }
        } else {
            ok = (j->ids[i] = malloc(sizeof(int32_t) * (size_t)(in->n_ids + 1))) != NULL;
            if (ok && in->n_ids)
                memcpy(j->ids[i], in->ids, sizeof(int32_t) * (size_t)in->n_ids);
            j->n_ids[i] = in->n_ids;
        }
    }
    if (!ok) {
        job_free_(j);
        return NULL;
    }
    return j;
}

static int embed_(pl_backend *b, const pl_embed_request *r, pl_embed_sink sink, uint64_t *id,
                  pl_err *err)
{
    emb *e = (emb *)b;
    if (r->n < 1)
        return pl_err_set(err, 400, "invalid_request_error", "input", NULL, "input is empty");
    if (r->truncate > e->max_len)
        return pl_err_set(err, 400, "invalid_request_error", "truncate_prompt_tokens", NULL,
                          "%d is more than the model's %d tokens", r->truncate, e->max_len);
    job *j = job_new_(r);
    if (!j)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    j->id = ++e->next_id;
    j->sink = sink;
    j->live_next = e->live;
    e->live = j;
    e->n_requests++;
    e->n_inputs += r->n;
    *id = j->id;
    pthread_mutex_lock(&e->mu);
    j->next = e->in;
    e->in = j;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

static int embed_info_(pl_backend *b, pl_embed_info *out)
{
    emb *e = (emb *)b;
    *out = (pl_embed_info){.dim = e->dim, .max_len = e->max_len,
                           .normalized = e->normalize, .pooling = pl_pooling_name(e->pooling),
                           .matryoshka = e->mrl, .dims = e->mrl_dims, .n_dims = e->n_mrl};
    return 0;
}

static int submit_(pl_backend *b, const pl_gen_request *req, pl_sink sink, uint64_t *id,
                   pl_err *err)
{
    (void)req, (void)sink, (void)id;
    return pl_err_set(err, 400, "invalid_request_error", "model", "model_not_generative",
                      "The model '%s' is an embedding model: it serves POST /v1/embeddings "
                      "and does not generate text", b->model);
}

static void abort_(pl_backend *b, uint64_t id)
{
    emb *e = (emb *)b;
    for (job *j = e->live; j; j = j->live_next)
        if (j->id == id)
            atomic_store(&j->aborted, true);
}

static void set_paused_(pl_backend *b, uint64_t id, bool paused)
{
    (void)b, (void)id, (void)paused;
}

static int capacity_(pl_backend *b)
{
    (void)b;
    return CAPACITY;
}

static json_t *stats_(pl_backend *b)
{
    emb *e = (emb *)b;
    return json_pack("{s:s, s:b, s:i, s:i, s:s, s:b, s:I, s:I, s:I}", "kind", "cpu",
                     "embedding", 1, "dimensions", e->dim, "max_model_len", e->max_len,
                     "pooling", pl_pooling_name(e->pooling), "normalized", e->normalize,
                     "embed_requests", (json_int_t)e->n_requests, "embed_inputs",
                     (json_int_t)e->n_inputs, "embed_tokens", (json_int_t)e->n_tokens);
}

static int tokenize_(pl_backend *b, const pl_gen_request *req, bool add_special, int32_t **ids,
                     int *n, pl_err *err)
{
    emb *e = (emb *)b;
    if (req->messages)
        return pl_err_set(err, 400, "invalid_request_error", "messages", NULL, "an embedding "
                          "model has no chat template: tokenize a prompt");
    const char *p = req->prompt ? req->prompt : "";
    if (pl_tokenizer_encode(e->tok, p, strlen(p), add_special, true, ids, n) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "tokenizer out of memory");
    return 0;
}

static int detokenize_(pl_backend *b, const int32_t *ids, int n, char **text, pl_err *err)
{
    emb *e = (emb *)b;
    if (pl_backend_check_ids(ids, n, e->n_vocab, "tokens", err) < 0)
        return -1;
    size_t len = pl_tokenizer_decode(e->tok, ids, n, false, NULL, 0);
    if (!(*text = malloc(len + 1)))
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    pl_tokenizer_decode(e->tok, ids, n, false, *text, len + 1);
    return 0;
}

static int max_model_len_(pl_backend *b) { return ((emb *)b)->max_len; }
static int vocab_size_(pl_backend *b) { return ((emb *)b)->n_vocab; }

static void free_(pl_backend *b)
{
    emb *e = (emb *)b;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (job *j = reverse_(e->out); j;) {
        job *next = j->next;
        job_free_(j);
        j = next;
    }
    if (e->wake_ev)
        event_free(e->wake_ev);
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pl_pool_free(e->pool);
    pl_encoder_free(e->m);
    pl_cpu_fwd_free(e->fwd);
    pl_model_free(e->dm);
    free(e->rows), free(e->pos), free(e->seq), free(e->blocks), free(e->hid);
    pl_tokenizer_free(e->tok);
    pl_gguf_free(e->gguf);
    pl_engine_hf_free(&e->hf);
    free(e->base.model);
    free(e);
}

static const pl_backend_ops ops_ = {
    .kind = "cpu", .submit = submit_, .abort = abort_, .set_paused = set_paused_,
    .capacity = capacity_, .stats = stats_, .tokenize = tokenize_,
    .detokenize = detokenize_, .max_model_len = max_model_len_, .free = free_,
    .vocab_size = vocab_size_, .embed_info = embed_info_, .embed = embed_,
};

/* config.json's Matryoshka keys, as vLLM reads them: is_matryoshka, or a
 * matryoshka_dimensions list (the lengths a request may ask for). */
static int matryoshka_(emb *e, const char *dir, char *err, size_t n)
{
    pl_hf_json j = {0};
    bool on = false;
    int rc = pl_hf_json_load(&j, dir, "config.json", false, err, n);
    if (rc == 0)
        rc = pl_hf_json_bool(&j, "is_matryoshka", false, &on, err, n) < 0 ? -1 : 0;
    json_t *d = rc == 0 ? pl_hf_json_get(&j, "matryoshka_dimensions") : NULL, *v;
    size_t i;
    if (d && (!json_is_array(d) || json_array_size(d) < 1 || json_array_size(d) > MAX_MRL))
        rc = pl_hf_json_fail(&j, "matryoshka_dimensions", err, n, "must be a list of 1 to "
                             "%d lengths", MAX_MRL);
    json_array_foreach(rc == 0 && d ? d : NULL, i, v) {
        json_int_t k = json_integer_value(v);
        if (!json_is_integer(v) || k < 1 || k > e->dim) {
            rc = pl_hf_json_fail(&j, "matryoshka_dimensions", err, n, "item %zu must be an "
                                 "integer in [1, %d] (the hidden size)", i, e->dim);
            break;
        }
        e->mrl_dims[e->n_mrl++] = (int)k;
    }
    e->mrl = rc == 0 && (on || e->n_mrl > 0);
    pl_hf_json_free(&j);
    return rc;
}

/* Pooling, normalisation and the length limit: --pooling, else
 * sentence-transformers' modules, else the file's pooling_type, else
 * mean; normalised when a Normalize module says so (a GGUF file: always,
 * as llama-server normalises by default). */
static int settings_(emb *e, const pl_engine_embed_files *f, const pl_engine_config *cfg,
                     char *err, size_t n)
{
    pl_st_config st = {0};
    if (f->dir && (pl_st_config_read(f->dir, &st, err, n) < 0 ||
                   matryoshka_(e, f->dir, err, n) < 0))
        return -1;
    if (st.dim && st.dim != e->dim)
        return snprintf(err, n, "%s: 1_Pooling/config.json: word_embedding_dimension %d, but "
                        "the model's hidden size is %d", f->dir, st.dim, e->dim), -1;
    pl_pooling own = e->m ? e->m->pooling : PL_POOLING_NONE;
    e->pooling = st.pooling ? st.pooling : own ? own : PL_POOLING_MEAN;
    e->normalize = st.present ? st.normalize : true;
    if (cfg->pooling && cfg->pooling[0] && pl_pooling_from_name(cfg->pooling, &e->pooling) < 0)
        return snprintf(err, n, "--pooling '%s': expected mean, cls or last", cfg->pooling), -1;
    int own_len = e->dm && e->n_pos > DECODER_MAX_LEN ? DECODER_MAX_LEN : e->n_pos;
    e->max_len = cfg->max_model_len > 0 ? cfg->max_model_len
                 : st.max_seq_length > 0 ? st.max_seq_length : own_len;
    if (e->max_len > e->n_pos)
        return snprintf(err, n, "max_model_len %d: the model has %d positions", e->max_len,
                        e->n_pos), -1;
    int mnbt = cfg->core.max_num_batched_tokens;
    if (e->dm)   /* the step's rows and K/V: --max-num-batched-tokens, at least one input */
        e->budget = mnbt > e->max_len ? mnbt : e->max_len;
    else
        e->budget = mnbt > e->max_len ? mnbt : DEFAULT_BUDGET;
    e->max_seqs = e->dm ? DECODER_SEQS : INT_MAX;
    pl_tokenizer_specials sp;
    pl_tokenizer_specials_get(e->tok, &sp);
    e->lead = sp.add_bos;
    e->trail = sp.add_eos;
    return 0;
}

/* A decoder's forward pass: one step of budget rows, DECODER_SEQS
 * sequences, each in blocks of its own (one full cache group). */
static int decoder_start_(emb *e, const pl_engine_config *cfg, char *err, size_t n)
{
    int mbs = (e->max_len + BLOCK - 1) / BLOCK;
    pl_fwd_opts fo = {.max_rows = e->budget, .max_out = 1, .max_ctx = e->max_len,
                      .num_blocks = e->budget / BLOCK + e->max_seqs, .block_size = BLOCK,
                      .gemm_min_rows = cfg->cpu.batch_invariant ? INT_MAX : 20,
                      .kv_f16 = cfg->cpu.kv_f16, .max_slots = e->max_seqs};
    char e2[512];
    if (!(e->fwd = pl_cpu_fwd_new(e->dm, e->pool, &fo, e2, sizeof e2)))
        return snprintf(err, n, "embeddings: %s", e2), -1;
    size_t R = (size_t)e->budget;
    e->rows = malloc(sizeof(int32_t) * R);
    e->pos = malloc(sizeof(int32_t) * R);
    e->seq = malloc(sizeof(int32_t) * R);
    e->blocks = malloc(sizeof(int32_t) * (size_t)e->max_seqs * mbs);
    e->hid = malloc(sizeof(float) * R * e->dim);
    if (!e->rows || !e->pos || !e->seq || !e->blocks || !e->hid)
        return snprintf(err, n, "embeddings: out of memory for a step of %d rows", e->budget),
               -1;
    return 0;
}

static int start_(emb *e, struct event_base *base, const pl_engine_config *cfg, char *err,
                  size_t n)
{
    int threads = cfg->cpu.threads;
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(1); /* the pool splits GEMMs itself */
    e->pool = pl_pool_new(threads > 0 ? threads : 1);
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!e->pool || e->wake_fd < 0)
        return snprintf(err, n, "embeddings: cannot start (threads or eventfd)"), -1;
    if (e->dm && decoder_start_(e, cfg, err, n) < 0)
        return -1;
    e->wake_ev = event_new(base, e->wake_fd, EV_READ | EV_PERSIST, wake_cb_, e);
    if (!e->wake_ev || event_add(e->wake_ev, NULL) < 0 ||
        pthread_create(&e->thread, NULL, worker_, e) != 0)
        return snprintf(err, n, "embeddings: cannot start its thread"), -1;
    e->started = true;
    return 0;
}

pl_backend *pl_engine_embed_open(struct event_base *base, const char *name,
                                 pl_engine_embed_files *f, const pl_engine_config *cfg,
                                 char *err, size_t n)
{
    emb *e = calloc(1, sizeof *e);
    char e2[1024];
    if (!e) {
        snprintf(err, n, "out of memory");
        pl_model_free(f->model);
        pl_tokenizer_free(f->tok);
        pl_gguf_free(f->gguf);
        pl_engine_hf_free(&f->hf);
        return NULL;
    }
    e->base.ops = &ops_;
    e->base.base = base;
    e->base.model = strdup(name);
    e->wake_fd = -1;
    e->gguf = f->gguf, e->hf = f->hf, e->tok = f->tok;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (f->model) {
        e->dm = f->model;
        e->dim = e->dm->n_embd, e->n_vocab = e->dm->n_vocab, e->arch = e->dm->arch_name;
        e->n_pos = e->dm->n_ctx_train > 0 ? e->dm->n_ctx_train : DECODER_MAX_LEN;
    } else if (!(e->m = pl_encoder_load(f->meta, e2, sizeof e2))) {
        snprintf(err, n, "%s", e2);
        goto fail;
    } else {
        e->dim = e->m->n_embd, e->n_vocab = e->m->n_vocab, e->arch = e->m->family->name;
        e->n_pos = e->m->n_pos;
    }
    if (!e->tok && !(e->tok = pl_tokenizer_from_gguf(e->gguf, e2, sizeof e2))) {
        snprintf(err, n, "%s", e2);
        goto fail;
    }
    if (!e->base.model || settings_(e, f, cfg, err, n) < 0 ||
        start_(e, base, cfg, err, n) < 0)
        goto fail;
    pl_info("model %s: %s %s, %d layers, %d-dim, vocab %d: embeddings, %s pooling%s, "
            "at most %d tokens", name, e->arch, e->dm ? "decoder (final hidden states)"
            : "encoder", e->dm ? e->dm->n_layer : e->m->n_layer, e->dim,
            e->n_vocab, pl_pooling_name(e->pooling), e->normalize ? ", normalised" : "",
            e->max_len);
    return &e->base;
fail:
    free_(&e->base);
    return NULL;
}

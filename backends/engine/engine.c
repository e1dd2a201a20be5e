/* engine.c - the engine as a pl_backend: options and geometry, the
 * backend's operations (submit is engine_prep.c's; abort, pause and
 * retention hints go into the inbox), capacity, statistics,
 * tokenize/detokenize, start and stop. The top of the engine's files: it
 * calls the others, none calls it. Main thread: pl_engine_backend_new
 * makes its caller the engine's main thread (e->main_role); the
 * operations that touch main-thread state assert it. */
#include "backends/engine/engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "backends/engine/engine_chan.h"
#include "backends/engine/engine_kv.h"
#include "backends/engine/engine_loop.h"
#include "backends/engine/engine_prep.h"
#include "backends/engine/engine_req.h"
#include "backends/engine/engine_stats.h"

void pl_engine_options_defaults(pl_engine_options *o)
{
    memset(o, 0, sizeof *o);
    o->async = true;
    o->prefix_caching = true;
    o->ckpt_every = 4;
}

int pl_engine_capacity_for(int max_num_seqs, int num_blocks, int block_size,
                           int max_model_len)
{
    long kv = max_model_len > 0
                  ? (long)num_blocks * block_size / max_model_len : max_num_seqs;
    long c = kv < max_num_seqs ? kv : max_num_seqs;
    return c < 1 ? 1 : (int)c;
}

/* ---- backend operations ---- */

static void eng_abort_(pl_backend *b, uint64_t id)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    eng_sub *s = pl_engine_sub_find_(e, id);
    if (!s)
        return;
    bool preparing = s->preparing;        /* then the worker's result is dropped */
    pl_engine_sub_remove_(e, id);         /* the sink is never called again */
    if (!preparing)
        pl_engine_control_(e, id, ENG_MSG_ABORT);
}

/* A retention hint: applied on the engine thread, in order with submits. */
static void eng_retain_(pl_backend *b, uint64_t key, int next_need)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    eng_msg *m = key ? calloc(1, sizeof *m) : NULL;
    if (!m)
        return;
    m->type = ENG_MSG_RETAIN;
    m->id = key;
    m->n = next_need < 0 ? PL_NEED_DONE : next_need;
    pl_engine_inbox_push_(e, m);
}

static void eng_set_paused_(pl_backend *b, uint64_t id, bool paused)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    eng_sub *s = pl_engine_sub_find_(e, id);
    if (s && s->preparing)
        s->paused = paused;               /* applied when it reaches the inbox */
    else if (s)
        pl_engine_control_(e, id, paused ? ENG_MSG_PAUSE : ENG_MSG_RESUME);
}

static int eng_capacity_(pl_backend *b)
{
    return ((pl_engine *)b)->capacity;
}

static int eng_tokenize_(pl_backend *b, const pl_gen_request *req,
                         bool add_special, int32_t **ids, int *n, pl_err *err)
{
    pl_engine *e = (pl_engine *)b;
    if (req->prompt_tokens || !e->text.encode)
        return pl_engine_prompt_ids_(e, req, ids, n, err);
    return e->text.encode(e->text.ud, req, add_special, ids, n, err);
}

static int eng_detokenize_(pl_backend *b, const int32_t *ids, int n,
                           char **text, pl_err *err)
{
    pl_engine *e = (pl_engine *)b;
    size_t total = 0, len;
    if (pl_engine_check_ids_(e, ids, n, "tokens", err) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (e->text.token_bytes(e->text.ud, ids[i], &len))
            total += len;
    char *s = malloc(total + 1);
    if (!s)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *p = e->text.token_bytes(e->text.ud, ids[i], &len);
        if (p && len) {
            memcpy(s + at, p, len);
            at += len;
        }
    }
    s[at] = '\0';
    *text = s;
    return 0;
}

static json_t *eng_tokenizer_info_(pl_backend *b, pl_err *err)
{
    pl_engine *e = (pl_engine *)b;
    if (!e->text.tokenizer_info) {
        pl_err_set(err, 501, "invalid_request_error", NULL, "not_implemented",
                   "the model '%s' has no tokenizer configuration to give", b->model);
        return NULL;
    }
    json_t *j = e->text.tokenizer_info(e->text.ud);
    if (!j || json_object_set_new(j, "model_max_length", json_integer(e->max_len)) < 0) {
        json_decref(j);
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    return j;
}

static const struct pl_tool_format *eng_tool_format_(pl_backend *b)
{
    pl_engine *e = (pl_engine *)b;
    return e->text.tool_format ? e->text.tool_format(e->text.ud) : NULL;
}

static const struct pl_reasoning_format *eng_reasoning_format_(pl_backend *b)
{
    pl_engine *e = (pl_engine *)b;
    return e->text.reasoning_format ? e->text.reasoning_format(e->text.ud) : NULL;
}

static int eng_max_model_len_(pl_backend *b)
{
    return ((pl_engine *)b)->max_len;
}

static int eng_vocab_size_(pl_backend *b)
{
    return ((pl_engine *)b)->n_vocab;
}

static json_t *eng_stats_(pl_backend *b)
{
    return pl_engine_stats_json_((pl_engine *)b);
}

static void eng_free_(pl_backend *b)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    pl_engine_prep_free_(e);
    if (e->thread_started) {
        pl_engine_inbox_stop_(e);
        pthread_join(e->thread, NULL);
    }
    pl_engine_queue_free_(&e->inbox);
    pl_engine_queue_free_(&e->pending_out);
    pl_engine_wake_free_(e);
    for (eng_msg *m = e->local_free, *next; m; m = next) {
        next = m->next;
        pl_engine_msg_free_(m);
    }
    pl_engine_subs_free_(e);
    free(e->lp_scratch);
    free(e->top_scratch);
    for (int i = 0; i < PL_RUNNER_MAX_INFLIGHT; i++)
        pl_batch_step_free(&e->steps[i]);
    pl_batch_free(e->batch);
    pl_kv_blocks_free(e->kv);
    pl_kv_ckpt_free(e->ckpt);
    if (e->runner)
        e->runner->ops->free(e->runner);
    pl_constraint_cache_free(e->constraints);
    if (e->text.free)
        e->text.free(e->text.ud);
    pthread_mutex_destroy(&e->in_lock);
    pthread_cond_destroy(&e->in_cond);
    pthread_mutex_destroy(&e->out_lock);
    pthread_mutex_destroy(&e->stats_lock);
    free(e->base.model);
    free(e);
}

static const pl_backend_ops engine_ops = {
    .kind = "engine",
    .submit = pl_engine_submit_,
    .abort = eng_abort_,
    .set_paused = eng_set_paused_,
    .capacity = eng_capacity_,
    .kv = pl_engine_kv_view_,
    .stats = eng_stats_,
    .tokenize = eng_tokenize_,
    .detokenize = eng_detokenize_,
    .max_model_len = eng_max_model_len_,
    .tokenizer_info = eng_tokenizer_info_,
    .free = eng_free_,
    .tool_format = eng_tool_format_,
    .reasoning_format = eng_reasoning_format_,
    .retain = eng_retain_,
    .vocab_size = eng_vocab_size_,
};

/* Resolve 0 = "the runner's" and check the options against it. */
static int resolve_options_(pl_engine *e, const pl_engine_options *o, pl_err *err)
{
    const pl_runner_info *ri = &e->runner->info;
    pl_engine_options r = *o;
    if (!r.block_size)
        r.block_size = ri->block_size;
    if (!r.num_blocks)
        r.num_blocks = ri->num_blocks;
    if (!r.max_num_seqs)
        r.max_num_seqs = ri->max_seqs;
    if (!r.max_num_batched_tokens)
        r.max_num_batched_tokens = ri->max_rows;
    if (r.block_size != ri->block_size || r.num_blocks < 1 ||
        r.num_blocks > ri->num_blocks || r.max_num_seqs < 1 ||
        r.max_num_seqs > ri->max_seqs || r.max_num_batched_tokens < 1 ||
        r.max_num_batched_tokens > ri->max_rows || ri->max_model_len < 2)
        return pl_err_set(err, 500, "server_error", NULL, NULL,
                          "engine options do not fit the runner (block_size %d, "
                          "num_blocks <= %d, max_num_seqs <= %d, "
                          "max_num_batched_tokens <= %d)", ri->block_size,
                          ri->num_blocks, ri->max_seqs, ri->max_rows);
    e->opt = r;
    e->max_model_len = ri->max_model_len;
    /* The cache groups the runner reads; one full group without them. */
    e->kv_layout = ri->kv_layout;
    if (!e->runner->kv_groups || e->kv_layout.n_groups == 0)
        pl_kv_layout_init_full(&e->kv_layout, e->kv_layout.n_layer > 0 ? e->kv_layout.n_layer : 1);
    const pl_kv_layout *lo = &e->kv_layout;
    e->max_len = ri->max_model_len;
    while (e->max_len > 1 && pl_kv_layout_need(lo->n_kinds, lo->kind_window, lo->kind_groups,
                                               r.block_size, e->max_len) > r.num_blocks)
        e->max_len -= r.block_size < e->max_len - 1 ? r.block_size : e->max_len - 1;
    e->n_vocab = ri->n_vocab;
    e->kv_rule = r.capacity_rule != PL_CAPACITY_WORST_CASE;
    int counted = r.capacity_len > 0 && r.capacity_len < ri->max_model_len ? r.capacity_len
                                                                          : ri->max_model_len;
    long per_seq = pl_kv_layout_need(lo->n_kinds, lo->kind_window, lo->kind_groups,
                                     r.block_size, counted);
    e->worst_capacity = pl_engine_capacity_for(r.max_num_seqs, r.num_blocks, r.block_size,
                                               (int)(per_seq * r.block_size));
    e->capacity = e->kv_rule ? r.max_num_seqs : e->worst_capacity;
    e->max_inflight = r.async ? PL_RUNNER_MAX_INFLIGHT : 1;
    return 0;
}

static int init_core_(pl_engine *e, pl_err *err)
{
    pl_batch_config bc = {e->opt.max_num_seqs, e->opt.max_num_batched_tokens,
                          e->max_model_len,
                          e->opt.prefix_caching && !e->opt.no_partial_prefix &&
                              e->runner->ops->copy_block != NULL,
                          e->opt.prefix_caching ? PL_ENGINE_DEFER_STEPS : 0, &e->kv_layout};
    /* A hybrid's prefix hits resume from recurrent-state checkpoints
     * (kv_ckpt.h); without slots for them prefix caching is off. */
    const pl_runner_info *ri = &e->runner->info;
    if (e->opt.prefix_caching && ri->num_ckpts > 0) {
        e->ckpt = pl_kv_ckpt_new(ri->num_ckpts, ri->ckpt_bytes);
        if (!e->ckpt)
            return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        bc.ckpt = e->ckpt;
        bc.ckpt_every = e->opt.ckpt_every;
    }
    e->kv = pl_kv_blocks_new_grouped(e->opt.num_blocks, e->opt.block_size,
                                     e->opt.prefix_caching, e->kv_layout.n_groups);
    e->t_open = pl_engine_now_ms_();
    if (e->kv)    /* hinted conversations (jobs) evict by next need */
        pl_kv_blocks_set_next_need(e->kv, true);
    e->batch = e->kv ? pl_batch_new(&bc, e->kv) : NULL;
    if (!e->batch)
        return pl_err_set(err, 500, "server_error", NULL, NULL,
                          "engine: cannot allocate the scheduler");
    for (int i = 0; i < PL_RUNNER_MAX_INFLIGHT; i++)
        if (pl_batch_step_init(&e->steps[i], &bc, e->opt.block_size) < 0)
            return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    e->st_local.idle_ok = true;
    e->st_shared = e->st_local;
    pl_engine_kv_publish_(e);    /* the whole cache is free */
    return 0;
}

pl_backend *pl_engine_backend_new(struct event_base *base, const char *model,
                                  pl_runner *runner, const pl_engine_text *text,
                                  const pl_engine_options *opts, pl_err *err)
{
    pl_engine *e = calloc(1, sizeof *e);
    if (!e) {
        runner->ops->free(runner);
        if (text->free)
            text->free(text->ud);
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    pl_thread_role_set(&e->main_role);
    e->ops = engine_ops;
    e->ops.kind = runner->ops->name;
    e->base.ops = &e->ops;
    e->base.base = base;
    e->runner = runner;
    e->text = *text;
    e->wake_fd = -1;
    pthread_mutex_init(&e->in_lock, NULL);
    pthread_cond_init(&e->in_cond, NULL);
    pthread_mutex_init(&e->out_lock, NULL);
    pthread_mutex_init(&e->stats_lock, NULL);
    pl_engine_options def;
    pl_engine_options_defaults(&def);
    if (!(e->base.model = strdup(model ? model : "engine"))) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (resolve_options_(e, opts ? opts : &def, err) < 0 || init_core_(e, err) < 0)
        goto fail;
    e->base.json_ws = (pl_json_ws)(opts ? opts->json_ws : def.json_ws);
    if (e->text.token_bytes && e->text.is_eog) {
        pl_vocab_source vs = {e->n_vocab, e->text.token_bytes, e->text.is_eog, e->text.ud};
        e->constraints = pl_constraint_cache_new(&vs, e->base.json_ws);
    }
    if (pl_engine_wake_init_(e) < 0) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "engine: eventfd failed");
        goto fail;
    }
    if (pl_engine_prep_init_(e, e->opt.prepare_threads) < 0) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "engine: no prepare workers");
        goto fail;
    }
    if (pthread_create(&e->thread, NULL, pl_engine_thread_main_, e) != 0) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "engine: no thread");
        goto fail;
    }
    e->thread_started = true;
    return &e->base;
fail:
    eng_free_(&e->base);
    return NULL;
}

/* engine_stats.c - the engine's statistics: the snapshot the engine thread
 * publishes under stats_lock at each step, and that snapshot as JSON (step
 * timing: schedule, process, execute, idle gap; rows, queues, the KV
 * cache), read on the main thread. */
#include "backends/engine/engine_stats.h"

#include <string.h>

#include "backends/engine/engine_kv.h"
#include "backends/engine/engine_req.h"
#include "src/base/io_pool.h"

/* Each kind's blocks: the sum over its groups (groups follow kind order). */
static void kinds_stats_(const pl_engine *e, pl_kv_group_stats *out)
{
    const pl_kv_layout *lo = &e->kv_layout;
    for (int k = 0, g = 0; k < lo->n_kinds; k++) {
        out[k] = (pl_kv_group_stats){0, 0, 0};
        for (int j = 0; j < lo->kind_groups[k]; j++, g++) {
            pl_kv_group_stats gs;
            pl_kv_blocks_group_stats(e->kv, g, &gs);
            out[k].used += gs.used;
            out[k].cached_free += gs.cached_free;
            out[k].cached += gs.cached;
        }
    }
}

void pl_engine_stats_publish_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    eng_stats *s = &e->st_local;
    s->running = pl_batch_num_running(e->batch);
    s->waiting = pl_batch_num_waiting(e->batch);
    pl_kv_blocks_stats(e->kv, &s->kv);
    if (e->ckpt)
        pl_kv_ckpt_stats_get(e->ckpt, &s->ckpt);
    kinds_stats_(e, s->kv_kinds);
    pl_engine_kv_publish_(e);
    pthread_mutex_lock(&e->stats_lock);
    e->st_shared = *s;
    pthread_mutex_unlock(&e->stats_lock);
}

static double per_(double total, uint64_t n)
{
    return n ? total / (double)n : 0.0;
}

static json_t *kv_json_(const pl_kv_stats *kv)
{
    uint64_t q = kv->queries;
    return json_pack("{s:i, s:i, s:i, s:f, s:i, s:i, s:i, s:I, s:I, s:f, s:I}",
                     "num_blocks", kv->num_blocks, "block_size", kv->block_size,
                     "used", kv->used,
                     "usage", kv->num_blocks ? (double)kv->used / kv->num_blocks : 0.0,
                     "free", kv->free,
                     "cached_free", kv->cached_free, "cached", kv->cached,
                     "prefix_queries", (json_int_t)q,
                     "prefix_hits", (json_int_t)kv->hits,
                     "prefix_hit_rate", q ? (double)kv->hits / (double)q : 0.0,
                     "evictions", (json_int_t)kv->evictions);
}

/* The cache groups by kind (kv_layout.h): window (0: full), groups,
 * layers, and the blocks they hold now. */
static json_t *groups_json_(const pl_engine *e, const eng_stats *s)
{
    const pl_kv_layout *lo = &e->kv_layout;
    json_t *a = json_array();
    for (int k = 0; a && k < lo->n_kinds; k++) {
        int layers = 0;
        for (int l = 0; l < lo->n_layer; l++)
            layers += lo->layer_group[l] >= 0 && lo->group_window[lo->layer_group[l]] ==
                                                      lo->kind_window[k];
        const pl_kv_group_stats *g = &s->kv_kinds[k];
        json_array_append_new(a, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i}",
                                           "kind", lo->kind_window[k] ? "sliding" : "full",
                                           "window", lo->kind_window[k],
                                           "groups", lo->kind_groups[k], "layers", layers,
                                           "used", g->used, "cached_free", g->cached_free,
                                           "cached", g->cached));
    }
    return a;
}

static json_t *timing_json_(const eng_stats *s)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
                     "schedule_ms", s->schedule_ms,
                     "process_ms", s->process_ms,
                     "execute_ms", s->execute_ms,
                     "idle_gap_ms", s->idle_gap_ms,
                     "schedule_ms_per_step", per_(s->schedule_ms, s->steps),
                     "process_ms_per_step", per_(s->process_ms, s->steps_done),
                     "execute_ms_per_step", per_(s->execute_ms, s->steps_done),
                     "idle_gap_ms_per_step", per_(s->idle_gap_ms, s->steps),
                     "max_idle_gap_ms", s->max_idle_gap_ms);
}

/* The compiled-constraint cache: lookups answered from it, compiles and
 * their CPU-side milliseconds (on the prepare workers). */
static json_t *constraints_json_(pl_constraint_cache *c)
{
    uint64_t hits = 0, compiles = 0;
    double ms = 0;
    if (c)
        pl_constraint_cache_stats(c, &hits, &compiles, &ms);
    return json_pack("{s:I, s:I, s:f}", "hits", (json_int_t)hits, "compiles",
                     (json_int_t)compiles, "compile_ms", ms);
}

json_t *pl_engine_stats_json_(pl_engine *e)
{
    eng_stats s;
    pthread_mutex_lock(&e->stats_lock);
    s = e->st_shared;
    pthread_mutex_unlock(&e->stats_lock);
    json_t *o = json_pack(
        "{s:s, s:s, s:b, s:b, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I,"
        " s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:I, s:I, s:b, s:s}",
        "kind", e->ops.kind, "model", e->base.model,
        "async", e->opt.async, "prefix_caching", e->opt.prefix_caching,
        "capacity", e->capacity, "max_num_seqs", e->opt.max_num_seqs,
        "max_num_batched_tokens", e->opt.max_num_batched_tokens,
        "max_model_len", e->max_model_len, "block_size", e->opt.block_size,
        "steps", (json_int_t)s.steps, "steps_done", (json_int_t)s.steps_done,
        "rows", (json_int_t)s.rows, "decode_rows", (json_int_t)s.decode_rows,
        "prefill_rows", (json_int_t)s.prefill_rows,
        "preemptions", (json_int_t)s.preemptions,
        "tokens_out", (json_int_t)s.tokens_out,
        "aborted", (json_int_t)s.aborted, "pause_msgs", (json_int_t)s.pause_msgs,
        "running", s.running, "waiting", s.waiting,
        "idle_checks", (json_int_t)s.idle_checks,
        "idle_check_step", (json_int_t)s.idle_check_step,
        "kv_invariant_ok", s.idle_ok,
        "kv_invariant_why", s.idle_ok ? "" : s.idle_why);
    if (o) {
        json_object_set_new(o, "timing", timing_json_(&s));
        double up = pl_engine_now_ms_() - e->t_open;
        json_object_set_new(o, "rows_per_step", json_real(s.steps ? (double)s.rows / (double)s.steps : 0.0));
        json_object_set_new(o, "busy_fraction", json_real(up > 0 ? s.execute_ms / up : 0.0));
        json_t *kv = kv_json_(&s.kv);
        /* Conversation-aware KV (issue 17): hints applied, blocks freed by
         * finished conversations, evictions that passed over the LRU block. */
        json_object_set_new(kv, "retention_hints", json_integer((json_int_t)s.hints));
        json_object_set_new(kv, "done_released", json_integer((json_int_t)s.kv.done_released));
        json_object_set_new(kv, "need_evictions", json_integer((json_int_t)s.kv.need_evictions));
        json_object_set_new(kv, "partial_hits", json_integer((json_int_t)s.kv.partial_hits));
        json_object_set_new(kv, "partial_tokens", json_integer((json_int_t)s.kv.partial_tokens));
        json_object_set_new(kv, "share_deferrals", json_integer((json_int_t)s.deferrals));
        /* Cache groups: a block holds layers_per_block layers of one group. */
        json_object_set_new(kv, "layers_per_block", json_integer(e->kv_layout.n_slots));
        json_object_set_new(kv, "groups", groups_json_(e, &s));
        /* Hybrids: the recurrent layers' state checkpoints (kv_ckpt.h). */
        json_object_set_new(kv, "checkpoints", json_pack(
            "{s:i, s:i, s:I, s:I, s:I, s:I, s:i}", "slots", s.ckpt.slots, "used", s.ckpt.used,
            "bytes_each", (json_int_t)s.ckpt.slot_bytes, "saves", (json_int_t)s.ckpt.saves,
            "restores", (json_int_t)s.ckpt.restores, "evictions", (json_int_t)s.ckpt.evictions,
            "every_blocks", e->ckpt ? e->opt.ckpt_every : 0));
        json_object_set_new(o, "kv", kv);
        /* Issue 41: how capacity is decided, and what the seed's rule
         * would give (issue 41's table compares them). */
        json_object_set_new(o, "capacity_rule", json_string(e->kv_rule ? "kv" : "worst-case"));
        json_object_set_new(o, "worst_case_capacity",
                            json_integer(e->worst_capacity));
        if (!strcmp(e->ops.kind, "cpu"))
            json_object_set_new(o, "cpu_kernels", json_string(e->runner->kernels));
        json_object_set_new(o, "preparing", json_integer(e->prep ? pl_io_pool_outstanding(e->prep)
                                                                  : 0));
        json_object_set_new(o, "constraints", constraints_json_(e->constraints));
    }
    return o;
}

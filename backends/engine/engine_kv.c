/* engine_kv.c - the engine's KV cache as admission counts it (backend.h,
 * ops->kv; schedulers/dispatch.h, pl_dispatch_kv): blocks free or
 * evictable, blocks promised (running sequences' growth to their reply
 * budget, waiting sequences' whole need, submits the engine thread has not
 * taken yet), and the running estimates of a prompt's footprint and a
 * reply's length.
 *
 * Cached blocks of conversations running now are evictable, but the
 * view keeps them out of the free ones: their next requests (the other
 * agents of the round, the next round) reuse them, and admitting more
 * work by evicting them would trade cache hits for concurrency until the
 * working set no longer fits (with the seed layout's per-agent prefixes,
 * it did: 14 % of round >= 2 prompt tokens from the cache instead of 61 %).
 *
 * The engine thread owns the cache, so it publishes the figures through
 * atomics at each step and before it posts any DONE: a completion's blocks
 * are free in the view its DONE makes dispatch read. The main thread
 * counts what it submitted until the engine thread has counted it, with
 * the same formula (pl_dispatch_kv_need: prompt + reply budget), so a
 * view read right after a submit already holds that request. Each
 * function asserts its thread (engine_kv.h). */
#include "backends/engine/engine_kv.h"

/* Weight of a new sample of the prompt footprint (one per step). */
#define PROMPT_EWMA 0.0625

/* The view's cache groups: the engine's layout (constant once open). */
static void set_kinds_(const pl_engine *e, pl_dispatch_kv *kv)
{
    const pl_kv_layout *lo = &e->kv_layout;
    kv->n_kinds = lo->n_kinds;
    for (int k = 0; k < lo->n_kinds; k++) {
        kv->kind_window[k] = lo->kind_window[k];
        kv->kind_groups[k] = lo->kind_groups[k];
    }
}

void pl_engine_kv_submit_(pl_engine *e, eng_req *r)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    pl_dispatch_kv kv = {.block_size = e->opt.block_size,
                         .reply_tokens = atomic_load_explicit(&e->kv_reply_est,
                                                              memory_order_relaxed)};
    set_kinds_(e, &kv);
    r->kv_blocks = pl_dispatch_kv_need(&kv, r->n_prompt, r->max_new);
    e->kv_submitted += (uint64_t)r->kv_blocks;
}

int pl_engine_kv_hold_(pl_engine *e, int prompt_bound, int max_tokens)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    pl_dispatch_kv kv;
    if (!pl_engine_kv_view_(&e->base, &kv))
        return 0;
    int blocks = pl_dispatch_kv_need(&kv, prompt_bound, max_tokens);
    e->kv_submitted += (uint64_t)blocks;
    return blocks;
}

void pl_engine_kv_unhold_(pl_engine *e, int blocks)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    e->kv_submitted -= (uint64_t)blocks;
}

void pl_engine_kv_seen_(pl_engine *e, const eng_req *r)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    e->kv_seen_local += (uint64_t)r->kv_blocks;
}

void pl_engine_kv_reply_(pl_engine *e, int n)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    pl_dispatch_est_observe(&e->kv_replies, n);
}

/* Tokens the blocks in use hold: a full kind's blocks (per group) when
 * there is one, else the blocks of the average group. */
static double used_tokens_(const pl_engine *e, const pl_kv_stats *st)
{
    const pl_kv_layout *lo = &e->kv_layout;
    if (lo->n_kinds <= 1 || lo->kind_window[0] != 0)
        return (double)st->used * st->block_size / (lo->n_groups > 0 ? lo->n_groups : 1);
    long used = 0;
    for (int g = 0; g < lo->kind_groups[0]; g++) {
        pl_kv_group_stats gs;
        pl_kv_blocks_group_stats(e->kv, g, &gs);
        used += gs.used;
    }
    return (double)used * st->block_size / lo->kind_groups[0];
}

/* The prompt footprint of a running sequence now: the tokens in use split
 * among the running sequences (a shared prefix counts once), less what
 * they generated. */
static void sample_prompt_(pl_engine *e, const pl_batch_kv_acct *a, const pl_kv_stats *st)
{
    if (a->running <= 0)
        return;
    double t = (used_tokens_(e, st) - (double)a->generated) / a->running;
    if (t < 0)
        t = 0;
    e->kv_prompt_ewma = e->kv_prompt_ewma > 0 ? e->kv_prompt_ewma + PROMPT_EWMA * (t - e->kv_prompt_ewma)
                                              : t;
}

void pl_engine_kv_publish_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    if (!e->kv_rule)
        return;
    int reply = pl_dispatch_est_value(&e->kv_replies);
    pl_batch_kv_acct a;
    pl_kv_stats st;
    pl_batch_kv_account(e->batch, reply, &a);
    pl_kv_blocks_stats(e->kv, &st);
    sample_prompt_(e, &a, &st);
    int kept = pl_kv_blocks_needed_now(e->kv);
    atomic_store_explicit(&e->kv_free, st.free + st.cached_free - kept, memory_order_relaxed);
    atomic_store_explicit(&e->kv_kept, kept, memory_order_relaxed);
    atomic_store_explicit(&e->kv_reserved, a.reserved, memory_order_relaxed);
    atomic_store_explicit(&e->kv_prompt_est, (int)(e->kv_prompt_ewma + 0.5), memory_order_relaxed);
    atomic_store_explicit(&e->kv_reply_est, reply, memory_order_relaxed);
    atomic_store_explicit(&e->kv_seen, e->kv_seen_local, memory_order_release);
}

bool pl_engine_kv_view_(pl_backend *b, pl_dispatch_kv *out)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    if (!e->kv_rule)
        return false;
    uint64_t seen = atomic_load_explicit(&e->kv_seen, memory_order_acquire);
    uint64_t unseen = e->kv_submitted - seen;
    long reserved = atomic_load_explicit(&e->kv_reserved, memory_order_relaxed) + (long)unseen;
    *out = (pl_dispatch_kv){
        .block_size = e->opt.block_size,
        .total = e->opt.num_blocks,
        .free = atomic_load_explicit(&e->kv_free, memory_order_relaxed),
        .kept = atomic_load_explicit(&e->kv_kept, memory_order_relaxed),
        .reserved = reserved > 1 << 30 ? 1 << 30 : (int)reserved,
        .prompt_tokens = atomic_load_explicit(&e->kv_prompt_est, memory_order_relaxed),
        .reply_tokens = atomic_load_explicit(&e->kv_reply_est, memory_order_relaxed),
    };
    set_kinds_(e, out);
    return true;
}

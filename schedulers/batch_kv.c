/* batch_kv.c - a sequence's KV blocks across the cache groups
 * (kv_layout.h): growing its tables, releasing a sliding group's blocks
 * that left the window, committing full blocks in every group, and the
 * prefix lookup that restores every group at the same position. */
#include "schedulers/batch_internal.h"
#include "schedulers/dispatch.h"

/* The first block a row at position pos still reads in a group of window
 * w: it attends to (pos - w, pos]. */
static int window_first_(const pl_batch *b, int w, long pos)
{
    long first = w > 0 && pos + 1 > w ? pos + 1 - w : 0;
    return (int)(first / b->block_size);
}

void pl_batch_release_blocks_(pl_batch *b, pl_batch_seq *s)
{
    for (int g = 0; g < b->n_groups; g++) {
        int32_t *t = pl_batch_seq_table_(b, s, g);
        for (int i = s->live_from[g]; i < s->n_blocks; i++)
            if (t[i] >= 0)
                pl_kv_blocks_release_tagged(b->kv, t[i], s->conv_key);
        s->live_from[g] = 0;
    }
    s->n_blocks = 0;
    s->n_committed = 0;
    s->last_hash = PL_KV_HASH_ROOT;
}

/* Blocks from `first` on go to the front of eviction, the reply's end
 * before its start (pl_batch_seq.reply_private). */
void pl_batch_release_front_(pl_batch *b, pl_batch_seq *s, int first)
{
    for (int g = 0; g < b->n_groups; g++) {
        int32_t *t = pl_batch_seq_table_(b, s, g);
        for (int i = first > s->live_from[g] ? first : s->live_from[g]; i < s->n_blocks; i++)
            if (t[i] >= 0) {
                pl_kv_blocks_release_front(b->kv, t[i]);
                t[i] = -1;
            }
    }
}

/* Commit the blocks whose positions are all known and computed, in every
 * group that still holds them: one hash chain, a block per group. */
void pl_batch_commit_(pl_batch *b, pl_batch_seq *s)
{
    int done = s->num_computed < s->n_tokens ? s->num_computed : s->n_tokens;
    int full = done / b->block_size;
    if (full > s->n_blocks)
        full = s->n_blocks;
    b->commit_h[s->n_committed] = s->last_hash;
    for (; s->n_committed < full; s->n_committed++) {
        const int32_t *ids = s->tokens + (size_t)s->n_committed * (size_t)b->block_size;
        uint64_t h = pl_kv_blocks_hash(s->last_hash, ids, b->block_size);
        for (int g = 0; g < b->n_groups; g++) {
            int32_t id = pl_batch_seq_table_(b, s, g)[s->n_committed];
            if (id >= 0)
                pl_kv_blocks_commit(b->kv, id, s->last_hash, ids);
        }
        s->last_hash = b->commit_h[s->n_committed + 1] = h;
    }
}

void pl_batch_keep_tail_(pl_batch *b, pl_batch_seq *s)
{
    if (!b->cfg.partial_prefix)
        return;
    pl_batch_commit_(b, s);
    int done = s->num_computed < s->n_tokens ? s->num_computed : s->n_tokens;
    int n = done - s->n_committed * b->block_size;
    if (s->n_committed != s->n_blocks - 1 || n <= 0 || n >= b->block_size)
        return;
    const int32_t *ids = s->tokens + (size_t)s->n_committed * (size_t)b->block_size;
    for (int g = 0; g < b->n_groups; g++) {
        int32_t id = pl_batch_seq_table_(b, s, g)[s->n_committed];
        if (id >= 0)
            pl_kv_blocks_commit_tail(b->kv, id, s->last_hash, ids, n);
    }
}

/* Sliding groups give back the blocks no row from position
 * s->num_computed on reads (committed first, so that they wait on the
 * cached-free list for prefix reuse). Rows of steps in flight may still
 * read them: a block is only handed to a later step, which runs after. */
static void slide_(pl_batch *b, pl_batch_seq *s)
{
    bool committed = false;
    for (int g = 0; g < b->n_groups; g++) {
        int lo = window_first_(b, b->group_window[g], s->num_computed);
        if (lo > s->n_blocks)
            lo = s->n_blocks;
        if (b->group_window[g] <= 0 || lo <= s->live_from[g])
            continue;
        if (!committed) {
            pl_batch_commit_(b, s);
            committed = true;
        }
        int32_t *t = pl_batch_seq_table_(b, s, g);
        for (int i = s->live_from[g]; i < lo; i++)
            if (t[i] >= 0) {
                pl_kv_blocks_release_tagged(b->kv, t[i], s->conv_key);
                t[i] = -1;
            }
        s->live_from[g] = lo;
    }
}

/* Grow s's tables to cover n_pos positions, a block per group for each.
 * On failure the whole blocks taken here are kept (the caller retries
 * after preempting or gives up: they stay valid table entries either
 * way); a block index some group did not get is undone. */
bool pl_batch_ensure_blocks_(pl_batch *b, pl_batch_seq *s, int n_pos)
{
    slide_(b, s);
    int need = (n_pos + b->block_size - 1) / b->block_size;
    while (s->n_blocks < need) {
        int i = s->n_blocks;
        for (int g = 0; g < b->n_groups; g++) {
            int32_t *t = pl_batch_seq_table_(b, s, g);
            /* A sliding group skips blocks the window is already past. */
            t[i] = i < s->live_from[g] ? -1 : pl_kv_blocks_alloc_in(b->kv, g);
            if (t[i] < 0 && i >= s->live_from[g]) {
                while (--g >= 0) {
                    t = pl_batch_seq_table_(b, s, g);
                    if (t[i] >= 0)
                        pl_kv_blocks_release(b->kv, t[i]);
                }
                return false;
            }
        }
        s->n_blocks++;
    }
    return true;
}

/* The longest prefix of k blocks every group restores: a full group
 * holds blocks [0, k), a sliding one those of its window before the
 * first position computed, [window_first_(k * bs), k). found[g * mb + i]
 * is group g's cached block i or -1. */
static int restorable_(const pl_batch *b, const int32_t *found, int max_hit)
{
    int k = max_hit;
    for (int g = 0; g < b->n_groups; g++) {
        const int32_t *f = found + (size_t)g * (size_t)b->max_blocks;
        if (b->group_window[g] > 0)
            continue;
        int run = 0;
        while (run < k && f[run] >= 0)
            run++;
        k = run;
    }
    for (; k > 0; k--) {
        bool ok = true;
        for (int g = 0; ok && g < b->n_groups; g++) {
            const int32_t *f = found + (size_t)g * (size_t)b->max_blocks;
            for (int i = window_first_(b, b->group_window[g], (long)k * b->block_size);
                 ok && i < k; i++)
                ok = f[i] >= 0;
        }
        if (ok)
            break;
    }
    return k;
}

/* Prefix reuse at admission: s (no blocks) takes the cached blocks of its
 * longest prefix every group can restore, at most max_hit blocks; the
 * blocks of a sliding group before its window stay -1. Returns the
 * blocks of the prefix (s->n_blocks). */
/* Hybrids: the longest prefix of at most k blocks every group restores
 * and a checkpoint (saved in an earlier step) holds the recurrent state
 * of, which s's admission restores; 0 when none. */
static int ck_resume_(pl_batch *b, pl_batch_seq *s, const int32_t *found, const uint64_t *h,
                      int k)
{
    for (; k > 0; k--) {
        int c = pl_kv_ckpt_find(b->cfg.ckpt, h[k], b->n_steps);
        if (c >= 0 && restorable_(b, found, k) == k) {
            pl_kv_ckpt_use(b->cfg.ckpt, c);
            s->ck_load = c;
            return k;
        }
    }
    return 0;
}

int pl_batch_lookup_(pl_batch *b, pl_batch_seq *s, int max_hit)
{
    s->ck_load = -1;
    if (b->n_groups == 1 && b->group_window[0] == 0 && !b->cfg.ckpt) {
        int hit = pl_kv_blocks_lookup(b->kv, s->tokens, s->n_tokens, max_hit, s->blocks,
                                      &s->last_hash);
        s->live_from[0] = 0;
        return s->n_blocks = s->n_committed = hit;
    }
    int32_t *found = b->scratch;
    uint64_t *h = b->scratch_h;
    h[0] = PL_KV_HASH_ROOT;
    for (int i = 0; i < max_hit; i++) {
        const int32_t *ids = s->tokens + (size_t)i * (size_t)b->block_size;
        for (int g = 0; g < b->n_groups; g++)
            found[(size_t)g * (size_t)b->max_blocks + (size_t)i] =
                pl_kv_blocks_find(b->kv, g, h[i], ids);
        h[i + 1] = pl_kv_blocks_hash(h[i], ids, b->block_size);
    }
    int k = restorable_(b, found, max_hit);
    if (b->cfg.ckpt)
        k = ck_resume_(b, s, found, h, k);
    for (int g = 0; g < b->n_groups; g++) {
        int32_t *t = pl_batch_seq_table_(b, s, g);
        int lo = window_first_(b, b->group_window[g], (long)k * b->block_size);
        for (int i = 0; i < k; i++) {
            t[i] = i < lo ? -1 : found[(size_t)g * (size_t)b->max_blocks + (size_t)i];
            if (t[i] >= 0)
                pl_kv_blocks_ref(b->kv, t[i]);
        }
        s->live_from[g] = lo;
    }
    s->last_hash = h[k];
    return s->n_blocks = s->n_committed = k;
}

/* Partial-block reuse after s's full-block hits: a cached block of each
 * group that continues the same chain and starts with s's next ids gives
 * their first k positions, k the fewest any group has (copy on write into
 * a fresh block per group; the copies run before the step being
 * scheduled). The last prompt token is always computed. */
void pl_batch_admit_partial_(pl_batch *b, pl_batch_seq *s)
{
    s->cow_dst = -1;
    pl_batch_step *st = b->cur;
    int max_k = s->n_tokens - 1 - s->num_computed;
    if (!b->cfg.partial_prefix || !st || max_k < 1 ||
        st->n_copies + b->n_groups > b->cfg.max_num_seqs * b->n_groups)
        return;
    int32_t *src = b->scratch;
    int k = max_k;
    for (int g = 0; g < b->n_groups && k > 0; g++) {
        int kg;
        src[g] = pl_kv_blocks_find_partial(b->kv, g, s->last_hash,
                                           s->tokens + s->num_computed, k, &kg);
        k = src[g] >= 0 ? kg : 0;
    }
    if (k < 1)
        return;
    int i = s->n_blocks, n0 = st->n_copies;
    for (int g = 0; g < b->n_groups; g++) {
        /* Hold src while a block is found for the copy, so that it is
         * not the one evicted for it. */
        pl_kv_blocks_ref(b->kv, src[g]);
        int32_t dst = pl_kv_blocks_alloc_in(b->kv, g);
        pl_kv_blocks_release(b->kv, src[g]);
        if (dst < 0) {
            for (int j = n0; j < st->n_copies; j++)
                pl_kv_blocks_release(b->kv, st->copy_dst[j]);
            st->n_copies = n0;
            return;
        }
        st->copy_src[st->n_copies] = src[g];
        st->copy_dst[st->n_copies++] = dst;
        pl_batch_seq_table_(b, s, g)[i] = dst;
    }
    pl_kv_blocks_count_partial(b->kv, k);
    s->n_blocks++;
    s->num_computed += k;
    s->cow_dst = st->copy_dst[n0];
}

/* Hybrids: of the first `run` cached blocks of s, those a hit resumes
 * with (up to the last one a checkpoint ends at); the rest recompute. */
static int ck_run_(const pl_batch *b, const pl_batch_seq *s, int run)
{
    uint64_t h = PL_KV_HASH_ROOT;
    int last = 0;
    for (int i = 0; i < run; i++) {
        h = pl_kv_blocks_hash(h, s->tokens + (size_t)i * (size_t)b->block_size, b->block_size);
        if (pl_kv_ckpt_has(b->cfg.ckpt, h))
            last = i + 1;
    }
    return last;
}

long pl_batch_need_(const pl_batch *b, long n_pos)
{
    return pl_kv_layout_need(b->n_kinds, b->kind_window, b->kind_groups, b->block_size, n_pos);
}

/* The blocks s lacks to hold n_pos positions: each group's need
 * (pl_kv_layout_group_need) less what it holds. A sequence without
 * blocks counts, with `held`, the cached prefix it will share without
 * taking free blocks (in use, or kept for its conversation): a full
 * group's leading run, and as much of it as a sliding group keeps. */
long pl_batch_seq_lacks_(const pl_batch *b, const pl_batch_seq *s, long n_pos, bool held)
{
    int run = 0;
    if (held && s->n_blocks == 0 && !s->prompt_logprobs)
        run = pl_kv_blocks_held_prefix(b->kv, s->tokens, s->n_tokens,
                                       (s->n_tokens - 1) / b->block_size);
    if (run > 0 && b->cfg.ckpt)
        run = ck_run_(b, s, run);
    long lack = 0;
    for (int g = 0; g < b->n_groups; g++) {
        int w = b->group_window[g];
        long need = pl_kv_layout_group_need(w, b->block_size, n_pos);
        long have = s->n_blocks - s->live_from[g];
        if (s->n_blocks == 0)
            have = run < need ? run : need;
        lack += need > have ? need - have : 0;
    }
    return lack;
}

/* Whether s's state at block boundary P is checkpointed (batch.h,
 * pl_batch_config.ckpt_every, the prompt's end and the hinted share
 * point), and as what: the periodic ones are spare (kv_ckpt.h,
 * pl_kv_ckpt_take_spare). The prompt's last block boundary is kept for
 * every request, as llama-server keeps a checkpoint of each prompt: a
 * chat's next turn (prompt, reply, new message) resumes there whether or
 * not anyone sent hints, which an API client over HTTP never does. */
typedef enum { CK_NONE, CK_SPARE, CK_KEPT } ck_want;

static ck_want ck_wanted_(const pl_batch *b, const pl_batch_seq *s, int P)
{
    int bs = b->block_size, every = b->cfg.ckpt_every;
    bool share = P == s->ck_share && pl_kv_blocks_hinted(b->kv, s->conv_key);
    if (P == s->n_prompt / bs * bs || share)
        return CK_KEPT;
    return every > 0 && P / bs % every == 0 ? CK_SPARE : CK_NONE;
}

/* Checkpoints of s's state at the block boundaries its rows of the step
 * being scheduled reach (positions (c0, num_computed]) among the blocks
 * pl_batch_commit_ just committed from block `first` on. */
void pl_batch_ck_saves_(pl_batch *b, pl_batch_seq *s, int first, int c0)
{
    pl_step_input *in = &b->cur->in;
    for (int i = first; i < s->n_committed; i++) {
        int P = (i + 1) * b->block_size;
        ck_want w = P <= c0 || P > s->num_computed ? CK_NONE : ck_wanted_(b, s, P);
        if (w == CK_NONE)
            continue;
        if (in->n_ck_save == in->max_ck_save)
            return;
        int c = (w == CK_SPARE ? pl_kv_ckpt_take_spare : pl_kv_ckpt_take)(
            b->cfg.ckpt, b->commit_h[i + 1], s->conv_key, b->cur->no);
        if (c < 0)
            continue;               /* that prefix has one, or no spare slot */
        in->ck_save_slot[in->n_ck_save] = s->slot;
        in->ck_save_id[in->n_ck_save] = c;
        in->ck_save_pos[in->n_ck_save++] = P;
    }
}

/* Where queued sequences of s's conversation part from s, block-aligned:
 * the end of the prefix they share (a debate round's transcript before
 * each agent's own part). Each one computing through it checkpoints there
 * (ck_wanted_), so the others resume from it. */
void pl_batch_ck_share_(pl_batch *b, pl_batch_seq *s)
{
    pl_batch_seq **q[2] = {b->running, b->waiting};
    int nq[2] = {b->n_running, b->n_waiting};
    s->ck_scanned = true;
    for (int k = 0; k < 2 && s->conv_key; k++)
        for (int i = 0; i < nq[k]; i++) {
            pl_batch_seq *r = q[k][i];
            if (r == s || r->conv_key != s->conv_key)
                continue;
            int n = s->n_tokens < r->n_tokens ? s->n_tokens : r->n_tokens, d = 0;
            while (d < n && s->tokens[d] == r->tokens[d])
                d++;
            int P = d / b->block_size * b->block_size;
            if (P > s->ck_share && P > s->num_computed)
                s->ck_share = P;
            if (P > r->ck_share && P > r->num_computed)
                r->ck_share = P;
        }
}

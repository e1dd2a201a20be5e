/* batch.c - continuous batching: queues, admission with prefix reuse,
 * chunked prefill under a token budget, preemption by recompute. The step
 * filling (rows, block tables) is in batch_step.c. */
#include "schedulers/batch_internal.h"
#include "schedulers/dispatch.h"

#include <stdlib.h>
#include <string.h>

static bool seq_before_(const pl_batch_seq *a, const pl_batch_seq *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    return a->arrival < b->arrival;
}

/* Insert s into q (sorted by priority, then arrival). */
static void queue_insert_(pl_batch_seq **q, int *n, pl_batch_seq *s)
{
    int i = *n;
    while (i > 0 && seq_before_(s, q[i - 1])) {
        q[i] = q[i - 1];
        i--;
    }
    q[i] = s;
    (*n)++;
}

static void queue_remove_(pl_batch_seq **q, int *n, pl_batch_seq *s)
{
    for (int i = 0; i < *n; i++) {
        if (q[i] == s) {
            memmove(q + i, q + i + 1, (size_t)(*n - i - 1) * sizeof *q);
            (*n)--;
            return;
        }
    }
}

static int queue_reserve_(pl_batch_seq ***q, int *cap, int need)
{
    if (need <= *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    pl_batch_seq **nq = realloc(*q, (size_t)nc * sizeof *nq);
    if (!nq)
        return -1;
    *q = nq;
    *cap = nc;
    return 0;
}

/* The cache groups of layout (NULL: one full group); -1 when the pool
 * has fewer. */
static int set_groups_(pl_batch *b, const pl_kv_layout *lo)
{
    b->n_groups = lo ? lo->n_groups : 1;
    b->n_kinds = lo ? lo->n_kinds : 0;
    for (int g = 0; g < b->n_groups; g++)
        b->group_window[g] = lo ? lo->group_window[g] : 0;
    for (int k = 0; k < b->n_kinds; k++) {
        b->kind_window[k] = lo->kind_window[k];
        b->kind_groups[k] = lo->kind_groups[k];
    }
    return b->n_groups <= pl_kv_blocks_num_groups(b->kv) ? 0 : -1;
}

/* The longest sequence (<= max_model_len) whose blocks fit in the pool
 * alone, so that one always runs. */
static int longest_(const pl_batch *b, int num_blocks)
{
    int lo = 0, hi = b->cfg.max_model_len;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (pl_batch_need_(b, mid) <= num_blocks)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

pl_batch *pl_batch_new(const pl_batch_config *cfg, pl_kv_blocks *kv)
{
    if (!kv || cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0 ||
        cfg->max_model_len <= 1)
        return NULL;
    pl_batch *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->cfg = *cfg;
    b->cfg.layout = NULL;
    b->kv = kv;
    b->block_size = pl_kv_blocks_block_size(kv);
    b->max_blocks = (cfg->max_model_len + b->block_size - 1) / b->block_size;
    if (set_groups_(b, cfg->layout) < 0) {
        free(b);
        return NULL;
    }
    b->max_len = longest_(b, pl_kv_blocks_num_blocks(kv));
    b->running = calloc((size_t)cfg->max_num_seqs, sizeof *b->running);
    b->free_slots = malloc((size_t)cfg->max_num_seqs * sizeof *b->free_slots);
    b->scratch = malloc(((size_t)b->n_groups + 1) * (size_t)b->max_blocks * sizeof *b->scratch);
    b->scratch_h = malloc(((size_t)b->max_blocks + 1) * sizeof *b->scratch_h);
    b->commit_h = malloc(((size_t)b->max_blocks + 1) * sizeof *b->commit_h);
    if (!b->running || !b->free_slots || !b->scratch || !b->scratch_h || !b->commit_h ||
        b->max_len < 2) {
        pl_batch_free(b);
        return NULL;
    }
    for (int i = 0; i < cfg->max_num_seqs; i++)
        b->free_slots[i] = cfg->max_num_seqs - 1 - i;
    b->n_free_slots = cfg->max_num_seqs;
    return b;
}

static void seq_release_blocks_(pl_batch *b, pl_batch_seq *s)
{
    pl_batch_release_blocks_(b, s);
}

static void seq_free_(pl_batch_seq *s)
{
    free(s->tokens);
    free(s->blocks);
    free(s->live_from);
    free(s);
}

void pl_batch_free(pl_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_running; i++) {
        seq_release_blocks_(b, b->running[i]);
        seq_free_(b->running[i]);
    }
    for (int i = 0; i < b->n_waiting; i++) {
        seq_release_blocks_(b, b->waiting[i]);
        seq_free_(b->waiting[i]);
    }
    free(b->running);
    free(b->waiting);
    free(b->free_slots);
    free(b->scratch);
    free(b->scratch_h);
    free(b->commit_h);
    free(b);
}

pl_batch_seq *pl_batch_add(pl_batch *b, uint64_t id, const int32_t *prompt,
                           int n, int max_new, int priority,
                           const pl_seq_sampling *sampling, void *ud)
{
    if (n < 1 || n >= b->max_len || max_new < 1 ||
        queue_reserve_(&b->waiting, &b->waiting_cap, b->n_waiting + 1) < 0)
        return NULL;
    if (max_new > b->max_len - n)
        max_new = b->max_len - n;
    pl_batch_seq *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cap = n + max_new;
    s->tokens = malloc((size_t)s->cap * sizeof *s->tokens);
    s->blocks = malloc((size_t)b->n_groups * (size_t)b->max_blocks * sizeof *s->blocks);
    s->live_from = calloc((size_t)b->n_groups, sizeof *s->live_from);
    if (!s->tokens || !s->blocks || !s->live_from) {
        seq_free_(s);
        return NULL;
    }
    memcpy(s->tokens, prompt, (size_t)n * sizeof *prompt);
    s->id = id;
    s->priority = priority;
    s->arrival = ++b->n_arrivals;
    s->n_prompt = s->n_tokens = n;
    s->max_new = max_new;
    s->last_hash = PL_KV_HASH_ROOT;
    s->slot = -1;
    s->n_cached = -1;
    s->cow_dst = -1;
    s->ck_load = -1;
    s->state = PL_SEQ_WAITING;
    if (sampling)
        s->sampling = *sampling;
    s->ud = ud;
    queue_insert_(b->waiting, &b->n_waiting, s);
    return s;
}

pl_batch_seq *pl_batch_find(pl_batch *b, uint64_t id)
{
    for (int i = 0; i < b->n_running; i++)
        if (b->running[i]->id == id)
            return b->running[i];
    for (int i = 0; i < b->n_waiting; i++)
        if (b->waiting[i]->id == id)
            return b->waiting[i];
    return NULL;
}

pl_batch_seq *pl_batch_first(pl_batch *b)
{
    if (b->n_running)
        return b->running[0];
    return b->n_waiting ? b->waiting[0] : NULL;
}

void pl_batch_set_paused(pl_batch *b, pl_batch_seq *s, bool paused)
{
    (void)b;
    s->paused = paused;
}

static void seq_leave_running_(pl_batch *b, pl_batch_seq *s)
{
    queue_remove_(b->running, &b->n_running, s);
    b->free_slots[b->n_free_slots++] = s->slot;
    s->slot = -1;
}

void pl_batch_finish(pl_batch *b, pl_batch_seq *s)
{
    if (s->state == PL_SEQ_FINISHED)
        return;
    if (s->state == PL_SEQ_RUNNING) {
        /* Its partial last block stays for partial reuse: the next
         * round's prompts continue a moderator's reply, whose end sits
         * in that block. */
        if (!s->reply_private)
            pl_batch_keep_tail_(b, s);
        seq_leave_running_(b, s);
    }
    else
        queue_remove_(b->waiting, &b->n_waiting, s);
    if (s->reply_private && s->n_prompt > 0) {
        /* Each goes to the front of eviction: the reply's end goes
         * before its start. */
        pl_batch_release_front_(b, s, (s->n_prompt - 1) / b->block_size);
    }
    seq_release_blocks_(b, s);
    s->state = PL_SEQ_FINISHED;
    s->ud = NULL;
    if (s->n_inflight == 0)
        seq_free_(s);
}

int pl_batch_num_running(const pl_batch *b)
{
    return b->n_running;
}

int pl_batch_num_waiting(const pl_batch *b)
{
    return b->n_waiting;
}

bool pl_batch_has_seqs(const pl_batch *b)
{
    return b->n_running + b->n_waiting > 0;
}

/* The blocks s lacks to hold its prompt and its reply budget, each cache
 * group's real need; a waiting sequence (no blocks yet) less those of
 * its cached prefix that it will share without taking them from the free
 * ones (in use, or kept for its conversation): pl_batch_admit_'s lookup
 * would hit them. */
static long seq_lacks_(const pl_batch *b, const pl_batch_seq *s, int reply_estimate)
{
    int gen = s->n_tokens - s->n_prompt + s->num_placeholders;
    int budget = pl_dispatch_reply_budget(s->max_new, reply_estimate);
    if (budget <= gen)
        budget = gen < s->max_new ? gen + 1 : gen;
    return pl_batch_seq_lacks_(b, s, (long)s->n_prompt + budget, true);
}

void pl_batch_kv_account(const pl_batch *b, int reply_estimate, pl_batch_kv_acct *out)
{
    long res = 0;
    out->generated = 0;
    for (int i = 0; i < b->n_running; i++) {
        const pl_batch_seq *s = b->running[i];
        res += seq_lacks_(b, s, reply_estimate);
        out->generated += s->n_tokens - s->n_prompt + s->num_placeholders;
    }
    for (int i = 0; i < b->n_waiting; i++)
        res += seq_lacks_(b, b->waiting[i], reply_estimate);
    out->reserved = res > 1 << 30 ? 1 << 30 : (int)res;
    out->running = b->n_running;
}

bool pl_batch_append(pl_batch *b, pl_batch_seq *s, int32_t token)
{
    if (s->num_placeholders > 0)
        s->num_placeholders--;
    if (s->state == PL_SEQ_FINISHED || s->n_tokens >= s->cap)
        return false;
    s->tokens[s->n_tokens++] = token;
    if (s->state == PL_SEQ_RUNNING)
        pl_batch_commit_(b, s);
    return true;
}

/* Preemption by recompute: s drops its blocks and slot, forgets what was
 * computed, and waits again at its (priority, arrival) place. Placeholders
 * in flight stay: their tokens are appended when their steps complete, and
 * s is not readmitted before that. */
void pl_batch_preempt_(pl_batch *b, pl_batch_seq *s)
{
    seq_leave_running_(b, s);
    seq_release_blocks_(b, s);
    s->num_computed = 0;
    s->state = PL_SEQ_WAITING;
    s->n_preempted++;
    queue_insert_(b->waiting, &b->n_waiting, s);
}

/* Admit waiting s into running: reuse its cached prefix (at most n-1
 * tokens, so the last is computed), take a slot. */
void pl_batch_admit_(pl_batch *b, pl_batch_seq *s)
{
    int max_hit = s->prompt_logprobs ? 0 : (s->n_tokens - 1) / b->block_size;
    int hit = pl_batch_lookup_(b, s, max_hit);
    s->num_computed = hit * b->block_size;
    if (!s->prompt_logprobs && !b->cfg.ckpt) /* its prompt rows must all run */
        pl_batch_admit_partial_(b, s);
    pl_kv_blocks_count(b->kv, s->n_tokens, s->num_computed);
    if (s->n_cached < 0)
        s->n_cached = s->num_computed;
    s->n_deferred = 0;
    queue_remove_(b->waiting, &b->n_waiting, s);
    s->slot = b->free_slots[--b->n_free_slots];
    s->state = PL_SEQ_RUNNING;
    b->running[b->n_running++] = s;
}

/* Undo an admission that found no blocks for its first chunk. */
void pl_batch_unadmit_(pl_batch *b, pl_batch_seq *s)
{
    /* Its copies (one per group) were the step's last: nothing needs them
     * now. */
    pl_batch_step *st = b->cur;
    int n = b->n_groups;
    if (s->cow_dst >= 0 && st && st->n_copies >= n && st->copy_dst[st->n_copies - n] == s->cow_dst)
        st->n_copies -= n;
    s->cow_dst = -1;
    s->ck_load = -1;              /* its checkpoint is not restored */
    seq_leave_running_(b, s);
    seq_release_blocks_(b, s);
    s->num_computed = 0;
    s->state = PL_SEQ_WAITING;
    queue_insert_(b->waiting, &b->n_waiting, s);
}

/* Keep running sorted by (priority, arrival): insertion sort, nearly
 * sorted already. */
void pl_batch_sort_running_(pl_batch *b)
{
    for (int i = 1; i < b->n_running; i++) {
        pl_batch_seq *s = b->running[i];
        int j = i;
        while (j > 0 && seq_before_(s, b->running[j - 1])) {
            b->running[j] = b->running[j - 1];
            j--;
        }
        b->running[j] = s;
    }
}

void pl_batch_step_retire(pl_batch *b, pl_batch_step *st)
{
    (void)b;
    for (int i = 0; i < st->in.n_seqs; i++) {
        pl_batch_seq *s = st->seqs[i];
        if (--s->n_inflight == 0 && s->state == PL_SEQ_FINISHED)
            seq_free_(s);
    }
    st->in.n_seqs = 0;
    st->in.n_rows = 0;
}

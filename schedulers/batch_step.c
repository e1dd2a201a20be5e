/* batch_step.c - one scheduling pass: running decodes, then running
 * prefill chunks, then admissions, written into a step's runner input. */
#include "schedulers/batch_internal.h"

#include <stdlib.h>
#include <string.h>

int pl_batch_step_init(pl_batch_step *st, const pl_batch_config *cfg,
                       int block_size)
{
    memset(st, 0, sizeof *st);
    size_t rows = (size_t)cfg->max_num_batched_tokens;
    size_t seqs = (size_t)cfg->max_num_seqs;
    int mb = (cfg->max_model_len + block_size - 1) / block_size;
    size_t groups = cfg->layout ? (size_t)cfg->layout->n_groups : 1;
    pl_step_input *in = &st->in;
    in->max_blocks_per_seq = mb;
    in->n_groups = (int)groups;
    in->tokens = malloc(rows * sizeof *in->tokens);
    in->positions = malloc(rows * sizeof *in->positions);
    in->row_seq = malloc(rows * sizeof *in->row_seq);
    in->row_next = malloc(rows * sizeof *in->row_next);
    in->seq_slot = malloc(seqs * sizeof *in->seq_slot);
    in->seq_first_row = malloc(seqs * sizeof *in->seq_first_row);
    in->seq_n_rows = malloc(seqs * sizeof *in->seq_n_rows);
    in->seq_ctx_len = malloc(seqs * sizeof *in->seq_ctx_len);
    in->seq_sample = malloc(seqs * sizeof *in->seq_sample);
    in->block_table = malloc(seqs * groups * (size_t)mb * sizeof *in->block_table);
    in->sampling = malloc(seqs * sizeof *in->sampling);
    in->seq_hist = malloc(seqs * sizeof *in->seq_hist);
    in->seq_hist_len = malloc(seqs * sizeof *in->seq_hist_len);
    in->max_ck_save = (int)(rows / (size_t)block_size + seqs);
    size_t nsv = (size_t)in->max_ck_save;
    in->ck_load_slot = malloc(seqs * sizeof(int32_t));
    in->ck_load_id = malloc(seqs * sizeof(int32_t));
    in->ck_load_pos = malloc(seqs * sizeof(int32_t));
    in->ck_save_slot = malloc(nsv * sizeof(int32_t));
    in->ck_save_id = malloc(nsv * sizeof(int32_t));
    in->ck_save_pos = malloc(nsv * sizeof(int32_t));
    if (!in->ck_load_slot || !in->ck_load_id || !in->ck_load_pos || !in->ck_save_slot ||
        !in->ck_save_id || !in->ck_save_pos)
        return -1;
    st->seqs = malloc(seqs * sizeof *st->seqs);
    st->copy_src = malloc(seqs * groups * sizeof *st->copy_src);
    st->copy_dst = malloc(seqs * groups * sizeof *st->copy_dst);
    if (!st->copy_src || !st->copy_dst || !in->tokens || !in->positions || !in->row_seq || !in->row_next ||
        !in->seq_slot ||
        !in->seq_first_row || !in->seq_n_rows || !in->seq_ctx_len ||
        !in->seq_sample || !in->block_table || !in->sampling ||
        !in->seq_hist || !in->seq_hist_len || !st->seqs)
        return -1;
    return 0;
}

void pl_batch_step_free(pl_batch_step *st)
{
    pl_step_input *in = &st->in;
    free(in->tokens);
    free(in->positions);
    free(in->row_seq);
    free(in->row_next);
    free(in->seq_slot);
    free(in->seq_first_row);
    free(in->seq_n_rows);
    free(in->seq_ctx_len);
    free(in->seq_sample);
    free(in->block_table);
    free(in->sampling);
    free(in->seq_hist);
    free(in->seq_hist_len);
    free(in->ck_load_slot);
    free(in->ck_load_id);
    free(in->ck_load_pos);
    free(in->ck_save_slot);
    free(in->ck_save_id);
    free(in->ck_save_pos);
    free(st->seqs);
    free(st->copy_src);
    free(st->copy_dst);
    memset(st, 0, sizeof *st);
}

/* Rows s could run now, ignoring the budget: the known ids not yet fed,
 * else one decode row on the placeholder, else 0. */
static int rows_wanted_(const pl_batch *b, const pl_batch_seq *s)
{
    int known_left = s->n_tokens - s->num_computed;
    if (known_left > 0)
        return known_left;
    int gen = s->n_tokens - s->n_prompt + s->num_placeholders;
    if (s->num_placeholders > 0 && gen < s->max_new &&
        s->n_tokens + s->num_placeholders < b->cfg.max_model_len)
        return 1;
    return 0;
}

static void fill_rows_(pl_batch_step *st, pl_batch_seq *s, int k, int n)
{
    pl_step_input *in = &st->in;
    for (int j = 0; j < n; j++) {
        int pos = s->num_computed + j;
        int r = in->n_rows++;
        in->tokens[r] = pos < s->n_tokens ? s->tokens[pos] : PL_TOKEN_PLACEHOLDER;
        in->positions[r] = pos;
        in->row_seq[r] = k;
        in->row_next[r] = s->prompt_logprobs && pos + 1 < s->n_prompt ? s->tokens[pos + 1] : -1;
        in->n_row_next += in->row_next[r] >= 0;
    }
}

/* Append n rows of s (blocks already reserved) to the step. */
static void fill_seq_(pl_batch *b, pl_batch_step *st, pl_batch_seq *s, int n)
{
    pl_step_input *in = &st->in;
    int k = in->n_seqs++, c0 = s->num_computed;
    bool decode = s->n_tokens - s->num_computed <= 1;
    st->seqs[k] = s;
    in->seq_slot[k] = s->slot;
    in->seq_first_row[k] = in->n_rows;
    in->seq_n_rows[k] = n;
    fill_rows_(st, s, k, n);
    s->num_computed += n;
    bool sample = s->num_computed == s->n_tokens + s->num_placeholders;
    in->seq_ctx_len[k] = s->num_computed;
    in->seq_sample[k] = sample;
    size_t mb = (size_t)in->max_blocks_per_seq;
    for (int g = 0; g < b->n_groups; g++) {
        int32_t *bt = in->block_table + ((size_t)k * (size_t)b->n_groups + (size_t)g) * mb;
        memcpy(bt, pl_batch_seq_table_(b, s, g), (size_t)s->n_blocks * sizeof *bt);
        for (size_t i = (size_t)s->n_blocks; i < mb; i++)
            bt[i] = -1;
    }
    int gen = s->n_tokens - s->n_prompt;
    in->sampling[k] = s->sampling;
    in->sampling[k].step = (uint64_t)(gen + s->num_placeholders);
    in->seq_hist[k] = s->tokens + s->n_prompt;
    in->seq_hist_len[k] = gen;
    if (sample)
        s->num_placeholders++;
    s->n_inflight++;
    s->last_step = st->no;
    if (decode)
        st->n_decode_rows += n;
    else
        st->n_prefill_rows += n;
    if (s->ck_load >= 0) {     /* its admission resumes from a checkpoint */
        in->ck_load_slot[in->n_ck_load] = s->slot;
        in->ck_load_id[in->n_ck_load] = s->ck_load;
        in->ck_load_pos[in->n_ck_load++] = c0;
        s->ck_load = -1;
    }
    int first = s->n_committed;
    pl_batch_commit_(b, s);
    if (b->cfg.ckpt)
        pl_batch_ck_saves_(b, s, first, c0);
}

/* Lowest-priority running sequence not scheduled in this step: the
 * running queue is sorted, so scan from its tail. */
static pl_batch_seq *victim_(pl_batch *b, const pl_batch_step *st)
{
    for (int i = b->n_running - 1; i >= 0; i--)
        if (b->running[i]->last_step != st->no)
            return b->running[i];
    return NULL;
}

/* The most rows of s, at most n, whose blocks it gets now: n, or fewer
 * when a chunk of n rows needs more blocks than are left. On a grouped
 * model a sliding group holds the window before a chunk and the chunk's
 * own positions together, so one long prefill chunk can need more blocks
 * than the whole cache has (and far more than the sequence keeps once
 * the chunk is computed): asked whole, it would never be scheduled.
 * 0 when not even one row gets its blocks. */
static int fit_rows_(pl_batch *b, pl_batch_seq *s, int n)
{
    while (!pl_batch_ensure_blocks_(b, s, s->num_computed + n)) {
        if (n == 1)
            return 0;
        n /= 2;
    }
    return n;
}

/* Blocks for n more positions of s, preempting lower-priority sequences
 * as needed; when none is left to preempt, a prefill chunk shrinks to
 * what fits (fit_rows_) before s gives way itself. Returns the rows s
 * got blocks for, 0 when s itself was the victim. */
static int reserve_(pl_batch *b, pl_batch_step *st, pl_batch_seq *s, int n)
{
    while (!pl_batch_ensure_blocks_(b, s, s->num_computed + n)) {
        pl_batch_seq *v = victim_(b, st);
        bool last = !v || v == s;
        int k = last && n > 1 ? fit_rows_(b, s, n / 2) : 0;
        if (k > 0)
            return k;
        pl_batch_preempt_(b, v ? v : s);
        st->n_preempted++;
        if (last)
            return 0;
    }
    return n;
}

static int index_of_(const pl_batch *b, const pl_batch_seq *s)
{
    for (int i = 0; i < b->n_running; i++)
        if (b->running[i] == s)
            return i;
    return -1;
}

/* One pass over the running queue: decodes (decode_pass) or prefill
 * chunks. Preemption may reorder the queue, so positions are re-found. */
static void schedule_running_(pl_batch *b, pl_batch_step *st, bool decode_pass)
{
    for (int i = 0; i < b->n_running; i++) {
        int budget = b->cfg.max_num_batched_tokens - st->in.n_rows;
        pl_batch_seq *s = b->running[i];
        if (budget <= 0)
            return;
        if (s->paused || s->last_step == st->no)
            continue;
        int want = rows_wanted_(b, s);
        bool decode = s->n_tokens - s->num_computed <= 1;
        if (want == 0 || decode != decode_pass)
            continue;
        int before = st->n_preempted;
        int n = reserve_(b, st, s, want < budget ? want : budget);
        bool ok = n > 0;
        if (ok)
            fill_seq_(b, st, s, n);
        if (st->n_preempted != before)
            i = ok ? index_of_(b, s) : i - 1;
    }
}

/* Leading ids s and r share, at most n. */
static int common_prefix_(const pl_batch_seq *s, const pl_batch_seq *r, int n)
{
    int i = 0;
    while (i < n && s->tokens[i] == r->tokens[i])
        i++;
    return i;
}

/* Prompt positions of s that r, scheduled in this step from position
 * `start` to `end`, computes for both of them and that s could read from
 * the cache next step but not now: full blocks r commits in this step are
 * readable at once (same-step reads), the ids of the block where the two
 * part (partial reuse) or r's blocks of later chunks only afterwards. */
static int share_gain_(const pl_batch *b, const pl_batch_seq *s,
                       const pl_batch_seq *r, int start, int end)
{
    int bs = b->block_size;
    int n = s->n_tokens - 1 < r->n_tokens ? s->n_tokens - 1 : r->n_tokens;
    if (n <= start || s->tokens[start] != r->tokens[start])
        return 0;
    int shared = common_prefix_(s, r, n);
    if (shared <= start)
        return 0;
    if (b->cfg.ckpt)            /* a hybrid reads no state of this step */
        return shared - start;
    int done = end < r->n_tokens ? end : r->n_tokens;
    int upto = shared < done ? shared : done;
    int now = upto / bs * bs;
    if (shared > done)          /* r computes the rest in later chunks */
        return shared - now;
    bool full = (shared / bs + 1) * bs <= done;
    return b->cfg.partial_prefix && full ? shared - now : 0;
}

/* Whether waiting s should wait a step for what a sequence already in
 * this step computes (pl_batch_config.defer_steps). */
static bool defer_for_share_(const pl_batch *b, const pl_batch_step *st,
                             const pl_batch_seq *s)
{
    if (s->n_deferred >= b->cfg.defer_steps || s->prompt_logprobs)
        return false;
    const pl_step_input *in = &st->in;
    for (int k = 0; k < in->n_seqs; k++) {
        const pl_batch_seq *r = st->seqs[k];
        int end = in->seq_ctx_len[k];
        int start = end - in->seq_n_rows[k];
        if (!r->prompt_logprobs && share_gain_(b, s, r, start, end) > 0)
            return true;
    }
    return false;
}

/* Blocks the running sequences still prefilling lack for the prompt ids
 * not scheduled yet: theirs before any admission counts on them. (A
 * decode's next block is growth, which preemption answers, as before.) */
static long running_lack_(const pl_batch *b)
{
    long n = 0;
    for (int i = 0; i < b->n_running; i++) {
        const pl_batch_seq *s = b->running[i];
        if (s->n_tokens - s->num_computed <= 1)
            continue;
        n += pl_batch_seq_lacks_(b, s, s->n_tokens, false);
    }
    return n;
}

/* Whether waiting s, a prompt longer than one step's budget (prefilled in
 * chunks over several steps), fits whole in the blocks an allocation can
 * get now beyond those the running prefills still need. Admitting it on
 * its first chunk alone let a burst of long prompts in, then preempted
 * them when a later chunk found no block and threw their partial
 * prefills away. A prompt one step can take is allocated whole when it
 * is scheduled whole, as before. With nothing running s goes
 * (pl_batch_add keeps a prompt within the cache). */
static bool prompt_fits_(const pl_batch *b, const pl_batch_seq *s)
{
    if (b->n_running == 0 || s->n_tokens <= b->cfg.max_num_batched_tokens)
        return true;
    long need = pl_batch_seq_lacks_(b, s, s->n_tokens, true);
    return need <= pl_kv_blocks_num_available(b->kv) - running_lack_(b);
}

/* Admit waiting sequences in order while seats, budget and blocks last.
 * The first one whose prompt does not fit, or that does not get its
 * blocks, stops admission, so nothing younger overtakes it. One deferred for a shared prefix is passed over
 * this step (at most defer_steps times). */
static void schedule_waiting_(pl_batch *b, pl_batch_step *st)
{
    int i = 0;
    while (i < b->n_waiting) {
        pl_batch_seq *s = b->waiting[i];
        int budget = b->cfg.max_num_batched_tokens - st->in.n_rows;
        if (s->paused || s->num_placeholders > 0) {
            i++;
            continue;
        }
        if (b->n_running >= b->cfg.max_num_seqs || budget <= 0)
            return;
        if (defer_for_share_(b, st, s)) {
            s->n_deferred++;
            st->n_deferred++;
            i++;
            continue;
        }
        if (!prompt_fits_(b, s))
            return;
        pl_batch_admit_(b, s);
        int left = s->n_tokens - s->num_computed;
        int n = left < budget ? left : budget;
        /* Alone, s takes the chunk that fits (fit_rows_): nothing would
         * ever free more blocks for it. */
        if (b->n_running == 1)
            n = fit_rows_(b, s, n);
        else if (!pl_batch_ensure_blocks_(b, s, s->num_computed + n))
            n = 0;
        if (n == 0) {
            pl_batch_unadmit_(b, s);
            return;
        }
        fill_seq_(b, st, s, n);
    }
}

int pl_batch_schedule(pl_batch *b, pl_batch_step *st)
{
    st->no = ++b->n_steps;
    b->cur = st;
    st->n_copies = 0;
    pl_kv_blocks_set_tick(b->kv, st->no);
    st->in.n_rows = 0;
    st->in.n_seqs = 0;
    st->in.n_row_next = 0;
    st->in.n_ck_load = st->in.n_ck_save = 0;
    st->n_decode_rows = st->n_prefill_rows = st->n_preempted = 0;
    st->n_deferred = 0;
    pl_batch_sort_running_(b);
    for (int i = 0; b->cfg.ckpt && i < b->n_waiting; i++)
        if (!b->waiting[i]->ck_scanned)
            pl_batch_ck_share_(b, b->waiting[i]);
    schedule_running_(b, st, true);
    schedule_running_(b, st, false);
    schedule_waiting_(b, st);
    b->cur = NULL;
    return st->in.n_rows;
}

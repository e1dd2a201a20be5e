/* test_req_metrics.c - the request metrics every backend gets through
 * pl_backend_submit/pl_backend_abort: histograms, counters, trackers (abort,
 * a done inside submit, a refused submit, an abort from a callback). A fake
 * backend hands the wrapped sinks to the test, which plays the backend. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/req_metrics.h"

#define MAXR 6000

typedef struct fake {
    pl_backend base;
    pl_sink sinks[MAXR];
    bool live[MAXR];
    int n, aborted_calls;
    bool refuse, done_in_submit;
} fake;

static int fake_submit(pl_backend *b, const pl_gen_request *r, pl_sink s, uint64_t *id,
                       pl_err *e)
{
    fake *f = (fake *)b;
    if (f->refuse)
        return pl_err_set(e, 400, NULL, NULL, NULL, "refused");
    *id = (uint64_t)f->n + 1000;
    f->sinks[f->n] = s;
    f->live[f->n] = true;
    f->n++;
    if (f->done_in_submit) {
        f->live[f->n - 1] = false;
        pl_result res = {.finish = PL_FINISH_STOP, .prompt_tokens = 2, .completion_tokens = 1};
        s.on_done(s.ud, &res);
    }
    return 0;
}

static void fake_abort(pl_backend *b, uint64_t id)
{
    fake *f = (fake *)b;
    f->aborted_calls++;
    if (id >= 1000 && id < 1000 + (uint64_t)f->n)
        f->live[id - 1000] = false;
}

static int fake_len(pl_backend *b) { return 2048; }
static void fake_free(pl_backend *b) { free(b); }

static const pl_backend_ops fake_ops = {.kind = "fake", .submit = fake_submit,
                                        .abort = fake_abort, .max_model_len = fake_len,
                                        .free = fake_free};

typedef struct caller {
    int deltas, dones;
    pl_finish finish;
    pl_backend *abort_on_delta;  /* abort this request from its first delta */
    uint64_t id;
} caller;

static void c_delta(void *ud, const pl_delta *d)
{
    caller *c = ud;
    c->deltas++;
    if (c->abort_on_delta)
        pl_backend_abort(c->abort_on_delta, c->id);
}

static void c_done(void *ud, const pl_result *r)
{
    caller *c = ud;
    c->dones++;
    c->finish = r->finish;
}

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    return f;
}

static uint64_t submit(fake *f, caller *c)
{
    pl_chat_message m = {"user", "hi"};
    pl_gen_request r = {.messages = &m, .n_messages = 1};
    pl_sampling_defaults(&r.sampling);
    uint64_t id = 0;
    pl_err e;
    cr_assert_eq(pl_backend_submit(&f->base, &r, (pl_sink){c_delta, c_done, c}, &id, &e), 0);
    c->id = id;
    return id;
}

static void delta(fake *f, int i, int n_tokens)
{
    int32_t toks[8] = {0};
    pl_delta d = {.text = "x", .len = 1, .tokens = toks, .n_tokens = n_tokens};
    f->sinks[i].on_delta(f->sinks[i].ud, &d);
}

static void done(fake *f, int i, pl_finish fin, int prompt, int completion)
{
    pl_result r = {.finish = fin, .prompt_tokens = prompt, .completion_tokens = completion,
                   .queue_ms = 2.0};
    f->live[i] = false;
    f->sinks[i].on_done(f->sinks[i].ud, &r);
}

Test(req_metrics, histogram_bounds_are_vllms_and_le_inclusive)
{
    pl_hist h;
    pl_hist_init(&h, PL_HIST_TTFT);
    cr_assert_eq(h.n, 22);
    cr_assert_float_eq(h.bounds[0], 0.001, 1e-12);
    cr_assert_float_eq(h.bounds[21], 2560.0, 1e-9);
    pl_hist_observe_n(&h, 0.001, 1);       /* on a bound: that bucket (le) */
    pl_hist_observe_n(&h, 0.0011, 2);
    pl_hist_observe_n(&h, 1e9, 1);         /* +Inf */
    cr_assert_eq(h.counts[0], 1);
    cr_assert_eq(h.counts[1], 2);
    cr_assert_eq(h.counts[22], 1);
    cr_assert_eq(h.count, 4);
    cr_assert_float_eq(h.sum, 0.001 + 0.0022 + 1e9, 1e-6);
    pl_hist_init(&h, PL_HIST_ITL);
    cr_assert_eq(h.n, 19);
    pl_hist_init(&h, PL_HIST_LATENCY);
    cr_assert_eq(h.n, 21);
    cr_assert_float_eq(h.bounds[20], 7680.0, 1e-9);
    pl_hist_init_125(&h, 2048);
    double want[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};
    cr_assert_eq(h.n, 11);
    for (int i = 0; i < 11; i++)
        cr_assert_float_eq(h.bounds[i], want[i], 1e-9);
}

Test(req_metrics, tokens_latencies_and_finish_reasons)
{
    fake *f = fake_new();
    caller a = {0}, b = {0};
    submit(f, &a);
    submit(f, &b);
    pl_req_metrics *m = f->base.metrics;
    cr_assert_eq(m->live, 2);
    delta(f, 0, 3);                        /* first token(s): one TTFT */
    delta(f, 0, 2);                        /* two more: two ITL observations */
    done(f, 0, PL_FINISH_LENGTH, 7, 5);
    /* b's deltas carry no token ids: the result's count is taken */
    delta(f, 1, 0);
    done(f, 1, PL_FINISH_STOP, 4, 6);
    cr_assert_eq(m->live, 0);
    cr_assert_eq(m->submitted, 2);
    cr_assert_eq(m->prompt_tokens, 11);
    cr_assert_eq(m->generation_tokens, 11);
    cr_assert_eq(m->finished[PL_FINISH_LENGTH], 1);
    cr_assert_eq(m->finished[PL_FINISH_STOP], 1);
    cr_assert_eq(m->ttft.count, 2);
    cr_assert_eq(m->itl.count, 2);
    cr_assert_eq(m->e2e.count, 2);
    cr_assert_eq(m->queue.count, 2);
    cr_assert_float_eq(m->queue.sum, 0.004, 1e-12);
    cr_assert_eq(m->prompt_len.count, 2);
    cr_assert_eq(m->gen_len.count, 2);
    cr_assert_eq(a.deltas, 2);
    cr_assert_eq(a.finish, PL_FINISH_LENGTH);
    cr_assert_eq(b.dones, 1);
    pl_backend_free(&f->base);
}

Test(req_metrics, caller_abort_counts_once_and_reaches_the_backend)
{
    fake *f = fake_new();
    caller a = {0}, b = {0};
    uint64_t ida = submit(f, &a);
    submit(f, &b);
    pl_backend_abort(&f->base, ida);
    pl_backend_abort(&f->base, ida);       /* again: forwarded, not counted */
    pl_backend_abort(&f->base, 99999);     /* unknown */
    pl_req_metrics *m = f->base.metrics;
    cr_assert_eq(m->finished[PL_FINISH_ABORT], 1);
    cr_assert_eq(m->live, 1);
    cr_assert_eq(f->aborted_calls, 3);
    cr_assert_eq(a.dones, 0, "the sink is never called after an abort");
    done(f, 1, PL_FINISH_STOP, 1, 1);
    cr_assert_eq(m->live, 0);
    pl_backend_free(&f->base);
}

Test(req_metrics, done_inside_submit_and_refused_submit)
{
    fake *f = fake_new();
    caller a = {0};
    f->done_in_submit = true;
    for (int i = 0; i < 3; i++)
        submit(f, &a);
    pl_req_metrics *m = f->base.metrics;
    cr_assert_eq(a.dones, 3);
    cr_assert_eq(m->live, 0);
    cr_assert_eq(m->finished[PL_FINISH_STOP], 3);
    f->done_in_submit = false;
    f->refuse = true;
    pl_chat_message msg = {"user", "hi"};
    pl_gen_request r = {.messages = &msg, .n_messages = 1};
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(&f->base, &r, (pl_sink){c_delta, c_done, &a}, &id, &e), -1);
    cr_assert_str_eq(e.message, "refused");
    cr_assert_eq(m->rejected, 1);
    cr_assert_eq(m->live, 0);
    cr_assert_eq(m->submitted, 3);
    pl_backend_free(&f->base);             /* ASan: every tracker freed */
}

Test(req_metrics, abort_from_the_callback_and_many_live)
{
    fake *f = fake_new();
    caller *c = calloc(MAXR, sizeof *c);
    for (int i = 0; i < 5000; i++)
        submit(f, &c[i]);
    pl_req_metrics *m = f->base.metrics;
    cr_assert_eq(m->live, 5000);
    c[7].abort_on_delta = &f->base;
    delta(f, 7, 1);                        /* aborts itself inside on_delta */
    cr_assert_eq(m->finished[PL_FINISH_ABORT], 1);
    /* abort the odd ones in a scattered order, finish the even ones */
    for (int k = 0; k < 2500; k++) {
        int i = 2 * ((k * 7919) % 2500) + 1;     /* a permutation of the odd ones */
        if (i != 7)
            pl_backend_abort(&f->base, c[i].id);
    }
    for (int i = 0; i < 5000; i += 2)
        done(f, i, PL_FINISH_STOP, 1, 1);
    cr_assert_eq(m->finished[PL_FINISH_STOP], 2500);
    cr_assert_eq(m->finished[PL_FINISH_ABORT], 2500);
    cr_assert_eq(m->live, 0);
    /* trackers are recycled: 5000 more requests allocate nothing new */
    pl_req_track *fl = m->free_list;
    cr_assert_not_null(fl);
    free(c);
    pl_backend_free(&f->base);
}

/* backend_sink.c - the recording sink and loop runner (backend_sink.h). */
#include "tests/helpers/backend_sink.h"

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

static void got_delta(void *ud, const pl_delta *d)
{
    pl_test_got *g = ud;
    cr_assert_lt(g->len + d->len, sizeof g->text);
    memcpy(g->text + g->len, d->text, d->len);
    g->len += d->len;
    g->text[g->len] = '\0';
    g->deltas++;
    g->n_lp += d->logprobs ? d->n_tokens : 0;
}

static void got_result(void *ud, const pl_result *r)
{
    pl_test_got *g = ud;
    cr_assert_eq(g->done, 0, "on_done called twice");
    g->done++;
    g->res = *r;
    if (r->error)
        g->err = *r->error;
    g->res.error = r->error ? &g->err : NULL;
}

pl_sink pl_test_got_sink(pl_test_got *g)
{
    return (pl_sink){got_delta, got_result, g};
}

int pl_test_got_done(void *g)
{
    return ((pl_test_got *)g)->done;
}

double pl_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

json_t *pl_test_replica_stat(pl_backend *b, int i, const char *key)
{
    json_t *s = b->ops->stats(b);
    json_t *v = json_deep_copy(json_object_get(
        json_array_get(json_object_get(s, "replicas"), (size_t)i), key));
    json_decref(s);
    return v;
}

void pl_test_run_until(struct event_base *base, int (*cond)(void *), void *arg, int ms)
{
    double end = pl_test_now_ms() + ms;
    while (!cond(arg) && pl_test_now_ms() < end) {
        struct timeval tv = {0, 20000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
}

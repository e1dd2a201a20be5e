/* dispatch_kv.c - what a request needs of a backend's KV cache, the
 * figure dispatch admits by (dispatch.h, pl_dispatch_kv), and the running
 * estimate of reply lengths the figure uses when max_tokens is large. The
 * engine counts its requests with the same functions, so the view it
 * reports and the need dispatch compares with it agree. */
#include "schedulers/dispatch.h"

#include <math.h>

int pl_dispatch_reply_budget(int max_tokens, int reply_estimate)
{
    if (max_tokens > 0 && (reply_estimate <= 0 || max_tokens <= reply_estimate))
        return max_tokens;
    return reply_estimate > 0 ? reply_estimate : PL_DISPATCH_REPLY_PRIOR;
}

int pl_dispatch_kv_need(const pl_dispatch_kv *kv, int prompt_tokens, int max_tokens)
{
    if (kv->block_size < 1)
        return 1;
    long p = prompt_tokens > 0 ? prompt_tokens : kv->prompt_tokens > 0 ? kv->prompt_tokens : 0;
    long t = p + pl_dispatch_reply_budget(max_tokens, kv->reply_tokens);
    long b = pl_kv_layout_need(kv->n_kinds, kv->kind_window, kv->kind_groups, kv->block_size, t);
    return b < 1 ? 1 : b > 1 << 30 ? 1 << 30 : (int)b;
}

int pl_dispatch_kv_bound(const pl_dispatch_kv *kv, int in_flight, int need, int upper)
{
    long room = (long)kv->free - kv->reserved;
    long c = (long)in_flight + (need >= 1 && room >= need ? room / need : 0);
    return c < 1 ? 1 : c > upper ? upper : (int)c;
}

/* Weight of a new observation: a plain mean over the first 64, then an
 * exponential window of about 64 (replies drift as a job's rounds go on). */
#define EST_WINDOW 64

void pl_dispatch_est_observe(pl_dispatch_est *e, double v)
{
    if (!(v >= 0))
        return;
    e->n++;
    double a = e->n < EST_WINDOW ? 1.0 / (double)e->n : 1.0 / EST_WINDOW;
    double dv = v - e->mean;
    e->mean += a * dv;
    e->var = (1 - a) * (e->var + a * dv * dv);
}

int pl_dispatch_est_value(const pl_dispatch_est *e)
{
    if (e->n == 0)
        return 0;
    double v = ceil(e->mean + 2 * sqrt(e->var > 0 ? e->var : 0));
    return v < 1 ? 1 : v > 1e9 ? 1000000000 : (int)v;
}

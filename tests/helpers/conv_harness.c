/* conv_harness.c - see conv_harness.h. */
#include "tests/helpers/conv_harness.h"

#include <string.h>

static void record(void *ud, pl_conv_req *r)
{
    conv_harness *h = ud;
    h->last = r;
}

pl_convs *conv_harness_new(conv_harness *h, pl_convs_config *cfg)
{
    memset(h, 0, sizeof *h);
    h->n_models = cfg->n_models > 0 && cfg->n_models <= CONV_HARNESS_MODELS ? cfg->n_models : 1;
    h->policy = cfg->policy;
    for (int m = 0; m < h->n_models; m++)
        h->d[m] = pl_dispatch_new(&(pl_dispatch_opts){.capacity = 1, .reserve = 0});
    cfg->dispatch = h->d;
    cfg->submit = record;
    cfg->ud = h;
    h->c = pl_convs_new(cfg);
    return h->c;
}

void conv_harness_free(conv_harness *h)
{
    pl_convs_free(h->c);
    for (int m = 0; m < h->n_models; m++)
        pl_dispatch_free(h->d[m]);
    memset(h, 0, sizeof *h);
}

void conv_harness_capacity(conv_harness *h, int model, int capacity)
{
    pl_dispatch_set_capacity(h->d[model], capacity);
}

pl_conv_req *conv_harness_dispatch(conv_harness *h)
{
    int best = -1;
    pl_dispatch_req *b = NULL;
    for (int m = 0; m < h->n_models; m++) {
        pl_dispatch_req *r = pl_dispatch_peek(h->d[m]);
        if (r && (!b || pl_dispatch_less(h->policy, r, b))) {
            b = r;
            best = m;
        }
    }
    if (best < 0)
        return NULL;
    h->last = NULL;
    pl_dispatch_step(h->d[best]);
    return h->last;
}

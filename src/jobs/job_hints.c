/* job_hints.c - retention hints (DESIGN.md, "Conversation-aware KV"): after
 * each completion the job's conversations say how soon each
 * conversation needs its cache again, and each backend that keeps a cache
 * (ops->retain) hears what changed since it last heard. */
#include <limits.h>
#include <stdlib.h>

#include "src/jobs/jobs_internal.h"

uint64_t job_conv_key(const pl_job *j, int q)
{
    return ((uint64_t)(uintptr_t)j << 20) ^ (uint64_t)(q + 1);
}

/* Lazily: (n_models * n_questions) last sent needs, INT_MIN = none. */
static bool hints_ready(pl_job *j)
{
    if (j->hint_sent)
        return true;
    size_t n = (size_t)j->n_models * (size_t)j->spec.n_questions;
    j->hint_sent = malloc((n + 1) * sizeof *j->hint_sent);
    j->hint_need = malloc(((size_t)j->spec.n_questions + 1) * sizeof *j->hint_need);
    if (!j->hint_sent || !j->hint_need) {
        free(j->hint_sent);
        free(j->hint_need);
        j->hint_sent = j->hint_need = NULL;
        return false;
    }
    for (size_t i = 0; i < n; i++)
        j->hint_sent[i] = INT_MIN;
    return true;
}

static void send_one(pl_job *j, int m, int q, int need)
{
    int *last = &j->hint_sent[(size_t)m * (size_t)j->spec.n_questions + (size_t)q];
    if (*last == need || (need == PL_CONV_NEED_DONE && *last == INT_MIN))
        return;                      /* unchanged, or done before any hint */
    *last = need;
    pl_backend *b = j->backends[m];
    b->ops->retain(b, job_conv_key(j, q), need == PL_CONV_NEED_DONE ? PL_NEED_DONE : need);
    j->hints_sent++;
}

void job_send_hints(pl_job *j)
{
    bool any = false;
    for (int m = 0; m < j->n_models; m++)
        any |= j->backends[m]->ops->retain != NULL;
    if (!any || j->no_hints || !hints_ready(j) ||
        pl_convs_next_need(j->convs, j->hint_need) < 0)
        return;
    for (int m = 0; m < j->n_models; m++) {
        if (!j->backends[m]->ops->retain)
            continue;
        /* One backend may serve several spec models: hint it once. */
        bool dup = false;
        for (int k = 0; k < m; k++)
            dup |= j->backends[k] == j->backends[m];
        for (int q = 0; !dup && q < j->spec.n_questions; q++)
            if (j->hint_need[q] != PL_CONV_NEED_NONE)
                send_one(j, m, q, j->hint_need[q]);
    }
}

void job_hint_now(pl_job *j, int m, int q)
{
    if (!j->no_hints && j->backends[m]->ops->retain && hints_ready(j))
        send_one(j, m, q, 0);
}

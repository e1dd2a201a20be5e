/* auth.c - API keys, rate limits and origins (see auth.h). */
#include "api/auth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/http.h>

typedef struct bucket {
    double level, last;          /* tokens now; when last refilled (s) */
} bucket;

typedef struct key_state {
    char *key;
    size_t len;
    bucket req, tok;
} key_state;

struct pl_auth {
    key_state *keys;
    int n_keys;                  /* >= 1: index 0 stands for "no key" when none set */
    bool need_key;
    char *origins;
    int rpm, tpm;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

pl_auth *pl_auth_new(const pl_auth_opts *o)
{
    pl_auth *a = calloc(1, sizeof *a);
    int n = o->n_keys > 0 ? o->n_keys : 1;
    if (!a || !(a->keys = calloc((size_t)n, sizeof *a->keys)))
        goto fail;
    a->n_keys = n;
    a->need_key = o->n_keys > 0;
    a->rpm = o->rpm;
    a->tpm = o->tpm;
    double t = now_s();
    for (int i = 0; i < n; i++) {
        a->keys[i].key = strdup(a->need_key ? o->keys[i] : "");
        if (!a->keys[i].key)
            goto fail;
        a->keys[i].len = strlen(a->keys[i].key);
        a->keys[i].req = (bucket){o->rpm, t};
        a->keys[i].tok = (bucket){o->tpm, t};
    }
    if (!(a->origins = strdup(o->origins ? o->origins : "")))
        goto fail;
    return a;
fail:
    pl_auth_free(a);
    return NULL;
}

void pl_auth_free(pl_auth *a)
{
    if (!a)
        return;
    for (int i = 0; a->keys && i < a->n_keys; i++)
        free(a->keys[i].key);
    free(a->keys);
    free(a->origins);
    free(a);
}

bool pl_auth_needs_key(const pl_auth *a)
{
    return a->need_key;
}

/* 0 when equal. Reads every byte of key and as many of the guess, so the
 * time depends only on len(key). */
static unsigned ct_diff(const char *key, size_t klen, const char *g, size_t glen)
{
    unsigned d = (unsigned)(klen != glen);
    for (size_t i = 0; i < klen; i++) {
        unsigned char gc = glen ? (unsigned char)g[i < glen ? i : glen - 1] : 0;
        d |= (unsigned)((unsigned char)key[i] ^ gc);
    }
    return d;
}

int pl_auth_check_key(const pl_auth *a, const char *authorization)
{
    if (!a->need_key)
        return 0;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7))
        return -1;
    const char *g = authorization + 7;
    while (*g == ' ')
        g++;
    size_t glen = strlen(g);
    while (glen && (g[glen - 1] == ' ' || g[glen - 1] == '\t'))
        glen--;
    int found = -1;
    for (int i = 0; i < a->n_keys; i++) {          /* no early exit */
        unsigned d = ct_diff(a->keys[i].key, a->keys[i].len, g, glen);
        int hit = d == 0;
        found = hit & (found < 0) ? i : found;
    }
    return found;
}

bool pl_auth_origin_allowed(const pl_auth *a, const char *origin, const char *host)
{
    size_t ol = strlen(origin);
    /* Same origin: the page came from this server. */
    if (host && !strncmp(origin, "http://", 7) && !strcmp(origin + 7, host))
        return true;
    for (const char *p = a->origins; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && *p == ' ')
            p++, n--;
        while (n && p[n - 1] == ' ')
            n--;
        if ((n == 1 && *p == '*') || (n == ol && !strncmp(p, origin, n)))
            return true;
        p = comma ? comma + 1 : p + n;
    }
    return false;
}

static void refill(bucket *b, int per_min, double t)
{
    b->level += (t - b->last) * per_min / 60.0;
    if (b->level > per_min)
        b->level = per_min;
    b->last = t;
}

static void add_limit_headers(struct evkeyvalq *out, const char *what, int limit,
                              const bucket *b)
{
    char name[64], v[32];
    double remaining = b->level > 0 ? floor(b->level) : 0;
    double reset = (limit - b->level) * 60.0 / limit;
    snprintf(name, sizeof name, "x-ratelimit-limit-%s", what);
    snprintf(v, sizeof v, "%d", limit);
    evhttp_add_header(out, name, v);
    snprintf(name, sizeof name, "x-ratelimit-remaining-%s", what);
    snprintf(v, sizeof v, "%.0f", remaining);
    evhttp_add_header(out, name, v);
    snprintf(name, sizeof name, "x-ratelimit-reset-%s", what);
    snprintf(v, sizeof v, "%.3fs", reset > 0 ? reset : 0);
    evhttp_add_header(out, name, v);
}

int pl_auth_admit(pl_auth *a, int key, struct evkeyvalq *out, const char **which)
{
    if ((!a->rpm && !a->tpm) || key < 0 || key >= a->n_keys)
        return 0;
    key_state *k = &a->keys[key];
    double t = now_s(), wait = 0;
    if (a->rpm) {
        refill(&k->req, a->rpm, t);
        if (k->req.level < 1) {
            wait = (1 - k->req.level) * 60.0 / a->rpm;
            *which = "requests";
        }
    }
    if (a->tpm) {
        refill(&k->tok, a->tpm, t);
        if (k->tok.level < 1 && !wait) {
            wait = (1 - k->tok.level) * 60.0 / a->tpm;
            *which = "tokens";
        }
    }
    if (!wait && a->rpm)
        k->req.level -= 1;
    if (a->rpm)
        add_limit_headers(out, "requests", a->rpm, &k->req);
    if (a->tpm)
        add_limit_headers(out, "tokens", a->tpm, &k->tok);
    return wait > 0 ? (int)ceil(wait) : 0;
}

void pl_auth_charge(pl_auth *a, int key, long tokens)
{
    if (!a->tpm || key < 0 || key >= a->n_keys || tokens <= 0)
        return;
    refill(&a->keys[key].tok, a->tpm, now_s());
    a->keys[key].tok.level -= (double)tokens;
}

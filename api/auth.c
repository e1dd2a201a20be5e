/* auth.c - API keys, rate limits and origins (see auth.h). */
#include "api/auth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <arpa/inet.h>
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
    char *origins, *hosts;
    char *bound;                 /* the address listened on */
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
    if (!(a->origins = strdup(o->origins ? o->origins : "")) ||
        !(a->hosts = strdup(o->hosts ? o->hosts : "")) || !(a->bound = strdup("")))
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
    free(a->hosts);
    free(a->bound);
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
    return pl_auth_check_api_key(a, authorization + 7);
}

int pl_auth_check_api_key(const pl_auth *a, const char *key)
{
    if (!a->need_key)
        return 0;
    if (!key)
        return -1;
    const char *g = key;
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

/* Is s[0..n) in the comma-separated list? "*" matches anything; with
 * domains, an entry ".d.example" matches d.example and its subdomains.
 * Case matters for origins only. */
static bool list_has(const char *list, const char *s, size_t n, bool domains)
{
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t k = comma ? (size_t)(comma - p) : strlen(p);
        while (k && *p == ' ')
            p++, k--;
        while (k && p[k - 1] == ' ')
            k--;
        if (k == 1 && *p == '*')
            return true;
        if (!domains && k == n && !strncmp(p, s, n))
            return true;
        if (domains && k == n && !strncasecmp(p, s, n))
            return true;
        if (domains && k > 1 && *p == '.' && (k - 1 == n || (n > k && s[n - k] == '.')) &&
            !strncasecmp(p + 1, s + n - (k - 1), k - 1))
            return true;
        p = comma ? comma + 1 : p + k;
    }
    return false;
}

bool pl_auth_origin_allowed(const pl_auth *a, const char *origin, const char *host)
{
    /* Same origin: the page came from this server. */
    if (host && !strncmp(origin, "http://", 7) && !strcmp(origin + 7, host))
        return true;
    return list_has(a->origins, origin, strlen(origin), false);
}

void pl_auth_set_bound(pl_auth *a, const char *bound_host)
{
    char *b = strdup(bound_host ? bound_host : "");
    if (b) {
        free(a->bound);
        a->bound = b;
    }
}

/* The name part of a Host value ("name", "name:port", "[v6]:port") into
 * out; false when malformed. */
static bool host_name(const char *host, char *out, size_t n)
{
    const char *end;
    if (*host == '[') {
        end = strchr(host, ']');
        if (!end || (end[1] && end[1] != ':'))
            return false;
        host++;
    } else {
        end = strchr(host, ':');
        end = end ? end : host + strlen(host);
    }
    size_t k = (size_t)(end - host);
    if (k == 0 || k >= n)
        return false;
    memcpy(out, host, k);
    out[k] = '\0';
    return true;
}

/* Parse an IP literal; *family is AF_INET or AF_INET6, 0 when not one. */
static bool ip_is(const char *name, struct in6_addr *v6, struct in_addr *v4, int *family)
{
    *family = inet_pton(AF_INET, name, v4) == 1    ? AF_INET
            : inet_pton(AF_INET6, name, v6) == 1 ? AF_INET6
                                                 : 0;
    return *family != 0;
}

/* An IP literal that is loopback, the bound address, or any address when
 * the server listens on all of them. */
static bool ip_allowed(const pl_auth *a, const char *name)
{
    struct in6_addr h6, b6;
    struct in_addr h4, b4;
    int hf, bf;
    if (!ip_is(name, &h6, &h4, &hf))
        return false;
    if ((hf == AF_INET && (ntohl(h4.s_addr) >> 24) == 127) ||
        (hf == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&h6)))
        return true;
    if (!ip_is(a->bound, &b6, &b4, &bf))
        return false;
    if ((bf == AF_INET && b4.s_addr == INADDR_ANY) ||
        (bf == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&b6)))
        return true;
    return hf == bf && (hf == AF_INET ? h4.s_addr == b4.s_addr : !memcmp(&h6, &b6, sizeof h6));
}

bool pl_auth_host_allowed(const pl_auth *a, const char *host)
{
    char name[256];
    if (a->need_key || !host)
        return true;
    if (!host_name(host, name, sizeof name))
        return false;
    size_t n = strlen(name);
    if (!strcasecmp(name, "localhost") ||
        (n > 10 && !strcasecmp(name + n - 10, ".localhost")) || !strcasecmp(name, a->bound))
        return true;
    return ip_allowed(a, name) || list_has(a->hosts, name, n, true);
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

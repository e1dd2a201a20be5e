/* constraint.c - constraint text -> regex -> token automaton, with an LRU
 * cache keyed by kind and canonical text (constraint.h). */
#include "backends/constrain/constraint.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "backends/constrain/json_schema.h"

typedef struct cache_entry {
    pl_constraint_kind kind;
    char *key;                   /* canonical text */
    const pl_token_fsm *fsm;     /* the cache's reference; NULL: compiling or failed */
    pl_err *err;                 /* a failed compile's 400 (kept), or NULL */
    bool compiling;              /* a thread compiles it now (not evicted) */
    uint64_t last_use;
} cache_entry;

struct pl_constraint_cache {
    pthread_mutex_t mu;          /* the entries and counters; never held
                                    while compiling */
    pthread_cond_t compiled;     /* an entry stopped compiling */
    pthread_mutex_t trie_mu;     /* the trie's one build */
    pl_vocab_source src;
    pl_json_ws ws;
    pl_vocab_trie *trie;         /* built on first use */
    cache_entry e[PL_CONSTRAINT_CACHE_MAX];
    int n;
    uint64_t clock, hits, compiles;
    double compile_ms;
    pl_constraint_hook hook;     /* tests */
    void *hook_ud;
};

#define BAD(...) pl_err_set(err, 400, "invalid_request_error", "response_format", \
                            "invalid_constraint", __VA_ARGS__)

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

pl_constraint_cache *pl_constraint_cache_new(const pl_vocab_source *src, pl_json_ws ws)
{
    pl_constraint_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->compiled, NULL);
    pthread_mutex_init(&c->trie_mu, NULL);
    c->src = *src;
    c->ws = ws;
    return c;
}

void pl_constraint_cache_free(pl_constraint_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].err);
        pl_token_fsm_release(c->e[i].fsm);
    }
    pl_vocab_trie_free(c->trie);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->compiled);
    pthread_mutex_destroy(&c->trie_mu);
    free(c);
}

static char *choice_regex_(const char *text, pl_err *err)
{
    json_error_t je;
    json_t *arr = json_loads(text, JSON_DECODE_ANY, &je);
    char *re = NULL;
    size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
    const char **v = n ? malloc(sizeof *v * n) : NULL;
    if (!n || !v) {
        BAD("'choice' must be a non-empty array of strings");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            BAD("'choice[%zu]' must be a non-empty string", i);
            goto done;
        }
        v[i] = json_string_value(s);
    }
    re = pl_choice_regex(v, (int)n);
    if (!re)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
done:
    free(v);
    json_decref(arr);
    return re;
}

char *pl_constraint_regex(pl_constraint_kind kind, const char *text, pl_json_ws ws,
                          pl_err *err)
{
    char msg[400];
    char *re = NULL;
    switch (kind) {
    case PL_CONSTRAINT_JSON_OBJECT:
        re = pl_json_object_regex(ws);
        break;
    case PL_CONSTRAINT_REGEX:
        re = text ? strdup(text) : NULL;
        break;
    case PL_CONSTRAINT_CHOICE:
        return text ? choice_regex_(text, err) : (BAD("'choice' is empty"), NULL);
    case PL_CONSTRAINT_JSON_SCHEMA: {
        json_error_t je;
        json_t *s = text ? json_loads(text, JSON_DECODE_ANY, &je) : NULL;
        if (!s)
            return BAD("the JSON schema is not valid JSON"), NULL;
        re = pl_json_schema_regex(s, ws, msg, sizeof msg);
        json_decref(s);
        if (!re)
            return BAD("%s", msg), NULL;
        return re;
    }
    default:
        return BAD("unknown constraint"), NULL;
    }
    if (!re)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return re;
}

int pl_constraint_check(pl_constraint_kind kind, const char *text, pl_json_ws ws, pl_err *err)
{
    char msg[300];
    char *re = pl_constraint_regex(kind, text, ws, err);
    if (!re)
        return -1;
    int rc = pl_regex_check(re, strlen(re), 0, msg, sizeof msg);
    free(re);
    return rc == 0 ? 0 : BAD("cannot compile the %s constraint: %s", pl_constraint_name(kind),
                             msg);
}

static const pl_token_fsm *compile_(pl_constraint_cache *c, pl_constraint_kind kind,
                                    const char *text, pl_err *err)
{
    char msg[300];
    char *re = pl_constraint_regex(kind, text, c->ws, err);
    if (!re)
        return NULL;
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, PL_CONSTRAINT_MAX_STATES, msg,
                                 sizeof msg);
    free(re);
    if (!d)
        return BAD("cannot compile the %s constraint: %s", pl_constraint_name(kind), msg),
               NULL;
    pl_token_fsm *f = pl_token_fsm_new(c->trie, d);
    if (!f)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory compiling masks");
    return f;
}

/* The entry for (kind, key), or NULL. Under c->mu. */
static cache_entry *find_(pl_constraint_cache *c, pl_constraint_kind kind, const char *key)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].kind == kind && !strcmp(c->e[i].key, key))
            return &c->e[i];
    return NULL;
}

/* Make room: drop the least recently used entry not being compiled.
 * Returns -1 when every entry is being compiled. Under c->mu. */
static int evict_(pl_constraint_cache *c)
{
    int lru = -1;
    for (int i = 0; i < c->n; i++)
        if (!c->e[i].compiling && (lru < 0 || c->e[i].last_use < c->e[lru].last_use))
            lru = i;
    if (lru < 0)
        return -1;
    free(c->e[lru].key);
    free(c->e[lru].err);
    pl_token_fsm_release(c->e[lru].fsm);
    c->e[lru] = c->e[--c->n];
    return 0;
}

/* A ready entry's answer: a new reference, or NULL with its error. */
static const pl_token_fsm *answer_(pl_constraint_cache *c, cache_entry *x, pl_err *err)
{
    x->last_use = ++c->clock;
    c->hits++;
    if (x->err) {
        if (err)
            *err = *x->err;
        return NULL;
    }
    pl_token_fsm_retain(x->fsm);
    return x->fsm;
}

int pl_constraint_lookup(pl_constraint_cache *c, pl_constraint_kind kind, const char *text,
                         const pl_token_fsm **out, pl_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&c->mu);
    cache_entry *x = find_(c, kind, text ? text : "");
    int rc = 0;
    if (x && !x->compiling)
        rc = (*out = answer_(c, x, err)) ? 1 : -1;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int trie_ready_(pl_constraint_cache *c, pl_err *err)
{
    pthread_mutex_lock(&c->trie_mu);
    if (!c->trie)
        c->trie = pl_vocab_trie_new(&c->src);
    pthread_mutex_unlock(&c->trie_mu);
    return c->trie ? 0 : pl_err_set(err, 500, "server_error", NULL, NULL,
                                    "out of memory (vocabulary trie)");
}

/* Compile outside the lock, then publish into the entry at key (gone only
 * if it could not be made: then the result is simply not cached). */
static const pl_token_fsm *compile_publish_(pl_constraint_cache *c, pl_constraint_kind kind,
                                            const char *text, const char *key, bool cached,
                                            pl_err *err)
{
    if (c->hook)
        c->hook(c->hook_ud, kind, text);
    double t0 = now_ms_();
    pl_err e2;
    const pl_token_fsm *f = trie_ready_(c, &e2) == 0 ? compile_(c, kind, text, &e2) : NULL;
    pthread_mutex_lock(&c->mu);
    c->compiles++;
    c->compile_ms += now_ms_() - t0;
    cache_entry *x = cached ? find_(c, kind, key) : NULL;
    if (x) {
        x->compiling = false;
        if (f) {
            x->fsm = f;
            pl_token_fsm_retain(f);
        } else if (e2.status == 400 && (x->err = malloc(sizeof *x->err))) {
            *x->err = e2;            /* the same schema fails the same way */
        } else {
            free(x->key);            /* out of memory: let a later request retry */
            *x = c->e[--c->n];
        }
        pthread_cond_broadcast(&c->compiled);
    }
    pthread_mutex_unlock(&c->mu);
    if (!f && err)
        *err = e2;
    return f;
}

const pl_token_fsm *pl_constraint_get(pl_constraint_cache *c, pl_constraint_kind kind,
                                      const char *text, pl_err *err)
{
    const char *key = text ? text : "";
    pthread_mutex_lock(&c->mu);
    cache_entry *x;
    while ((x = find_(c, kind, key)) && x->compiling)
        pthread_cond_wait(&c->compiled, &c->mu);   /* another thread compiles it */
    if (x) {
        const pl_token_fsm *f = answer_(c, x, err);
        pthread_mutex_unlock(&c->mu);
        return f;
    }
    char *k = strdup(key);
    bool cached = k && (c->n < PL_CONSTRAINT_CACHE_MAX || evict_(c) == 0);
    if (cached)
        c->e[c->n++] = (cache_entry){.kind = kind, .key = k, .compiling = true,
                                     .last_use = ++c->clock};
    else
        free(k);
    pthread_mutex_unlock(&c->mu);
    return compile_publish_(c, kind, text, key, cached, err);
}

void pl_constraint_cache_set_hook(pl_constraint_cache *c, pl_constraint_hook hook, void *ud)
{
    pthread_mutex_lock(&c->mu);
    c->hook = hook;
    c->hook_ud = ud;
    pthread_mutex_unlock(&c->mu);
}

void pl_constraint_cache_stats(pl_constraint_cache *c, uint64_t *hits, uint64_t *compiles,
                               double *compile_ms)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *compiles = c->compiles;
    *compile_ms = c->compile_ms;
    pthread_mutex_unlock(&c->mu);
}

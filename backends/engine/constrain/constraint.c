/* constraint.c - constraint text -> regex -> token automaton, with an LRU
 * cache keyed by kind and canonical text (constraint.h). */
#include "backends/engine/constrain/constraint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "backends/engine/constrain/json_schema.h"

typedef struct cache_entry {
    pl_constraint_kind kind;
    char *key;                   /* canonical text */
    const pl_token_fsm *fsm;     /* the cache's reference */
    uint64_t last_use;
} cache_entry;

struct pl_constraint_cache {
    pthread_mutex_t mu;
    pl_vocab_source src;
    pl_vocab_trie *trie;         /* built on first use */
    cache_entry e[PL_CONSTRAINT_CACHE_MAX];
    int n;
    uint64_t clock, hits, compiles;
    double compile_ms;
};

#define BAD(...) pl_err_set(err, 400, "invalid_request_error", "response_format", \
                            "invalid_constraint", __VA_ARGS__)

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

pl_constraint_cache *pl_constraint_cache_new(const pl_vocab_source *src)
{
    pl_constraint_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->src = *src;
    return c;
}

void pl_constraint_cache_free(pl_constraint_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        pl_token_fsm_release(c->e[i].fsm);
    }
    pl_vocab_trie_free(c->trie);
    pthread_mutex_destroy(&c->mu);
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

char *pl_constraint_regex(pl_constraint_kind kind, const char *text, pl_err *err)
{
    char msg[400];
    char *re = NULL;
    switch (kind) {
    case PL_CONSTRAINT_JSON_OBJECT:
        re = pl_json_object_regex();
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
        re = pl_json_schema_regex(s, msg, sizeof msg);
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

static const pl_token_fsm *compile_(pl_constraint_cache *c, pl_constraint_kind kind,
                                    const char *text, pl_err *err)
{
    char msg[300];
    char *re = pl_constraint_regex(kind, text, err);
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

/* Make room: drop the least recently used entry. */
static void evict_(pl_constraint_cache *c)
{
    int lru = 0;
    for (int i = 1; i < c->n; i++)
        if (c->e[i].last_use < c->e[lru].last_use)
            lru = i;
    free(c->e[lru].key);
    pl_token_fsm_release(c->e[lru].fsm);
    c->e[lru] = c->e[--c->n];
}

const pl_token_fsm *pl_constraint_get(pl_constraint_cache *c, pl_constraint_kind kind,
                                      const char *text, pl_err *err)
{
    const char *key = text ? text : "";
    const pl_token_fsm *f = NULL;
    pthread_mutex_lock(&c->mu);
    c->clock++;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].kind == kind && !strcmp(c->e[i].key, key)) {
            c->e[i].last_use = c->clock;
            c->hits++;
            f = c->e[i].fsm;
            pl_token_fsm_retain(f);
            goto done;
        }
    if (!c->trie && !(c->trie = pl_vocab_trie_new(&c->src))) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory (vocabulary trie)");
        goto done;
    }
    double t0 = now_ms_();
    char *k = strdup(key);
    f = k ? compile_(c, kind, text, err) : NULL;
    if (!f) {
        free(k);
        goto done;
    }
    c->compiles++;
    c->compile_ms += now_ms_() - t0;
    if (c->n == PL_CONSTRAINT_CACHE_MAX)
        evict_(c);
    c->e[c->n++] = (cache_entry){kind, k, f, c->clock};
    pl_token_fsm_retain(f);
done:
    pthread_mutex_unlock(&c->mu);
    return f;
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

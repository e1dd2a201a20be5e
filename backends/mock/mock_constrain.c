/* mock_constrain.c - the mock backend's answer to a constraint: one of the
 * choices, or a shortest text the constraint's DFA accepts (random among
 * the shortest, printable bytes first), so jobs and tests that constrain
 * their output run on the mock too. */
#include "backends/mock/mock_internal.h"

#include <stdlib.h>
#include <string.h>

#include "backends/constrain/constraint.h"
#include "backends/constrain/regex.h"

#define MOCK_MAX_STATES 4096

/* Distance (in bytes) from every state to acceptance: a breadth-first
 * search over the reversed transitions. */
static int *distances_(const pl_dfa *d)
{
    size_t n = (size_t)d->n_states;
    int *dist = malloc(sizeof *dist * n), *queue = malloc(sizeof *queue * n);
    int *head = malloc(sizeof *head * n), *next = malloc(sizeof *next * n * 256);
    int *src = malloc(sizeof *src * n * 256);
    if (!dist || !queue || !head || !next || !src) {
        free(dist), free(queue), free(head), free(next), free(src);
        return NULL;
    }
    int ne = 0, qh = 0, qt = 0;
    for (size_t q = 0; q < n; q++)
        head[q] = -1;
    for (size_t q = 0; q < n; q++)
        for (int b = 0; b < 256; b++) {
            int32_t t = d->trans[q * 256 + (size_t)b];
            if (t >= 0) {                  /* edge q -> t, listed under t */
                src[ne] = (int)q;
                next[ne] = head[t];
                head[t] = ne++;
            }
        }
    for (size_t q = 0; q < n; q++) {
        dist[q] = d->accept[q] ? 0 : -1;
        if (d->accept[q])
            queue[qt++] = (int)q;
    }
    while (qh < qt) {
        int t = queue[qh++];
        for (int e = head[t]; e >= 0; e = next[e])
            if (dist[src[e]] < 0) {
                dist[src[e]] = dist[t] + 1;
                queue[qt++] = src[e];
            }
    }
    free(queue), free(head), free(next), free(src);
    return dist;
}

/* A random shortest accepted string (NUL-terminated, malloc'd); dist from
 * distances_. */
static char *shortest_(const pl_dfa *d, const int *dist, uint64_t (*rnd)(uint64_t *),
                       uint64_t *rng)
{
    char *out = dist[0] >= 0 ? malloc((size_t)dist[0] + 1) : NULL;
    int q = 0, n = 0;
    while (out && dist[q] > 0) {
        int pick[256], np = 0;
        for (int pass = 0; pass < 2 && np == 0; pass++)
            for (int b = 0; b < 256; b++) {
                int32_t t = d->trans[(size_t)q * 256 + (size_t)b];
                bool printable = b >= 0x20 && b < 0x7f;
                if (t >= 0 && dist[t] == dist[q] - 1 && (pass == 1 || printable))
                    pick[np++] = b;
            }
        int b = pick[rnd(rng) % (uint64_t)np];
        out[n++] = (char)b;
        q = d->trans[(size_t)q * 256 + (size_t)b];
    }
    if (out)
        out[n] = '\0';
    return out;
}

void pl_mock_dfa_cache_clear(pl_mock_dfa_cache *c)
{
    for (int i = 0; i < PL_MOCK_DFA_CACHE; i++) {
        free(c->e[i].re);
        pl_dfa_free(c->e[i].dfa);
        free(c->e[i].dist);
    }
    memset(c, 0, sizeof *c);
}

/* The cache slot holding re, compiled now when absent (the least recently
 * used slot makes room). -1 with *err when re does not compile. */
static int cached_(pl_mock_dfa_cache *c, const char *re, const pl_sampling *sp, pl_err *err)
{
    int victim = 0;
    for (int i = 0; i < PL_MOCK_DFA_CACHE; i++) {
        if (c->e[i].re && !strcmp(c->e[i].re, re)) {
            c->e[i].used = ++c->clock;
            return i;
        }
        if (!c->e[i].re || (c->e[victim].re && c->e[i].used < c->e[victim].used))
            victim = i;
    }
    char msg[300];
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, MOCK_MAX_STATES, msg, sizeof msg);
    if (!d)
        return pl_err_set(err, 400, "invalid_request_error", "response_format",
                          "invalid_constraint", "cannot compile the %s constraint: %s",
                          pl_constraint_name(sp->constraint), msg);
    int *dist = distances_(d);
    char *copy = strdup(re);
    if (!dist || !copy) {
        pl_dfa_free(d), free(dist), free(copy);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(c->e[victim].re);
    pl_dfa_free(c->e[victim].dfa);
    free(c->e[victim].dist);
    c->e[victim].re = copy;
    c->e[victim].dfa = d;
    c->e[victim].dist = dist;
    c->e[victim].used = ++c->clock;
    return victim;
}

static char *choice_(const char *text, uint64_t (*rnd)(uint64_t *), uint64_t *rng)
{
    json_t *arr = text ? json_loads(text, 0, NULL) : NULL;
    char *s = NULL;
    if (json_is_array(arr) && json_array_size(arr) > 0) {
        json_t *c = json_array_get(arr, rnd(rng) % json_array_size(arr));
        s = json_is_string(c) ? strdup(json_string_value(c)) : NULL;
    }
    json_decref(arr);
    return s;
}

char *pl_mock_constrained_text(pl_mock_dfa_cache *cache, const pl_sampling *sp,
                               pl_json_ws ws, uint64_t (*rnd)(uint64_t *), uint64_t *rng,
                               pl_err *err)
{
    if (sp->constraint == PL_CONSTRAINT_NONE)
        return NULL;
    char *s = NULL;
    if (sp->constraint == PL_CONSTRAINT_CHOICE) {
        s = choice_(sp->constraint_text, rnd, rng);
    } else {
        char *re = pl_constraint_regex(sp->constraint, sp->constraint_text, ws, err);
        if (!re)
            return (char *)-1;
        int k = cached_(cache, re, sp, err);
        free(re);
        if (k < 0)
            return (char *)-1;
        s = shortest_(cache->e[k].dfa, cache->e[k].dist, rnd, rng);
    }
    if (!s) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return (char *)-1;
    }
    return s;
}

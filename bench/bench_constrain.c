/* bench_constrain.c - compile time of constraints on a model's vocabulary:
 * a 20-property JSON schema (strings, bounded integers, enums, booleans,
 * numbers), a nested one (objects in an array in an object, as pydantic
 * writes them), json_object, each with compact and flexible whitespace
 * (json_schema.h), and the jobs' answer grammar. Prints one JSON line per
 * constraint: DFA states, the median compile time (regex, DFA, lifting;
 * the request pays this, on a worker), the part of it that writes and
 * parses the regex (pl_constraint_check: what a request's submit does
 * inline, so a bad schema is a 400 before anything is sent) and the time
 * to compute every state's mask (paid lazily, a state at a time, the
 * first time a reply reaches it).
 *
 *   build/bench/bench_constrain [MODEL.gguf] [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/constrain/constraint.h"
#include "backends/formats/gguf.h"
#include "backends/text/tokenizer.h"

static const char *tok_bytes(void *ud, int32_t id, size_t *len)
{
    if (pl_tokenizer_token_type(ud, id) == PL_TOKEN_TYPE_CONTROL) {
        *len = 0;
        return NULL;
    }
    return pl_tokenizer_token_bytes(ud, id, len);
}

static bool tok_eog(void *ud, int32_t id)
{
    return pl_tokenizer_is_eog(ud, id);
}

/* CPU time of this thread: on a loaded machine wall time mostly measures
 * the other processes. */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 20 properties, all required, cycling through five kinds. */
static char *schema20(void)
{
    static const char *kinds[] = {
        "{\"type\":\"string\",\"maxLength\":40}",
        "{\"type\":\"integer\",\"minimum\":0,\"maximum\":10000}",
        "{\"enum\":[\"red\",\"green\",\"blue\"]}",
        "{\"type\":\"boolean\"}",
        "{\"type\":\"number\",\"minimum\":-100,\"maximum\":100}",
    };
    size_t cap = 8192, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\":%s", i ? "," : "", i,
                              kinds[i % 5]);
    n += (size_t)snprintf(s + n, cap - n, "},\"required\":[");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\"", i ? "," : "", i);
    snprintf(s + n, cap - n, "],\"additionalProperties\":false}");
    return s;
}

static const char NESTED[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"address\":{\"$ref\":\"#/$defs/Address\"},\"orders\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/Order\"}},\"tags\":{\"type\":\"array\",\"items\":"
    "{\"type\":\"string\"}},\"vip\":{\"type\":\"boolean\"}},\"required\":[\"name\","
    "\"address\",\"orders\"],\"$defs\":{\"Address\":{\"type\":\"object\",\"properties\":"
    "{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},\"zip\":"
    "{\"type\":\"string\"}},\"required\":[\"street\",\"city\"]},\"Order\":{\"type\":"
    "\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"total\":{\"type\":"
    "\"number\"},\"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"status\":{\"enum\":[\"open\",\"paid\",\"shipped\"]}},\"required\":[\"id\","
    "\"total\",\"items\",\"status\"]}}}";

static void bench(const pl_vocab_source *src, const char *name, pl_constraint_kind k,
                  const char *text, pl_json_ws ws, int reps)
{
    double t[64], tf[64], tr[64];
    int states = 0;
    for (int r = 0; r < reps && r < 64; r++) {
        pl_constraint_cache *c = pl_constraint_cache_new(src, ws);
        pl_err err;
        double t0r = now_ms();
        pl_constraint_check(k, text, ws, &err);
        tr[r] = now_ms() - t0r;
        pl_constraint_get(c, PL_CONSTRAINT_CHOICE, "[\"warm\"]", &err); /* builds the trie */
        double t0 = now_ms();
        const pl_token_fsm *f = pl_constraint_get(c, k, text, &err);
        t[r] = now_ms() - t0;
        if (!f) {
            fprintf(stderr, "%s: %s\n", name, err.message);
            exit(1);
        }
        t0 = now_ms();
        pl_token_fsm_fill(f);
        tf[r] = now_ms() - t0;
        states = f->n_states;
        pl_token_fsm_release(f);
        pl_constraint_cache_free(c);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    qsort(tf, (size_t)reps, sizeof *tf, cmp_d);
    qsort(tr, (size_t)reps, sizeof *tr, cmp_d);
    printf("{\"constraint\":\"%s\",\"whitespace\":\"%s\",\"dfa_states\":%d,"
           "\"compile_cpu_ms_median\":%.1f,\"min\":%.1f,\"max\":%.1f,"
           "\"check_cpu_ms_median\":%.2f,\"all_masks_cpu_ms_median\":%.1f,\"reps\":%d}\n",
           name, ws == PL_JSON_WS_COMPACT ? "compact" : "flexible", states, t[reps / 2], t[0],
           t[reps - 1], tr[reps / 2], tf[reps / 2], reps);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1]
                                : "/root/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    char err[256];
    pl_gguf *g = pl_gguf_open(path, err, sizeof err);
    pl_tokenizer *t = g ? pl_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    if (!t) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    pl_vocab_source src = {pl_tokenizer_n_vocab(t), tok_bytes, tok_eog, t};
    double t0 = now_ms();
    pl_vocab_trie *trie = pl_vocab_trie_new(&src);
    printf("{\"vocab\":%d,\"trie_cpu_ms\":%.1f}\n", src.n_vocab, now_ms() - t0);
    pl_vocab_trie_free(trie);
    char *s = schema20();
    for (int ws = PL_JSON_WS_COMPACT; ws >= PL_JSON_WS_FLEXIBLE; ws--) {
        bench(&src, "json_schema_20_properties", PL_CONSTRAINT_JSON_SCHEMA, s, ws, reps);
        bench(&src, "json_schema_nested", PL_CONSTRAINT_JSON_SCHEMA, NESTED, ws, reps);
        bench(&src, "json_object", PL_CONSTRAINT_JSON_OBJECT, NULL, ws, reps);
    }
    bench(&src, "job_answer_4_choices", PL_CONSTRAINT_REGEX,
          "(?:[ -~]{1,400}\\n)?Answer: [A-D]", PL_JSON_WS_COMPACT, reps);
    free(s);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
    return 0;
}

/* hf_tool.c - parley's model and tokenizer loaders on the command line, for
 * the Python checks of Hugging Face checkpoints (tests/python/
 * test_hf_checkpoint.py) and the load benchmark (bench/bench_hf.py):
 *
 *   hf_tool logits MODEL [WEIGHT_TYPE] < ids.json
 *       teacher-forced logits of one sequence (every vocabulary entry, every
 *       position) through the CPU forward pass, as JSON rows; K/V in floats.
 *   hf_tool tokenize MODEL < texts.json
 *       {"plain": [[ids]...], "special": [[ids]...]}: each text encoded
 *       without and with the model's BOS/EOS (special tokens' text parsed);
 *       MODEL may be a folder with only tokenizer.json and its config.
 *   hf_tool load MODEL [WEIGHT_TYPE]
 *       open the model as the engine does and print the seconds it took.
 *   hf_tool vocab GGUF
 *       the GGUF's tokenizer.ggml.* arrays as JSON (tokens, scores, types,
 *       merges, pre, special ids), for building a tokenizer.json of a real
 *       vocabulary with the tokenizers library (faster than gguf-py's
 *       reader on a 262k vocabulary).
 *
 * MODEL is a GGUF file or a checkpoint folder; WEIGHT_TYPE (default q8_0)
 * is what a checkpoint's matrices are quantised to. Errors go to stderr
 * with exit status 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/engine_hf.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/hf_cache.h"
#include "backends/engine/model/model.h"
#include "backends/text/tokenizer.h"

typedef struct loaded {
    pl_gguf *gguf;
    pl_engine_hf hf;
    const pl_gguf *meta;
    pl_model *model;
    pl_tokenizer *tok;
} loaded;

static void unload(loaded *l)
{
    pl_model_free(l->model);
    pl_tokenizer_free(l->tok);
    pl_gguf_free(l->gguf);
    pl_engine_hf_free(&l->hf);
}

static int load(loaded *l, const char *spec, const char *wtype, bool model, char *err,
                size_t n)
{
    char path[4096];
    struct stat st;
    memset(l, 0, sizeof *l);
    if (!model && stat(spec, &st) == 0 && S_ISDIR(st.st_mode))  /* a tokenizer alone */
        return (l->tok = pl_tokenizer_from_hf(spec, NULL, err, n)) ? 0 : -1;
    int kind = pl_hf_resolve(spec, NULL, path, sizeof path, err, n);
    if (kind < 0)
        return -1;
    if (kind == PL_MODEL_KIND_HF) {
        if (pl_engine_hf_open(&l->hf, path, wtype, 0, &l->tok, err, n) < 0)
            return -1;
        l->meta = pl_hf_model_gguf(l->hf.files);
    } else {
        if (!(l->gguf = pl_gguf_open(path, err, n)) ||
            !(l->tok = pl_tokenizer_from_gguf(l->gguf, err, n)))
            return -1;
        l->meta = l->gguf;
    }
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_op_keep_packed,
                        .keep_packed_experts = pl_op_qdot_supported};
    if (model && !(l->model = pl_model_load(l->meta, &mo, err, n)))
        return -1;
    return 0;
}

static int cmd_logits(loaded *l)
{
    json_error_t je;
    json_t *ids = json_loadf(stdin, 0, &je);
    int n = (int)json_array_size(ids), bs = 16, mb = (n + bs - 1) / bs, nv = l->model->n_vocab;
    char err[256];
    if (n == 0) {
        fprintf(stderr, "stdin: a JSON list of token ids\n");
        return 1;
    }
    pl_pool *pool = pl_pool_new(2);
    pl_fwd_opts o = {.max_rows = n, .max_out = n, .max_ctx = mb * bs, .num_blocks = mb,
                     .block_size = bs, .gemm_min_rows = 1 << 30};
    pl_cpu_fwd *f = pl_cpu_fwd_new(l->model, pool, &o, err, sizeof err);
    int32_t *v = calloc((size_t)n * 4 + (size_t)mb, sizeof *v);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)nv);
    int rc = 1;
    if (!f || !v || !logits)
        goto done;
    int32_t *pos = v + n, *rs = pos + n, *out = rs + n, *bt = out + n;
    for (int i = 0; i < n; i++) {
        v[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        pos[i] = out[i] = i;
    }
    for (int i = 0; i < mb; i++)
        bt[i] = i;
    pl_fwd_batch b = {.n_rows = n, .tokens = v, .positions = pos, .row_seq = rs,
                      .block_table = bt, .max_blocks_per_seq = mb, .n_out = n, .out_rows = out};
    if (pl_cpu_forward(f, &b, logits) != 0)
        goto done;
    printf("[");
    for (int i = 0; i < n; i++) {
        printf("%s[", i ? ",\n" : "");
        for (int j = 0; j < nv; j++)
            printf("%s%.9g", j ? "," : "", logits[(size_t)i * nv + j]);
        printf("]");
    }
    printf("]\n");
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "forward failed: %s\n", f ? "" : err);
    free(v);
    free(logits);
    pl_cpu_fwd_free(f);
    pl_pool_free(pool);
    json_decref(ids);
    return rc;
}

static json_t *encode_all(const pl_tokenizer *t, json_t *texts, bool special)
{
    json_t *out = json_array(), *s;
    size_t i;
    json_array_foreach(texts, i, s) {
        int32_t *ids;
        int n;
        json_t *row = json_array();
        if (pl_tokenizer_encode(t, json_string_value(s), json_string_length(s), special, true,
                                &ids, &n) == 0) {
            for (int k = 0; k < n; k++)
                json_array_append_new(row, json_integer(ids[k]));
            free(ids);
        }
        json_array_append_new(out, row);
    }
    return out;
}

static int cmd_tokenize(loaded *l)
{
    json_error_t je;
    json_t *texts = json_loadf(stdin, JSON_ALLOW_NUL, &je);
    if (!json_is_array(texts)) {
        fprintf(stderr, "stdin: a JSON list of strings\n");
        return 1;
    }
    json_t *o = json_pack("{s:o, s:o}", "plain", encode_all(l->tok, texts, false), "special",
                          encode_all(l->tok, texts, true));
    json_dumpf(o, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(o);
    json_decref(texts);
    return 0;
}

static json_t *gguf_array(const pl_gguf *g, const char *key)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    json_t *a = json_array();
    for (uint64_t i = 0; kv && kv->type == PL_GGUF_TYPE_ARRAY && i < kv->v.arr.n; i++) {
        if (kv->v.arr.type == PL_GGUF_TYPE_STRING) {
            pl_gguf_str s = pl_gguf_arr_str(kv, i);
            json_t *j = json_stringn(s.ptr, (size_t)s.len);
            json_array_append_new(a, j ? j : json_string(""));
        } else if (kv->v.arr.type == PL_GGUF_TYPE_FLOAT32) {
            json_array_append_new(a, json_real(pl_gguf_arr_f32(kv, i)));
        } else {
            json_array_append_new(a, json_integer(pl_gguf_arr_int(kv, i)));
        }
    }
    return a;
}

static json_t *gguf_scalar(const pl_gguf *g, const char *key)
{
    uint64_t u;
    pl_gguf_str s;
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (kv && kv->type == PL_GGUF_TYPE_BOOL)
        return json_boolean(kv->v.b);
    if (pl_gguf_get_u64(g, key, &u) == 0)
        return json_integer((json_int_t)u);
    if (pl_gguf_get_str(g, key, &s) == 0)
        return json_stringn(s.ptr, (size_t)s.len);
    return json_null();
}

static int cmd_vocab(const char *path)
{
    char err[512];
    pl_gguf *g = pl_gguf_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    json_t *o = json_object();
    const char *arrays[] = {"tokens", "scores", "token_type", "merges"};
    const char *scalars[] = {"model", "pre", "bos_token_id", "eos_token_id",
                             "unknown_token_id", "add_bos_token", "add_space_prefix"};
    char k[128];
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) {
        snprintf(k, sizeof k, "tokenizer.ggml.%s", arrays[i]);
        json_object_set_new(o, arrays[i], gguf_array(g, k));
    }
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++) {
        snprintf(k, sizeof k, "tokenizer.ggml.%s", scalars[i]);
        json_object_set_new(o, scalars[i], gguf_scalar(g, k));
    }
    json_object_set_new(o, "chat_template", gguf_scalar(g, "tokenizer.chat_template"));
    json_dumpf(o, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    printf("\n");
    json_decref(o);
    pl_gguf_free(g);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hf_tool logits|tokenize|load|vocab MODEL [WEIGHT_TYPE]\n");
        return 2;
    }
    const char *cmd = argv[1], *wtype = argc > 3 ? argv[3] : "q8_0";
    if (!strcmp(cmd, "vocab"))
        return cmd_vocab(argv[2]);
    char err[1024];
    struct timespec t0, t1;
    loaded l;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (load(&l, argv[2], wtype, strcmp(cmd, "tokenize") != 0, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        unload(&l);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int rc = 0;
    if (!strcmp(cmd, "logits"))
        rc = cmd_logits(&l);
    else if (!strcmp(cmd, "tokenize"))
        rc = cmd_tokenize(&l);
    else
        printf("%.4f\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    unload(&l);
    return rc;
}

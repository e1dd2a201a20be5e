/* engine_hf.c - a checkpoint folder's weights, tokenizer and generation
 * settings for the engine (engine_hf.h). */
#include "backends/engine/engine_hf.h"

#include <stdio.h>
#include <string.h>

#include "backends/formats/hf_json.h"
#include "backends/engine/model/quantize.h"

static void add_eos_(pl_engine_hf *h, json_t *v)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < (1 << 30) &&
        h->n_eos < PL_ENGINE_HF_MAX_EOS)
        h->eos[h->n_eos++] = (int32_t)json_integer_value(v);
}

/* eos_token_id of config.json and generation_config.json: one id or a
 * list (Llama 3.1 lists <|end_of_text|>, <|eom_id|> and <|eot_id|>). */
static int read_eos_(pl_engine_hf *h, const char *dir, char *err, size_t n)
{
    static const char *const files[] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2; f++) {
        pl_hf_json j;
        if (pl_hf_json_load(&j, dir, files[f], false, err, n) < 0)
            return -1;
        json_t *e = pl_hf_json_get(&j, "eos_token_id"), *v;
        size_t i;
        if (e && !json_is_integer(e) && !json_is_array(e)) {
            pl_hf_json_fail(&j, "eos_token_id", err, n, "must be an id or a list of ids");
            pl_hf_json_free(&j);
            return -1;
        }
        add_eos_(h, e);
        json_array_foreach(json_is_array(e) ? e : NULL, i, v)
            add_eos_(h, v);
        pl_hf_json_free(&j);
    }
    return 0;
}

/* generation_config.json's sampling fields (the ones vLLM takes from it). */
static int read_sampling_(pl_engine_hf *h, const char *dir, char *err, size_t n)
{
    pl_hf_json j;
    pl_sampling_model_defaults *d = &h->sampling;
    long long k;
    int rc = -1;
    if (pl_hf_json_load(&j, dir, "generation_config.json", false, err, n) < 0)
        return -1;
    struct { const char *key; double lo, hi; double *out; unsigned bit; } nums[] = {
        {"temperature", 0, 2, &d->temperature, PL_SAMPLING_SET_TEMPERATURE},
        {"top_p", 1e-9, 1, &d->top_p, PL_SAMPLING_SET_TOP_P},
        {"min_p", 0, 1, &d->min_p, PL_SAMPLING_SET_MIN_P},
        {"repetition_penalty", 1e-9, 10, &d->repetition_penalty,
         PL_SAMPLING_SET_REPETITION_PENALTY}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        int r = pl_hf_json_num(&j, nums[i].key, false, nums[i].lo, nums[i].hi, nums[i].out,
                               err, n);
        if (r < 0)
            goto done;
        d->set |= r == 0 ? nums[i].bit : 0;
    }
    int r = pl_hf_json_int(&j, "top_k", false, -1, 1000000, &k, err, n);
    if (r < 0)
        goto done;
    if (r == 0) {
        d->top_k = (int)k;
        d->set |= PL_SAMPLING_SET_TOP_K;
    }
    if ((r = pl_hf_json_int(&j, "max_new_tokens", false, 1, 1 << 30, &k, err, n)) < 0)
        goto done;
    if (r == 0) {
        d->max_tokens = (int)k;
        d->set |= PL_SAMPLING_SET_MAX_TOKENS;
    }
    rc = 0;
done:
    pl_hf_json_free(&j);
    return rc;
}

int pl_engine_hf_open(pl_engine_hf *h, const char *dir, const char *weight_type, int threads,
                      struct pl_tokenizer **tok, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    *tok = NULL;
    bool own = !weight_type || !strcmp(weight_type, "auto");
    int wt = own ? PL_GGML_TYPE_BF16 : pl_quantize_type_parse(weight_type);
    if (wt < 0) {
        snprintf(err, errlen, "weight type '%s' is not one parley writes (auto, %s)",
                 weight_type, pl_quantize_type_names());
        return -1;
    }
    pl_hf_opts o = {.weight_type = (pl_ggml_type)wt, .own_precision = own, .threads = threads};
    if (read_eos_(h, dir, err, errlen) < 0 || read_sampling_(h, dir, err, errlen) < 0 ||
        !(*tok = pl_tokenizer_from_hf(dir, &h->text, err, errlen)) ||
        !(h->files = pl_hf_model_open(dir, &o, err, errlen)))
        goto fail;
    int nv = pl_hf_model_n_vocab(h->files);
    if (pl_tokenizer_n_vocab(*tok) > nv) {
        snprintf(err, errlen, "%s/tokenizer.json: %d token ids, more than config.json's "
                 "vocab_size %d", dir, (int)pl_tokenizer_n_vocab(*tok), nv);
        goto fail;
    }
    return 0;
fail:
    pl_tokenizer_free(*tok);
    *tok = NULL;
    pl_engine_hf_free(h);
    return -1;
}

void pl_engine_hf_free(pl_engine_hf *h)
{
    pl_hf_model_free(h->files);
    pl_hf_text_free(&h->text);
    memset(h, 0, sizeof *h);
}

bool pl_engine_hf_is_eos(const pl_engine_hf *h, int32_t id)
{
    for (int i = 0; i < h->n_eos; i++)
        if (h->eos[i] == id)
            return true;
    return false;
}

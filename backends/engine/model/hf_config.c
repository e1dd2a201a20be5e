/* hf_config.c - the shared config.json keys in every layout transformers
 * writes (hf_config.h).
 *
 * transformers 5 moved rope_theta and rope_scaling into one rope_parameters
 * block (and, for models whose layer types rotate differently, one block per
 * layer type). A reader of the old keys alone falls back to a default base
 * on such a checkpoint and drifts quietly: a Qwen3 at 10,000 instead of
 * 1,000,000 was 0.3-1.5 nats off transformers. Hence both layouts, an error
 * when they disagree, and an error for any key left unread.
 */
#include "backends/engine/model/hf_config.h"

#include "backends/engine/families/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/engine/model/model.h"

/* Keys of a rope block, by the rope types that have them (bit per type). */
enum { R_DEFAULT = 1, R_LINEAR = 2, R_LLAMA3 = 4, R_YARN = 8, R_PROP = 16, R_ALL = 31 };

static const struct { const char *key; unsigned types; } rope_keys_[] = {
    {"rope_type", R_ALL}, {"type", R_ALL}, {"rope_theta", R_ALL},
    {"partial_rotary_factor", R_ALL}, {"factor", R_LINEAR | R_LLAMA3 | R_YARN},
    {"original_max_position_embeddings", R_LLAMA3 | R_YARN},
    {"low_freq_factor", R_LLAMA3}, {"high_freq_factor", R_LLAMA3},
    {"beta_fast", R_YARN}, {"beta_slow", R_YARN}, {"attention_factor", R_YARN},
    {"truncate", R_YARN}, {"mscale", R_YARN}, {"mscale_all_dim", R_YARN},
    /* Ministral 3's: the queries' temperature (its family reads it) and
     * the model's own max_position_embeddings */
    {"llama_4_scaling_beta", R_YARN}, {"max_position_embeddings", R_YARN},
    /* multimodal RoPE (Qwen3.5): with text positions every section rotates
     * alike; the family checks the sections */
    {"mrope_section", R_DEFAULT}, {"mrope_interleaved", R_DEFAULT},
};

/* Keys that do not change the logits whatever their value. */
static const char *const harmless_[] = {
    "architectures", "model_type", "transformers_version", "_name_or_path", "auto_map",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "use_cache", "initializer_range", "attention_dropout", "hidden_dropout", "embd_pdrop",
    "resid_pdrop", "dropout", "pretraining_tp", "is_llama_config", "transformers.js_config",
    "cache_implementation", "output_attentions", "output_hidden_states", "return_dict",
    "torchscript", "id2label", "label2id", "problem_type", "tokenizer_class", "prefix",
    "task_specific_params", "finetuning_task", "chunk_size_feed_forward", "pruned_heads",
    "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "is_decoder",
    "temperature", "top_k", "top_p", "do_sample", "max_length", "min_length", "num_beams",
    "num_beam_groups", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "early_stopping", "bad_words_ids", "num_return_sequences", "typical_p", "diversity_penalty",
    "encoder_no_repeat_ngram_size", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "output_scores", "return_dict_in_generate", "tf_legacy_loss",
    "use_bfloat16", "cross_attention_hidden_size", "max_window_layers",
    "is_matryoshka", "matryoshka_dimensions", /* the embedding backend reads them */ NULL,
};

/* Keys that leave the numbers alone only at this value (false). */
static const char *const must_be_false_[] = {
    "mlp_bias", "rope_interleaved", "use_bidirectional_attention", "use_sliding_window", NULL,
};

static int rope_type_bit_(const char *t)
{
    return !strcmp(t, "default") ? R_DEFAULT : !strcmp(t, "linear") ? R_LINEAR
         : !strcmp(t, "llama3") ? R_LLAMA3 : !strcmp(t, "yarn") ? R_YARN
         : !strcmp(t, "proportional") ? R_PROP : 0;
}

/* Where rope_parameters holds one block per layer type. */
static bool per_layer_type_(const pl_hf_json *c)
{
    return json_is_object(pl_hf_json_get(c, "rope_parameters.full_attention")) ||
           json_is_object(pl_hf_json_get(c, "rope_parameters.sliding_attention"));
}

static int num_(const pl_hf_json *c, const char *blk, const char *key, double lo, double hi,
                double *out, char *err, size_t n)
{
    char k[160];
    snprintf(k, sizeof k, "%s.%s", blk, key);
    return pl_hf_json_num(c, k, false, lo, hi, out, err, n) < 0 ? -1 : 0;
}

/* Every key of the block at blk is one its rope type has. */
static int check_block_keys_(const pl_hf_json *c, const char *blk, unsigned bit, const char *t,
                             char *err, size_t n)
{
    json_t *b = pl_hf_json_get(c, blk), *v;
    const char *k;
    json_object_foreach(b, k, v) {
        bool ok = json_is_null(v);
        for (size_t i = 0; !ok && i < sizeof rope_keys_ / sizeof *rope_keys_; i++)
            ok = !strcmp(rope_keys_[i].key, k) && (rope_keys_[i].types & bit);
        if (!ok) {
            char key[160];
            snprintf(key, sizeof key, "%s.%s", blk, k);
            return pl_hf_json_fail(c, key, err, n, "not part of rope_type '%s' as parley "
                                   "applies it", t);
        }
    }
    return 0;
}

/* transformers' get_mscale. */
static double yarn_mscale_(double factor, double mscale)
{
    return factor <= 1 ? 1 : 0.1 * mscale * log(factor) + 1;
}

static int yarn_(const pl_hf_json *c, const char *blk, pl_hf_rope *r, char *err, size_t n)
{
    double fast = 32, slow = 1, af = 0.1 * log(r->factor) + 1, ms = 0, msa = 0;
    bool trunc = true;
    char k[160];
    snprintf(k, sizeof k, "%s.truncate", blk);
    if (num_(c, blk, "beta_fast", 1e-6, 1e6, &fast, err, n) ||
        num_(c, blk, "beta_slow", 1e-6, 1e6, &slow, err, n) ||
        num_(c, blk, "mscale", 0, 1e6, &ms, err, n) ||
        num_(c, blk, "mscale_all_dim", 0, 1e6, &msa, err, n) ||
        num_(c, blk, "llama_4_scaling_beta", 0, 1e6, &r->llama4_beta, err, n))
        return -1;
    if (ms > 0 && msa > 0) {     /* transformers' attention factor from both */
        snprintf(k, sizeof k, "%s.mscale", blk);
        if (ms != 1)
            return pl_hf_json_fail(c, k, err, n, "%g: parley (as llama.cpp) takes mscale 1",
                                   ms);
        af = yarn_mscale_(r->factor, ms) / yarn_mscale_(r->factor, msa);
    }
    snprintf(k, sizeof k, "%s.truncate", blk);
    if (num_(c, blk, "attention_factor", 1e-6, 1e6, &af, err, n) ||
        pl_hf_json_bool(c, k, false, &trunc, err, n) < 0)
        return -1;
    if (fast != 32 || slow != 1)
        return pl_hf_json_fail(c, fast != 32 ? "rope_parameters.beta_fast"
                                             : "rope_parameters.beta_slow", err, n,
                               "parley's YaRN has beta_fast 32 and beta_slow 1 (%g, %g)",
                               fast, slow);
    r->yarn_exact = !trunc;
    r->attn_factor = af / (0.1 * log(r->factor) + 1);
    return 0;
}

/* The block at blk (rope_parameters, .full_attention or rope_scaling) into
 * *r: its type and factors, and its rope_theta and partial_rotary_factor
 * when it has them. */
static int read_block_(const pl_hf_json *c, const char *blk, int n_ctx, pl_hf_rope *r,
                       char *err, size_t n)
{
    const char *t = "default";
    char tk[160];
    snprintf(tk, sizeof tk, "%s.rope_type", blk);
    if (!pl_hf_json_get(c, tk))
        snprintf(tk, sizeof tk, "%s.type", blk);
    if (pl_hf_json_str(c, tk, false, &t, err, n) < 0)
        return -1;
    unsigned bit = (unsigned)rope_type_bit_(t);
    if (!bit)
        return pl_hf_json_fail(c, tk, err, n, "rope type '%s' is not supported (parley "
                               "applies default, linear, llama3, yarn and proportional)", t);
    if (check_block_keys_(c, blk, bit, t, err, n) ||
        num_(c, blk, "rope_theta", 1, 1e12, &r->theta, err, n) ||
        num_(c, blk, "partial_rotary_factor", 1e-3, 1, &r->partial, err, n))
        return -1;
    double orig = n_ctx;
    snprintf(r->type, sizeof r->type, "%s", bit == R_DEFAULT || bit == R_PROP ? "none" : t);
    r->proportional = bit == R_PROP;
    if (bit == R_DEFAULT || bit == R_PROP)
        return 0;
    char fk[160];
    snprintf(fk, sizeof fk, "%s.factor", blk);
    if (pl_hf_json_num(c, fk, true, 1e-3, 1e6, &r->factor, err, n) < 0 ||
        num_(c, blk, "low_freq_factor", 1e-6, 1e6, &r->low_freq_factor, err, n) ||
        num_(c, blk, "high_freq_factor", 1e-6, 1e6, &r->high_freq_factor, err, n) ||
        num_(c, blk, "original_max_position_embeddings", 1, 1 << 24, &orig, err, n))
        return -1;
    r->orig_ctx = (int)orig;
    return bit == R_YARN ? yarn_(c, blk, r, err, n) : 0;
}

/* An older top-level key against the value rope_parameters gave. */
static int agree_(const pl_hf_json *c, const char *old, const char *blk, const char *key,
                  double lo, double hi, double have, char *err, size_t n)
{
    double v = have;
    if (pl_hf_json_is_default(c, old) || pl_hf_json_num(c, old, false, lo, hi, &v, err, n) < 0)
        return pl_hf_json_is_default(c, old) ? 0 : -1;
    if (fabs(v - have) > 1e-9 * fabs(have))
        return pl_hf_json_fail(c, old, err, n, "%g disagrees with %s.%s %g", v, blk, key, have);
    return 0;
}

/* rope_scaling beside rope_parameters: the same type and factors. */
static int agree_scaling_(const pl_hf_json *c, const char *blk, int n_ctx, const pl_hf_rope *r,
                          char *err, size_t n)
{
    pl_hf_rope old = {.factor = 1, .low_freq_factor = 1, .high_freq_factor = 4,
                      .attn_factor = 1, .orig_ctx = n_ctx, .partial = r->partial,
                      .theta = r->theta};
    if (!pl_hf_json_get(c, "rope_scaling"))
        return 0;
    if (read_block_(c, "rope_scaling", n_ctx, &old, err, n))
        return -1;
    if (strcmp(old.type, r->type) || old.factor != r->factor ||
        old.low_freq_factor != r->low_freq_factor ||
        old.high_freq_factor != r->high_freq_factor || old.orig_ctx != r->orig_ctx)
        return pl_hf_json_fail(c, "rope_scaling", err, n, "(%s, factor %g) disagrees with %s "
                               "(%s, factor %g)", old.type, old.factor, blk, r->type,
                               r->factor);
    return 0;
}

int pl_hf_config_rope(const pl_hf_json *c, double default_theta, int n_ctx, pl_hf_rope *r,
                      char *err, size_t n)
{
    *r = (pl_hf_rope){.theta = default_theta, .type = "none", .factor = 1,
                      .low_freq_factor = 1, .high_freq_factor = 4, .attn_factor = 1,
                      .orig_ctx = n_ctx, .partial = 1};
    json_t *rp = pl_hf_json_get(c, "rope_parameters");
    if (rp && !json_is_object(rp))
        return pl_hf_json_fail(c, "rope_parameters", err, n, "must be an object");
    if (!rp) {                   /* the older layout */
        if (pl_hf_json_num(c, "rope_theta", false, 1, 1e12, &r->theta, err, n) < 0 ||
            pl_hf_json_num(c, "partial_rotary_factor", false, 1e-3, 1, &r->partial, err,
                           n) < 0)
            return -1;
        return pl_hf_json_get(c, "rope_scaling")
               ? read_block_(c, "rope_scaling", n_ctx, r, err, n) : 0;
    }
    const char *blk = per_layer_type_(c) ? "rope_parameters.full_attention" : "rope_parameters";
    if (per_layer_type_(c)) {
        const char *k;
        json_t *v;
        json_object_foreach(rp, k, v)
            if (strcmp(k, "full_attention") && strcmp(k, "sliding_attention")) {
                char key[160];
                snprintf(key, sizeof key, "rope_parameters.%s", k);
                return pl_hf_json_fail(c, key, err, n, "a layer type parley does not have "
                                       "(full_attention, sliding_attention)");
            }
    }
    if (pl_hf_json_get(c, blk) && read_block_(c, blk, n_ctx, r, err, n))
        return -1;
    if (agree_(c, "rope_theta", blk, "rope_theta", 1, 1e12, r->theta, err, n) ||
        agree_(c, "partial_rotary_factor", blk, "partial_rotary_factor", 1e-3, 1, r->partial,
               err, n) ||
        agree_scaling_(c, blk, n_ctx, r, err, n))
        return -1;
    if (pl_hf_json_get(c, "rope_parameters.sliding_attention")) {
        pl_hf_rope s = *r;
        if (r->proportional)     /* the sliding block's own part, whole by default */
            s.partial = 1;
        if (read_block_(c, "rope_parameters.sliding_attention", n_ctx, &s, err, n))
            return -1;
        if (strcmp(s.type, "none") || s.proportional ||
            (s.partial != r->partial && !r->proportional))
            return pl_hf_json_fail(c, "rope_parameters.sliding_attention", err, n, "parley's "
                                   "sliding layers take unscaled RoPE on the full layers' "
                                   "dimensions");
        r->has_swa = true;
        r->theta_swa = s.theta;
        r->partial_swa = s.partial;
    }
    return 0;
}

int pl_hf_config_swa_theta(const pl_hf_json *c, double dflt, double *out, char *err, size_t n)
{
    pl_hf_rope r;
    *out = dflt;
    if (pl_hf_json_num(c, "rope_local_base_freq", false, 1, 1e12, out, err, n) < 0 ||
        pl_hf_config_rope(c, 1, 1, &r, err, n) < 0)
        return -1;
    if (!r.has_swa)
        return 0;
    if (!pl_hf_json_is_default(c, "rope_local_base_freq") &&
        pl_hf_json_get(c, "rope_local_base_freq") && fabs(*out - r.theta_swa) > 1e-9 * *out)
        return pl_hf_json_fail(c, "rope_local_base_freq", err, n, "%g disagrees with "
                               "rope_parameters.sliding_attention.rope_theta %g", *out,
                               r.theta_swa);
    *out = r.theta_swa;
    return 0;
}

const char *pl_hf_config_dtype(const pl_hf_json *c)
{
    const char *d = json_string_value(pl_hf_json_get(c, "dtype"));
    return d ? d : json_string_value(pl_hf_json_get(c, "torch_dtype"));
}

static uint64_t u64_(const pl_gguf *g, const char *arch, const char *key, uint64_t dflt)
{
    char k[128];
    uint64_t v = dflt;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    pl_gguf_get_u64(g, k, &v);
    return v;
}

/* layer_types: "sliding_attention" exactly where the GGUF model slides. */
static int layer_types_(const pl_hf_json *c, const char *arch, const pl_arch *info,
                        const pl_gguf *g, char *err, size_t n)
{
    json_t *lt = pl_hf_json_get(c, "layer_types"), *v;
    size_t i;
    if (info->recurrent || info->kind_geometry)   /* the family's hparams read them */
        return 0;
    int nl = (int)u64_(g, arch, "block_count", 0);
    int w = (int)u64_(g, arch, "attention.sliding_window", 0);
    int p = (int)u64_(g, arch, "attention.sliding_window_pattern", info->swa_period);
    /* transformers 5's period, from which it builds layer_types when a
     * config has none (given layer_types, it is a stale default) */
    long long wp = p;
    if (pl_hf_json_int(c, "_sliding_window_pattern", false, 1, 1 << 20, &wp, err, n) < 0)
        return -1;
    for (int i = 0; i < nl && w > 0 && !lt; i++)
        if ((p == 1 || (p > 1 && i % p < p - 1)) != (wp == 1 || (wp > 1 && i % wp < wp - 1)))
            return pl_hf_json_fail(c, "_sliding_window_pattern", err, n, "%lld, but parley "
                                   "runs a full layer every %d", wp, p);
    if (!lt)
        return 0;
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)nl)
        return pl_hf_json_fail(c, "layer_types", err, n, "must list num_hidden_layers %d "
                               "layer types", nl);
    json_array_foreach(lt, i, v) {
        const char *t = json_string_value(v);
        bool slides = w > 0 && (p == 1 || (p > 1 && (int)i % p < p - 1));
        const char *want = slides ? "sliding_attention" : "full_attention";
        if (!t || strcmp(t, want))
            return pl_hf_json_fail(c, "layer_types", err, n, "layer %zu is '%s', but parley "
                                   "runs it as %s%s", i, t ? t : "?", want,
                                   w > 0 ? "" : " (no sliding window)");
    }
    return 0;
}

static int act_(const pl_hf_json *c, const pl_arch *info, char *err, size_t n)
{
    static const char *const keys[] = {"hidden_act", "hidden_activation"};
    const char *want = info->act == PL_FFN_GELU_TANH ? "gelu_pytorch_tanh" :
                       info->act == PL_FFN_GELU_ERF ? "gelu" : "silu";
    for (int i = 0; i < 2; i++) {
        const char *a = NULL;
        if (pl_hf_json_str(c, keys[i], false, &a, err, n) < 0)
            return -1;
        if (a && strcmp(a, want) && !(info->act == PL_FFN_SILU && !strcmp(a, "swish")))
            return pl_hf_json_fail(c, keys[i], err, n, "'%s': this family's feed-forward "
                                   "is %s", a, want);
    }
    return 0;
}

static int checks_(const pl_hf_json *c, char *err, size_t n)
{
    for (const char *const *k = must_be_false_; *k; k++) {
        bool on = false;
        if (pl_hf_json_bool(c, *k, false, &on, err, n) < 0)
            return -1;
        if (on)
            return pl_hf_json_fail(c, *k, err, n, "true is not supported");
    }
    /* Qwen's window applies only with use_sliding_window (false here). */
    if (pl_hf_json_get(c, "use_sliding_window"))
        pl_hf_json_get(c, "sliding_window");
    const char *d = json_string_value(pl_hf_json_get(c, "dtype"));
    const char *td = json_string_value(pl_hf_json_get(c, "torch_dtype"));
    if (d && td && strcmp(d, td))
        return pl_hf_json_fail(c, "dtype", err, n, "'%s' disagrees with torch_dtype '%s'", d,
                               td);
    return 0;
}

int pl_hf_config_finish(const pl_hf_json *c, const char *gguf_arch, const pl_hf_rope *rope,
                        pl_gguf_synth *s, char *err, size_t n)
{
    const pl_family *fam = pl_family_find(gguf_arch, strlen(gguf_arch));
    const pl_gguf *g = pl_gguf_synth_view(s);
    char k[128];
    if (!fam)
        return snprintf(err, n, "%s: no model family", gguf_arch), -1;
    const pl_arch *info = &fam->model;
    snprintf(k, sizeof k, "%s.rope.freq_base_swa", gguf_arch);
    if (rope->has_swa && !pl_gguf_find(g, k) && rope->theta_swa != rope->theta)
        return pl_hf_json_fail(c, "rope_parameters.sliding_attention.rope_theta", err, n,
                               "%g: this family's sliding layers rotate as its full ones "
                               "(%g)", rope->theta_swa, rope->theta);
    if (layer_types_(c, gguf_arch, info, g, err, n) || act_(c, info, err, n) ||
        checks_(c, err, n))
        return -1;
    const char *u = pl_hf_json_unread(c, harmless_);
    if (u)
        return pl_hf_json_fail(c, u, err, n, "parley does not read it, and it may change the "
                               "model's numbers");
    return 0;
}

/* family_hf.c - the shared config.json readers and rules of the family
 * files (family.h): the pieces two or more families' HF mappings use. */
#include "backends/engine/families/family.h"

#include <math.h>
#include <stdio.h>

int pl_family_hf_int(const pl_hf_json *c, const char *key, bool req, long long lo,
                     long long hi, int dflt, int *out, char *err, size_t n)
{
    long long v = dflt;
    int rc = pl_hf_json_int(c, key, req, lo, hi, &v, err, n);
    *out = (int)v;
    return rc < 0 ? -1 : 0;
}

int pl_family_hf_num(const pl_hf_json *c, const char *key, double lo, double hi,
                     double dflt, double *out, char *err, size_t n)
{
    *out = dflt;
    return pl_hf_json_num(c, key, false, lo, hi, out, err, n) < 0 ? -1 : 0;
}

int pl_family_hf_put_u32(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, int v,
                         char *err, size_t n)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", a->gguf, key);
    if (pl_gguf_synth_u32(s, k, (uint32_t)v))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

int pl_family_hf_put_f32(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, double v,
                         char *err, size_t n)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", a->gguf, key);
    if (pl_gguf_synth_f32(s, k, (float)v))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

int pl_family_hf_no_window(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                           pl_gguf_synth *s, char *err, size_t n)
{
    bool on = false;
    (void)sh, (void)s;
    if (pl_hf_json_bool(c, "use_sliding_window", false, &on, err, n) < 0)
        return -1;
    if (on)
        return pl_hf_json_fail(c, "use_sliding_window", err, n, "sliding-window attention "
                               "is not supported for %s", a->hf_name);
    return 0;
}

int pl_family_hf_query_scale(const pl_hf_json *c, const pl_hf_shape *sh, int wide, char *err,
                             size_t n)
{
    double q = sh->head_dim;
    if (pl_family_hf_num(c, "query_pre_attn_scalar", 1e-6, 1e9, sh->head_dim, &q, err, n))
        return -1;
    double want = sh->n_layer == wide ? (double)sh->n_embd / sh->n_head : sh->head_dim;
    if (fabs(q - want) > 1e-6)
        return pl_hf_json_fail(c, "query_pre_attn_scalar", err, n, "%g: the GGUF model "
                               "scales queries by 1/sqrt(%g)", q, want);
    return 0;
}

/* The expert count: num_experts (transformers 4) or num_local_experts
 * (transformers 5 writes it for Qwen3-MoE too); both must agree. */
static int expert_count_(const pl_hf_json *c, int *out, char *err, size_t n)
{
    int a = 0, b = 0;
    if (pl_family_hf_int(c, "num_experts", false, 1, PL_MOE_MAX_EXPERTS, 0, &a, err, n) ||
        pl_family_hf_int(c, "num_local_experts", false, 1, PL_MOE_MAX_EXPERTS, 0, &b, err, n))
        return -1;
    if (a && b && a != b)
        return pl_hf_json_fail(c, "num_local_experts", err, n, "%d disagrees with num_experts "
                               "%d", b, a);
    if (!a && !b)
        return pl_hf_json_fail(c, "num_local_experts", err, n, "missing (or num_experts): "
                               "the experts per layer");
    *out = a ? a : b;
    return 0;
}

int pl_family_hf_experts(const pl_hf_arch *a, const pl_hf_json *c, const char *width_key,
                         pl_hf_shape *sh, pl_gguf_synth *s, char *err, size_t n)
{
    int used;
    if (expert_count_(c, &sh->n_expert, err, n) ||
        pl_family_hf_int(c, "num_experts_per_tok", true, 1,
                         sh->n_expert < PL_MOE_MAX_USED ? sh->n_expert : PL_MOE_MAX_USED, 0,
                         &used, err, n) ||
        pl_family_hf_int(c, width_key, true, 1, 1 << 22, 0, &sh->n_ff_exp, err, n))
        return -1;
    /* router losses and logits are for training only */
    pl_hf_json_get(c, "router_aux_loss_coef");
    pl_hf_json_get(c, "output_router_logits");
    return pl_family_hf_put_u32(s, a, "expert_count", sh->n_expert, err, n) ||
           pl_family_hf_put_u32(s, a, "expert_used_count", used, err, n) ||
           pl_family_hf_put_u32(s, a, "expert_feed_forward_length", sh->n_ff_exp, err, n)
           ? -1 : 0;
}

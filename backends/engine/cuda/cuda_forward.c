/* cuda_forward.c - one step's forward pass and sampling, enqueued on the
 * compute stream: feedback, embedding, per layer (norm, fused QKV GEMM,
 * RoPE, KV write, attention (sinks: gpt-oss), output GEMM (and its bias),
 * fused add+norm, gate/up GEMM,
 * SwiGLU, down GEMM; or with experts the block of moe_ffn), final norm of
 * each sequence's last row, LM head, penalties and sampling. Only device addresses fixed at creation are
 * used, so a decode-only step can be captured in a graph and replayed. */
#include <math.h>

#include "backends/engine/cuda/add.cuh"
#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/attn_plan.h"
#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/constrain.cuh"
#include "backends/engine/cuda/cuda_runner_internal.h"
#include "backends/engine/cuda/embed.cuh"
#include "backends/engine/cuda/feedback.cuh"
#include "backends/engine/cuda/geglu.cuh"
#include "backends/engine/cuda/head_norm.cuh"
#include "backends/engine/cuda/moe_gemm.cuh"
#include "backends/engine/cuda/moe_plan.cuh"
#include "backends/engine/cuda/moe_route.cuh"
#include "backends/engine/cuda/softcap.cuh"
#include "backends/engine/cuda/prompt_lp.cuh"
#include "backends/engine/cuda/rmsnorm.cuh"
#include "backends/engine/cuda/rope.cuh"
#include "backends/engine/cuda/swiglu.cuh"

pl_kv_layer pl_cuda_kv_layer(const cuda_runner *r, int l)
{
    size_t nkv = (size_t)r->n_head_kv;
    pl_kv_layer kv = {.k = r->kv + (size_t)(2 * l) * r->layer_bytes,
                      .v = r->kv + (size_t)(2 * l + 1) * r->layer_bytes};
    if (r->kv_scale) {
        kv.k_scale = r->kv_scale + (size_t)(2 * l) * nkv;
        kv.v_scale = r->kv_scale + (size_t)(2 * l + 1) * nkv;
    }
    return kv;
}

int pl_cuda_split_count(const cuda_runner *r, int n_rows)
{
    return pl_cuda_attn_split_plan(n_rows * r->n_head_kv, r->split_bpsm, r->n_sm,
                                   PL_ATTN_MAX_SPLITS);
}

/* Decode attention of n rows (rows: a row list, or NULL for 0..n). */
static int decode_attn(cuda_runner *r, const pl_attn_step *as, pl_kv_layer kv,
                       pl_attn_opts o, const int32_t *rows, int n)
{
    if (r->split_kv)
        return pl_cuda_attn_decode_split(as, r->geom, kv, o, rows, n, pl_cuda_split_count(r, n),
                                         r->split_ws, r->split_kind, r->cs);
    return pl_cuda_attn_decode_rows(as, r->geom, kv, o, rows, n, r->cs);
}

static int attention(cuda_runner *r, int l, const cr_step *st)
{
    pl_kv_layer kv = pl_cuda_kv_layer(r, l);
    const cr_io *d = &r->dio;
    if (pl_cuda_kv_write(r->qkv, r->qkv_dim, r->q_dim, r->q_dim + r->kv_dim, d->positions,
                         d->row_seq, d->bt, r->geom, kv, st->n_rows, r->cs) != 0)
        return -1;
    pl_cuda_prof_mark(r, CR_PH_KV_WRITE);
    pl_attn_step as = {.q = r->qkv, .q_stride = r->qkv_dim, .n_heads = r->n_head,
                       .positions = d->positions, .row_seq = d->row_seq,
                       .block_table = d->bt, .out = r->att};
    pl_attn_opts o = r->attn;
    o.window = r->w.layers[l].n_swa;
    o.sinks = r->w.layers[l].sinks;
    int rc;
    if (st->max_seq_rows <= 1) {
        rc = decode_attn(r, &as, kv, o, NULL, st->n_rows);
        pl_cuda_prof_mark(r, CR_PH_ATTN_DEC);
        return rc;
    }
    /* Mixed: decode rows through the decode kernel, the rest in tiles. */
    bool mixed = st->n_dec > 0;
    if (mixed) {
        if (decode_attn(r, &as, kv, o, d->dec_rows, st->n_dec) != 0)
            return -1;
        pl_cuda_prof_mark(r, CR_PH_ATTN_DEC);
    }
    rc = pl_cuda_attn_prefill_seqs(&as, r->geom, kv, o, mixed ? d->pf_seqs : NULL,
                                   d->first_row, d->n_rows, mixed ? st->n_pf : st->n_seqs,
                                   mixed ? st->pf_max_rows : st->max_seq_rows, r->prefill_mma,
                                   r->cs);
    pl_cuda_prof_mark(r, CR_PH_ATTN_PF);
    return rc;
}

/* One call, then the phase mark (a no-op unless profiling). */
#define PH(call, ph) do { if ((call) != 0) return -1; pl_cuda_prof_mark(r, ph); } while (0)

/* q/k RMSNorm per head (qwen3, gemma3), then RoPE with the layer's table
 * (and YaRN's scale: gpt-oss). */
static int qk_norm_rope(cuda_runner *r, const pl_cuda_layer *L, int n)
{
    if (L->q_norm && pl_cuda_head_rmsnorm(r->qkv, r->qkv_dim, n, r->n_head, r->head_dim,
                                          L->q_norm, r->rms_eps, r->cs) != 0)
        return -1;
    if (L->k_norm && pl_cuda_head_rmsnorm(r->qkv + r->q_dim, r->qkv_dim, n, r->n_head_kv,
                                          r->head_dim, L->k_norm, r->rms_eps, r->cs) != 0)
        return -1;
    return pl_cuda_rope(r->qkv, r->dio.positions, n, r->qkv_dim, r->n_head + r->n_head_kv,
                        r->head_dim, r->n_rot, L->rope_inv_freq, r->rope_mscale,
                        r->rope_neox ? PL_ROPE_MODE_NEOX : PL_ROPE_MODE_NORM, r->cs);
}

/* x += post ? rmsnorm(y) * post : y, then xb = rmsnorm(x) * w. */
static int residual_norm(cuda_runner *r, const float *post, const float *w, int n)
{
    return post ? pl_cuda_add_post_rmsnorm(r->x, r->y, post, w, r->xb, n, r->n_embd,
                                           r->rms_eps, r->cs)
                : pl_cuda_add_rmsnorm(r->x, r->y, w, r->xb, n, r->n_embd, r->rms_eps, r->cs);
}

/* A layer's experts on its FFN-normed rows (xb, and again in fp32 for the
 * router: the CPU runner routes on fp32 rows): router logits, each row's
 * top-k and weights, the (row, rank) pairs grouped by expert, each place's
 * input row, gate and up of every place on its expert, the activation,
 * down, then y[r] = the weighted sum of row r's outputs in rank order (as
 * pl_op_moe_combine). Nothing is read back: the GEMMs' grids cover the
 * most tiles n rows can have (a bound fixed per step size, so graphs
 * replay it) and the plan's device-side tile count stops the rest. */
static int moe_ffn(cuda_runner *r, const pl_cuda_layer *L, int n)
{
    int E = r->n_embd, k = r->n_expert_used, P = n * k;
    pl_cuda_moe_plan p = r->moe_plan;
    p.max_tiles = pl_cuda_moe_max_tiles(P, r->n_expert);
    if (pl_cuda_rmsnorm_f32(r->x, L->ffn_norm, r->moe_xf, n, E, r->rms_eps, r->cs) != 0
        || pl_cuda_moe_logits(r->moe_xf, L->router, L->router_b, r->moe_logits, n, E,
                              r->n_expert, r->cs) != 0)
        return -1;
    PH(pl_cuda_moe_route(r->moe_logits, n, r->n_expert, k, r->moe_topk_softmax, r->moe_norm_w,
                         NULL, r->moe_sel, r->moe_wt, r->cs), CR_PH_MOE_ROUTE);
    if (pl_cuda_moe_group(r->moe_sel, P, k, r->n_expert, &p, r->cs) != 0
        || pl_cuda_moe_permute(r->xb, p.row_of, r->moe_xp, P, E, r->cs) != 0
        || pl_cuda_moe_gemm(&L->gate_exps, r->moe_xp, r->moe_g, &p, r->cs) != 0
        || pl_cuda_moe_gemm(&L->up_exps, r->moe_xp, r->moe_u, &p, r->cs) != 0
        || pl_cuda_moe_act(r->moe_g, r->moe_u, r->moe_h, P, r->n_ff_exp, r->moe_act,
                           r->cs) != 0
        || pl_cuda_moe_gemm(&L->down_exps, r->moe_h, r->moe_y, &p, r->cs) != 0)
        return -1;
    PH(pl_cuda_moe_combine(r->moe_y, p.slot_of, r->moe_wt, r->y, n, k, E, r->cs),
       CR_PH_MOE_FFN);
    return 0;
}

static int layer(cuda_runner *r, int l, const cr_step *st)
{
    const pl_cuda_layer *L = &r->w.layers[l];
    int n = st->n_rows, E = r->n_embd;
    PH(l == 0 ? pl_cuda_rmsnorm(r->x, NULL, L->attn_norm, r->xb, n, E, r->rms_eps, r->cs)
              : residual_norm(r, r->w.layers[l - 1].ffn_post_norm, L->attn_norm, n),
       CR_PH_NORM);
    if (pl_cuda_gemm_bf16(r->gemm, r->xb, L->wqkv, r->qkv, n, r->qkv_dim, E) != 0)
        return -1;
    PH(L->bqkv ? pl_cuda_add_bias(r->qkv, L->bqkv, n, r->qkv_dim, r->cs) : 0, CR_PH_QKV);
    PH(qk_norm_rope(r, L, n), CR_PH_ROPE);
    if (attention(r, l, st) != 0)
        return -1;
    if (pl_cuda_gemm_bf16(r->gemm, r->att, L->wo, r->y, n, E, r->q_dim) != 0)
        return -1;
    PH(L->bo ? pl_cuda_add_bias(r->y, L->bo, n, E, r->cs) : 0, CR_PH_O);
    PH(residual_norm(r, L->attn_post_norm, L->ffn_norm, n), CR_PH_NORM);
    if (r->n_expert > 0)
        return moe_ffn(r, L, n);
    PH(pl_cuda_gemm_bf16(r->gemm, r->xb, L->w_gu, r->gu, n, 2 * r->n_ff, E), CR_PH_GATE_UP);
    PH(r->geglu ? pl_cuda_geglu(r->gu, r->act, n, r->n_ff, r->cs)
                : pl_cuda_swiglu(r->gu, r->act, n, r->n_ff, r->cs), CR_PH_SWIGLU);
    PH(pl_cuda_gemm_bf16(r->gemm, r->act, L->w_down, r->y, n, E, r->n_ff), CR_PH_DOWN);
    return 0;
}

/* The logits of n rows (xl) and their soft-capping (gemma2). */
static int lm_head(cuda_runner *r, int n)
{
    if (pl_cuda_gemm_bf16(r->gemm, r->xl, r->w.output, r->logits, n, r->n_vocab, r->n_embd)
        != 0)
        return -1;
    return r->final_softcap > 0.0f
        ? pl_cuda_softcap(r->logits, (size_t)n * r->n_vocab, r->final_softcap, r->cs) : 0;
}

static int head_and_sample(cuda_runner *r, const cr_step *st)
{
    const cr_io *d = &r->dio;
    int E = r->n_embd;
    const float *post = r->w.layers[r->n_layer - 1].ffn_post_norm;
    if ((post ? pl_cuda_add_post_rmsnorm(r->x, r->y, post, NULL, NULL, st->n_rows, E,
                                         r->rms_eps, r->cs)
              : pl_cuda_add(r->x, r->y, (size_t)st->n_rows * E, r->cs)) != 0)
        return -1;
    PH(pl_cuda_rmsnorm(r->x, d->last_row, r->w.output_norm, r->xl, st->n_seqs, E,
                       r->rms_eps, r->cs), CR_PH_NORM);
    PH(lm_head(r, st->n_seqs), CR_PH_HEAD);
    if (pl_cuda_penalties(r->logits, r->pen, d->samp, d->bias_tok, d->bias_val, d->hist,
                          d->tokens, st->n_seqs, r->n_vocab, r->base.info.eos_id,
                          r->cs) != 0
        || pl_cuda_constrain(r->pen, d->samp, d->tokens, NULL, st->n_seqs, r->n_vocab,
                             r->base.info.eos_id, r->cs) != 0
        || pl_cuda_sample(r->logits, r->pen, d->samp, r->sout, st->n_seqs, r->n_vocab,
                          r->cs) != 0)
        return -1;
    pl_cuda_prof_mark(r, CR_PH_SAMPLE);
    return 0;
}

int pl_cuda_prompt_logprobs(cuda_runner *r, const cr_step *st, cr_plp out)
{
    const cr_io *d = &r->dio;
    int S = r->max_seqs, E = r->n_embd;
    for (int c0 = 0; c0 < st->n_lp; c0 += S) {
        int n = st->n_lp - c0 < S ? st->n_lp - c0 : S;
        if (pl_cuda_rmsnorm(r->x, d->lp_rows + c0, r->w.output_norm, r->xl, n, E, r->rms_eps,
                            r->cs) != 0
            || lm_head(r, n) != 0
            || pl_cuda_row_logprobs(r->logits, n, r->n_vocab, d->lp_next + c0, d->lp_top + c0,
                                    out.lp + c0, out.top_ids + (size_t)c0 * PL_CUDA_TOPN,
                                    out.top_lp + (size_t)c0 * PL_CUDA_TOPN, r->cs) != 0)
            return -1;
    }
    return 0;
}

int pl_cuda_forward(cuda_runner *r, const cr_step *st)
{
    const cr_io *d = &r->dio;
    pl_cuda_prof_mark(r, CR_PH_START);
    if (pl_cuda_feedback(d->tokens, d->row_seq, d->seq_slot, r->slot_tok, r->max_seqs,
                         st->n_rows, PL_TOKEN_PLACEHOLDER, r->cs) != 0)
        return -1;
    PH(pl_cuda_embed(r->w.tok_embd, d->tokens, r->x, st->n_rows, r->n_embd, r->n_vocab,
                     r->embd_scale, r->cs), CR_PH_EMBED);
    for (int l = 0; l < r->n_layer; l++)
        if (layer(r, l, st) != 0)
            return -1;
    int rc = head_and_sample(r, st);
    pl_cuda_prof_step_end(r);
    return rc;
}

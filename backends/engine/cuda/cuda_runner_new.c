/* cuda_runner_new.c - creating and destroying the CUDA runner: geometry,
 * streams, cuBLAS, weights, activations, input/output buffers, and the KV
 * cache sized from what gpu_mem_util of the device leaves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/attn_plan.h"
#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/cuda_runner_internal.h"
#include "backends/engine/cuda/moe_route.cuh"
#include "src/base/log.h"

extern const pl_runner_ops pl_cuda_runner_ops_;
void pl_cuda_runner_destroy_(cuda_runner *r);

#define TRY(call) do { if (pl_cuda_check_((call), __FILE__, __LINE__)) return -1; } while (0)

static int fill_geometry(cuda_runner *r, const pl_model *m, const pl_runner_info *want)
{
    pl_runner_info *inf = &r->base.info;
    if (pl_runner_info_init(inf, m, want) != 0)
        return pl_cuda_fail_(__FILE__, __LINE__, "max_seqs, max_rows and max_model_len "
                             "must be positive");
    r->n_layer = m->n_layer;
    r->n_embd = m->n_embd;
    r->n_head = m->n_head;
    r->n_head_kv = m->n_head_kv;
    r->head_dim = m->head_dim;
    r->n_ff = m->n_ff;
    r->n_vocab = m->n_vocab;
    r->n_rot = m->n_rot;
    r->rms_eps = m->rms_eps;
    r->rope_neox = m->rope_neox;
    r->rope_mscale = m->rope_mscale > 0.0f ? m->rope_mscale : 1.0f;
    r->q_dim = m->n_head * m->head_dim;
    r->kv_dim = m->n_head_kv * m->head_dim;
    r->qkv_dim = r->q_dim + 2 * r->kv_dim;
    r->max_rows = inf->max_rows;
    r->max_seqs = inf->max_seqs;
    r->mbps = (inf->max_model_len + inf->block_size - 1) / inf->block_size;
    r->bias_cap = r->max_seqs * CR_BIAS_PER_SEQ;
    int per = CR_HIST_IDS / r->max_seqs > CR_HIST_PER_SEQ ? CR_HIST_IDS / r->max_seqs
                                                          : CR_HIST_PER_SEQ;
    r->hist_per_seq = inf->max_model_len < per ? inf->max_model_len : per;
    r->hist_cap = r->max_seqs * r->hist_per_seq;
    if (r->head_dim % 64 != 0 || r->head_dim > 256 || r->n_head % r->n_head_kv != 0)
        return pl_cuda_fail_(__FILE__, __LINE__, "head_dim %d / heads %d:%d unsupported by "
                             "the CUDA attention kernels", r->head_dim, r->n_head,
                             r->n_head_kv);
    for (int l = 0; l < m->n_layer; l++)
        if (pl_layer_ff(m, &m->layers[l]) != m->n_ff)
            return pl_cuda_fail_(__FILE__, __LINE__, "layer %d's FFN width %d differs from "
                                 "%d: per-layer widths are not in the CUDA runner yet", l,
                                 pl_layer_ff(m, &m->layers[l]), m->n_ff);
    if (inf->block_size & (inf->block_size - 1))
        return pl_cuda_fail_(__FILE__, __LINE__, "--block-size %d: the CUDA runner's KV "
                             "blocks are a power of two (8, 16, 32, ...)", inf->block_size);
    /* The model's attention and head (model.h: every number from the file;
     * the window is each layer's, pl_cuda_layer.n_swa). */
    r->attn = (pl_attn_opts){.scale = m->attn_scale, .softcap = m->attn_softcap};
    r->final_softcap = m->final_softcap;
    r->embd_scale = m->embd_scale;
    r->geglu = m->ffn_act == PL_FFN_GELU_TANH;
    r->n_expert = m->n_expert;
    r->n_expert_used = m->n_expert_used;
    r->n_ff_exp = m->n_ff_exp;
    r->moe_act = (int)m->ffn_act;
    r->moe_topk_softmax = m->moe_gating == PL_MOE_TOPK_SOFTMAX;
    r->moe_norm_w = m->moe_norm_w;
    if (r->n_expert > 0 && (r->n_expert > PL_CUDA_MOE_MAX_EXPERTS || r->n_expert_used < 1
                            || r->n_expert_used > r->n_expert
                            || r->n_expert_used > PL_CUDA_MOE_MAX_USED
                            || r->n_embd % 32 != 0 || r->n_ff_exp % 32 != 0))
        return pl_cuda_fail_(__FILE__, __LINE__, "%d experts (%d per token) of width %d over "
                             "%d: the CUDA expert kernels take <= %d experts, <= %d per token "
                             "and widths that are multiples of 32", r->n_expert,
                             r->n_expert_used, r->n_ff_exp, r->n_embd,
                             PL_CUDA_MOE_MAX_EXPERTS, PL_CUDA_MOE_MAX_USED);
    if (!pl_attn_opts_ok(r->attn) || r->final_softcap < 0.0f || !(r->embd_scale > 0.0f))
        return pl_cuda_fail_(__FILE__, __LINE__, "attention scale %g / soft-caps %g, %g / "
                             "embedding scale %g out of range", r->attn.scale,
                             r->attn.softcap, r->final_softcap, r->embd_scale);
    return 0;
}

/* The expert buffers for max_rows rows: the router's, the plan's and the
 * places' (pairs = max_rows * n_expert_used). */
static int alloc_moe(cuda_runner *r)
{
    if (r->n_expert == 0)
        return 0;
    size_t R = (size_t)r->max_rows, E = (size_t)r->n_embd, X = (size_t)r->n_expert;
    size_t P = R * (size_t)r->n_expert_used, F = (size_t)r->n_ff_exp;
    pl_cuda_moe_plan *p = &r->moe_plan;
    if (P > 0x7fffffff / (E > F ? E : F))
        return pl_cuda_fail_(__FILE__, __LINE__, "%zu expert places: too many", P);
    p->max_tiles = pl_cuda_moe_max_tiles((int)P, r->n_expert);
    if (p->max_tiles > 65535)
        return pl_cuda_fail_(__FILE__, __LINE__, "--max-num-batched-tokens %zu with %d experts "
                             "per token: over the grouped GEMM's 65535 tiles", R,
                             r->n_expert_used);
    TRY(cudaMalloc((void **)&r->moe_xf, R * E * 4));
    TRY(cudaMalloc((void **)&r->moe_logits, R * X * 4));
    TRY(cudaMalloc((void **)&r->moe_sel, P * 4));
    TRY(cudaMalloc((void **)&r->moe_wt, P * 4));
    TRY(cudaMalloc((void **)&p->counts, X * 4));
    TRY(cudaMalloc((void **)&p->offsets, (X + 1) * 4));
    TRY(cudaMalloc((void **)&p->slot_of, P * 4));
    TRY(cudaMalloc((void **)&p->row_of, P * 4));
    TRY(cudaMalloc((void **)&p->tile_e, (size_t)p->max_tiles * 4));
    TRY(cudaMalloc((void **)&p->tile_p0, (size_t)p->max_tiles * 4));
    TRY(cudaMalloc((void **)&p->n_tiles, 4));
    TRY(cudaMalloc((void **)&r->moe_xp, P * E * 2));
    TRY(cudaMalloc((void **)&r->moe_g, P * F * 4));
    TRY(cudaMalloc((void **)&r->moe_u, P * F * 4));
    TRY(cudaMalloc((void **)&r->moe_h, P * F * 2));
    TRY(cudaMalloc((void **)&r->moe_y, P * E * 4));
    return 0;
}

static int alloc_activations(cuda_runner *r)
{
    size_t R = (size_t)r->max_rows, S = (size_t)r->max_seqs, E = (size_t)r->n_embd;
    if (alloc_moe(r) != 0)
        return -1;
    TRY(cudaMalloc((void **)&r->x, R * E * 4));
    TRY(cudaMalloc((void **)&r->y, R * E * 4));
    TRY(cudaMalloc((void **)&r->qkv, R * (size_t)r->qkv_dim * 4));
    TRY(cudaMalloc((void **)&r->gu, R * 2 * (size_t)r->n_ff * 4));
    TRY(cudaMalloc((void **)&r->logits, S * (size_t)r->n_vocab * 4));
    TRY(cudaMalloc((void **)&r->pen, S * (size_t)r->n_vocab * 4));
    TRY(cudaMalloc((void **)&r->xb, R * E * 2));
    TRY(cudaMalloc((void **)&r->att, R * (size_t)r->q_dim * 2));
    TRY(cudaMalloc((void **)&r->act, R * (size_t)r->n_ff * 2));
    TRY(cudaMalloc((void **)&r->xl, S * E * 2));
    TRY(cudaMalloc((void **)&r->slot_tok, S * 4));
    TRY(cudaMemset(r->slot_tok, 0, S * 4));
    TRY(cudaDeviceGetAttribute(&r->n_sm, cudaDevAttrMultiProcessorCount, 0));
    if (r->split_kv) {  /* the largest workspace any batch size asks for */
        r->split_bpsm = pl_cuda_attn_split_occupancy(r->split_kind, r->n_head, r->n_head_kv,
                                                     r->head_dim, r->geom.dtype);
        if (r->split_bpsm < 0)
            return -1;
        size_t ws = 0;
        for (int n = 1; n <= r->max_rows; n++) {
            size_t w = pl_cuda_attn_split_ws(n, r->n_head, r->head_dim,
                                             pl_cuda_split_count(r, n));
            ws = w > ws ? w : ws;
        }
        if (ws > 0)
            TRY(cudaMalloc((void **)&r->split_ws, ws * sizeof(float)));
    }
    return 0;
}

/* The output block: sampled (S), logprob (S), top_ids (S, 20), top_lp (S, 20). */
static void map_out(void *base, int S, pl_cuda_samp_out *o, pl_step_output *so)
{
    int32_t *b = base;
    pl_cuda_samp_out t = {.sampled = b, .logprob = (float *)(b + S),
                          .top_ids = b + 2 * S,
                          .top_lp = (float *)(b + 2 * S + S * PL_CUDA_TOPN)};
    if (o)
        *o = t;
    if (so) {
        so->sampled = t.sampled;
        so->logprob = t.logprob;
        so->top_ids = t.top_ids;
        so->top_logprobs = t.top_lp;
    }
}

/* Prompt logprobs of a slot: compact device and pinned blocks, and the
 * row-indexed arrays of the step output. */
static int alloc_plp(cuda_runner *r, cr_slot *s)
{
    size_t R = (size_t)r->max_rows, n = pl_cuda_plp_map(&s->dplp, NULL, r->max_rows);
    TRY(cudaMalloc(&s->d_plp, n));
    TRY(cudaHostAlloc(&s->h_plp, n, cudaHostAllocDefault));
    pl_cuda_plp_map(&s->dplp, s->d_plp, r->max_rows);
    pl_cuda_plp_map(&s->hplp, s->h_plp, r->max_rows);
    s->out.row_lp = malloc(R * sizeof(float));
    s->out.row_top_ids = malloc(R * PL_CUDA_TOPN * sizeof(int32_t));
    s->out.row_top_lp = malloc(R * PL_CUDA_TOPN * sizeof(float));
    if (!s->out.row_lp || !s->out.row_top_ids || !s->out.row_top_lp)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of memory");
    return 0;
}

static int alloc_io(cuda_runner *r)
{
    cr_io tmp;
    r->io_bytes = pl_cuda_io_map(&tmp, NULL, r->max_rows, r->max_seqs, r->mbps,
                                 r->bias_cap, r->hist_cap);
    r->out_bytes = (size_t)r->max_seqs * (2 + 2 * PL_CUDA_TOPN) * 4;
    TRY(cudaMalloc(&r->d_in, r->io_bytes));
    pl_cuda_io_map(&r->dio, r->d_in, r->max_rows, r->max_seqs, r->mbps, r->bias_cap,
                   r->hist_cap);
    TRY(cudaMalloc(&r->d_out, r->out_bytes));
    map_out(r->d_out, r->max_seqs, &r->sout, NULL);
    r->sout.slot_tok = r->slot_tok;
    r->sout.max_slots = r->max_seqs;
    for (int i = 0; i < PL_RUNNER_MAX_INFLIGHT; i++) {
        cr_slot *s = &r->slot[i];
        TRY(cudaHostAlloc(&s->h_in, r->io_bytes, cudaHostAllocDefault));
        pl_cuda_io_map(&s->hio, s->h_in, r->max_rows, r->max_seqs, r->mbps, r->bias_cap,
                       r->hist_cap);
        TRY(cudaMalloc(&s->d_out, r->out_bytes));
        TRY(cudaHostAlloc(&s->h_out, r->out_bytes, cudaHostAllocDefault));
        map_out(s->h_out, r->max_seqs, NULL, &s->out);
        if (alloc_plp(r, s) != 0)
            return -1;
        TRY(cudaEventCreateWithFlags(&s->in_done, cudaEventDisableTiming));
        TRY(cudaEventCreateWithFlags(&s->computed, cudaEventDisableTiming));
        TRY(cudaEventCreateWithFlags(&s->out_ready, cudaEventDisableTiming));
        TRY(cudaEventCreate(&s->t0));
        TRY(cudaEventCreate(&s->t1));
    }
    return 0;
}

/* KV blocks from the memory left under gpu_mem_util (less the input
 * block, allocated after), plus one spare block that padding rows write
 * to. max_model_len 0 asked for: the model's context, capped by what the
 * cache holds; the blocks per sequence follow. */
static int alloc_kv(cuda_runner *r, float util, int want_blocks, bool len_asked)
{
    pl_runner_info *inf = &r->base.info;
    size_t free_b = 0, total_b = 0;
    TRY(cudaMemGetInfo(&free_b, &total_b));
    r->block_bytes = (size_t)inf->block_size * r->kv_dim * pl_kv_elem_bytes(r->geom.dtype);
    size_t per_block = 2 * (size_t)r->n_layer * r->block_bytes;
    cr_io tmp;
    cr_plp tp;
    size_t io = (pl_cuda_io_map(&tmp, NULL, r->max_rows, r->max_seqs, r->mbps, r->bias_cap,
                                r->hist_cap) + pl_cuda_plp_map(&tp, NULL, r->max_rows))
                * (1 + PL_RUNNER_MAX_INFLIGHT);
    double budget = (double)total_b * util - (double)(total_b - free_b) - (double)io;
    long long nb = budget > 0 ? (long long)(budget / (double)per_block) - 1 : 0;
    if (want_blocks > 0 && nb > want_blocks)
        nb = want_blocks;
    if (nb > (1LL << 30))
        nb = 1LL << 30;
    if (nb < 1)
        return pl_cuda_fail_(__FILE__, __LINE__, "no GPU memory left for the KV cache "
                             "(%.1f GiB free of %.1f; gpu_memory_utilization %.2f)",
                             free_b / 1073741824.0, total_b / 1073741824.0, util);
    inf->num_blocks = (int)nb;
    long long cap = nb * inf->block_size;
    if (!len_asked && cap < inf->max_model_len) {
        inf->max_model_len = (int)cap;
        r->mbps = (int)nb;
    }
    r->geom = (pl_kv_geom){.n_kv_heads = r->n_head_kv, .head_dim = r->head_dim,
                           .block_size = inf->block_size, .max_blocks_per_seq = r->mbps,
                           .n_blocks = (int)nb + 1, .dtype = r->geom.dtype};
    r->layer_bytes = (size_t)(nb + 1) * r->block_bytes;
    TRY(cudaMalloc((void **)&r->kv, 2 * (size_t)r->n_layer * r->layer_bytes));
    return 0;
}

/* fp8: the dequantisation scales, (n_layer, K|V, n_head_kv), all 1 as
 * vLLM keeps them for a checkpoint that brings none (GGUF files bring
 * none). Stored e4m3 = bf16 value / scale: values beyond +-448 saturate. */
static int alloc_kv_scales(cuda_runner *r)
{
    if (r->geom.dtype != PL_KV_FP8)
        return 0;
    size_t n = 2 * (size_t)r->n_layer * r->n_head_kv;
    float *ones = malloc(n * sizeof(float));
    if (!ones)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of memory");
    for (size_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    cudaError_t e = cudaMalloc((void **)&r->kv_scale, n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(r->kv_scale, ones, n * sizeof(float), cudaMemcpyHostToDevice);
    free(ones);
    return pl_cuda_check_(e, __FILE__, __LINE__);
}

/* The attention kernels asked for, where the shape has them: a split kind
 * without a kernel for the shape falls back to the warp kernel, then to
 * one block per row (said once in the log). */
static void pick_attention(cuda_runner *r, const pl_cuda_opts *o)
{
    r->geom.dtype = o->kv_cache_dtype == PL_CUDA_KV_FP8 || o->kv_cache_dtype == PL_CUDA_KV_FP8_E4M3
                    ? PL_KV_FP8 : PL_KV_BF16;
    r->split_kind = o->decode_attn == PL_CUDA_DECODE_SPLIT16 ? PL_SPLIT_HALF
                  : o->decode_attn == PL_CUDA_DECODE_MMA ? PL_SPLIT_MMA : PL_SPLIT_WARP;
    r->split_kv = o->decode_attn != PL_CUDA_DECODE_ROWS;
    if (r->split_kv && !pl_cuda_attn_split_supported(r->split_kind, r->n_head, r->n_head_kv,
                                                     r->head_dim)) {
        pl_split_kind k = r->split_kind;
        r->split_kind = PL_SPLIT_WARP;
        r->split_kv = pl_cuda_attn_split_supported(PL_SPLIT_WARP, r->n_head, r->n_head_kv,
                                                   r->head_dim);
        static const char *const names[] = {"split", "split16", "mma"};
        pl_info("cuda: no %s decode attention kernel for %d:%d heads of %d; using %s",
                names[k], r->n_head, r->n_head_kv, r->head_dim,
                r->split_kv ? "the warp-per-key split kernel" : "one block per row");
    }
    r->prefill_mma = o->prefill_attn == PL_CUDA_PREFILL_MMA   /* a tuning candidate */
                     && pl_cuda_attn_prefill_mma_supported(r->head_dim);
}

static void init_buckets(cuda_runner *r, bool graphs)
{
    int top = r->max_seqs < r->max_rows ? r->max_seqs : r->max_rows;
    r->use_graphs = graphs;
    r->n_buckets = 0;
    for (int b = 1; r->n_buckets < CR_MAX_BUCKETS - 1 && b < top; b *= 2)
        r->bucket_size[r->n_buckets++] = b;
    r->bucket_size[r->n_buckets++] = top;
}

static int setup(cuda_runner *r, const pl_model *m, float util, bool len_asked, char *err,
                 size_t errlen)
{
    char why[256];
    if (!pl_cuda_available(why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (pl_cuda_check_(cudaSetDevice(0), __FILE__, __LINE__)
        || pl_cuda_check_(cudaStreamCreateWithFlags(&r->cs, cudaStreamNonBlocking), __FILE__, __LINE__)
        || pl_cuda_check_(cudaStreamCreateWithFlags(&r->xs, cudaStreamNonBlocking), __FILE__, __LINE__))
        goto cuda_fail;
    if (!(r->gemm = pl_cuda_gemm_new(r->cs, err, errlen)))
        return -1;
    if (pl_cuda_weights_init(&r->w, m, r->load_threads, err, errlen) != 0)
        return -1;
    if (alloc_activations(r) != 0
        || alloc_kv(r, util, r->base.info.num_blocks, len_asked) != 0
        || alloc_kv_scales(r) != 0
        || alloc_io(r) != 0)
        goto cuda_fail;
    /* Setup used pageable copies and memsets on the legacy stream; the
     * compute stream is non-blocking, so wait for all of it here once. */
    if (pl_cuda_check_(cudaDeviceSynchronize(), __FILE__, __LINE__))
        goto cuda_fail;
    return 0;
cuda_fail:
    snprintf(err, errlen, "%s", pl_cuda_last_error());
    return -1;
}

pl_runner *pl_cuda_runner_new(const pl_model *m, const pl_runner_info *want,
                              const pl_cuda_opts *o, char *err, size_t errlen)
{
    /* Experts and gpt-oss's layers run (cuda_forward.c: the expert block,
     * attention sinks, the output bias, YaRN's scale); the engine still
     * refuses experts on --device cuda until a GPU run of
     * test_cuda_families passes (docs/gpu-validation.md). */
    cuda_runner *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->base.ops = &pl_cuda_runner_ops_;
    /* Masks and automaton states live on the device (cuda_constrain.c):
     * checked on an H100 by test_cuda_constrain and the device bundle's
     * constrained serving run (scripts/device/run.sh serve). */
    r->base.can_constrain = true;
    r->base.can_prompt_logprobs = true;  /* cuda_runner.c, prompt_lp.cu */
    float gpu_mem_util = (float)o->gpu_memory_utilization;
    if (gpu_mem_util <= 0.0f || gpu_mem_util > 1.0f)
        gpu_mem_util = 0.9f;
    if (fill_geometry(r, m, want) != 0) {
        snprintf(err, errlen, "%s", pl_cuda_last_error());
        goto fail;
    }
    r->inject_capture_failure = o->inject == PL_CUDA_INJECT_CAPTURE;
    r->load_threads = o->load_threads;
    /* Split-KV decode attention is the default where the shape has a
     * kernel (+38 % at 256 sequences on an H100); --cuda-decode-attn rows
     * selects the one-block-per-row kernel; split16 (16 lanes per key) and
     * mma (tensor cores) are split-KV tuning candidates. */
    pick_attention(r, o);
    if (setup(r, m, gpu_mem_util, want->max_model_len > 0, err, errlen) != 0)
        goto fail;
    init_buckets(r, o->graphs);
    pl_info("cuda: K/V cache %s, %d blocks of %d tokens; decode attention %s, prefill %s",
            r->geom.dtype == PL_KV_FP8 ? "fp8 e4m3" : "bf16", r->base.info.num_blocks,
            r->base.info.block_size,
            !r->split_kv ? "rows" : r->split_kind == PL_SPLIT_MMA ? "mma"
            : r->split_kind == PL_SPLIT_HALF ? "split16" : "split",
            r->prefill_mma ? "mma" : "tiled");
    if (pl_cuda_prof_init(r, o->profile && !o->graphs) != 0) {
        snprintf(err, errlen, "--cuda-profile: cannot create events");
        goto fail;
    }
    return &r->base;
fail:
    pl_cuda_runner_destroy_(r);
    return NULL;
}

static void free_slot(cr_slot *s)
{
    cudaFreeHost(s->h_in);
    cudaFreeHost(s->h_out);
    cudaFreeHost(s->h_logits);
    cudaFreeHost(s->h_plp);
    cudaFree(s->d_out);
    cudaFree(s->d_plp);
    free(s->out.row_lp);
    free(s->out.row_top_ids);
    free(s->out.row_top_lp);
    cudaEvent_t ev[5] = {s->in_done, s->computed, s->out_ready, s->t0, s->t1};
    for (int i = 0; i < 5; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
}

void pl_cuda_runner_destroy_(cuda_runner *r)
{
    if (!r)
        return;
    if (r->cs)
        cudaStreamSynchronize(r->cs);
    pl_cuda_prof_free(r);
    if (r->xs)
        cudaStreamSynchronize(r->xs);
    for (int b = 0; b < CR_MAX_BUCKETS; b++)
        if (r->graph[b])
            cudaGraphExecDestroy(r->graph[b]);
    for (int i = 0; i < PL_RUNNER_MAX_INFLIGHT; i++)
        free_slot(&r->slot[i]);
    pl_cuda_fsm_free(r);
    void *bufs[] = {r->x, r->y, r->qkv, r->gu, r->logits, r->pen, r->xb, r->att, r->act,
                    r->xl, r->slot_tok, r->d_in, r->d_out, r->kv, r->split_ws, r->kv_scale,
                    r->moe_xf, r->moe_logits, r->moe_sel, r->moe_wt, r->moe_plan.counts,
                    r->moe_plan.offsets, r->moe_plan.slot_of, r->moe_plan.row_of,
                    r->moe_plan.tile_e, r->moe_plan.tile_p0, r->moe_plan.n_tiles, r->moe_xp,
                    r->moe_g, r->moe_u, r->moe_h, r->moe_y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cudaFree(bufs[i]);
    pl_cuda_weights_free(&r->w);
    pl_cuda_gemm_free(r->gemm);
    if (r->cs)
        cudaStreamDestroy(r->cs);
    if (r->xs)
        cudaStreamDestroy(r->xs);
    free(r);
}

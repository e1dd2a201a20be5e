/* engine_open.c - GGUF file or Hugging Face checkpoint (engine_hf.h) ->
 * model + tokenizer + chat template + runner -> engine backend. The text
 * hooks the engine calls live here too. */
#include "backends/engine_open.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/text/chat_template.h"
#include "backends/engine/cpu/cpu_runner.h"
#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/ops.h"
#include "backends/engine/cuda/cuda_runner.h"
#include "backends/engine/engine.h"
#include "backends/engine/engine_embed.h"
#include "backends/engine/model/encoder.h"
#include "backends/engine/engine_hf.h"
#include "backends/engine/families/family.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/hf_cache.h"
#include "backends/engine/model/model.h"
#include "backends/text/tokenizer.h"
#include "src/base/log.h"

#define CTX_SEQS 4               /* sequences of its context the cache must hold */
#define CTX_FLOOR 2048           /* the former CPU default, kept on small caches */

/* Everything the text hooks need; also owns the model and its file. */
typedef struct engine_text {
    pl_gguf *gguf;               /**< a GGUF file, or NULL */
    pl_engine_hf hf;             /**< a checkpoint folder (hf.files), or empty */
    const pl_gguf *meta;         /**< the model's GGUF: gguf or hf.files' */
    pl_model *model;
    pl_tokenizer *tok;
    pl_chat_style style;
    char *bos_text, *eos_text;
    int max_model_len;
    char ctx_why[160];           /**< how max_model_len was chosen (the log) */
    bool tmpl_forced;            /**< --chat-template, or the ChatML fallback
                                      for an unknown one, replaced the GGUF's */
    bool encoder;                /**< an encoder (model/encoder.h): only the
                                      files are open; engine_embed.h serves it */
    char dir[4096];              /**< the checkpoint folder, or "" */
} engine_text;

static void text_free(void *ud)
{
    engine_text *t = ud;
    if (!t)
        return;
    pl_chat_style_free(&t->style);
    pl_tokenizer_free(t->tok);
    pl_model_free(t->model);
    pl_gguf_free(t->gguf);
    pl_engine_hf_free(&t->hf);
    free(t->bos_text);
    free(t->eos_text);
    free(t);
}

static int text_encode(void *ud, const pl_gen_request *req, bool add_special, int32_t **ids,
                       int *n, pl_err *err)
{
    engine_text *t = ud;
    int rc;
    if (req->messages) {
        char *rendered = NULL;
        pl_chat_kwargs kw = {.enable_thinking = req->thinking, .tools = req->tools,
                             .reasoning_effort = req->reasoning_effort,
                             .model_identity = req->model_identity};
        if (pl_chat_style_render_kw(&t->style, req->messages, req->n_messages,
                                    req->add_generation_prompt, t->bos_text, t->eos_text,
                                    &kw, &rendered, err) < 0)
            return -1;
        /* The template writes BOS itself where the model wants one. */
        rc = pl_tokenizer_encode(t->tok, rendered, strlen(rendered), false, true, ids, n);
        free(rendered);
    } else {
        /* A raw prompt's special tokens' text ("<|im_end|>") is read as
         * those tokens, as vLLM, llama-server and llama-cpp-python read
         * completion prompts: clients that format ChatML themselves, and
         * lm-evaluation-harness's remote tokenizer, which finds the EOS id
         * by tokenizing the eos_token text of /tokenizer_info. */
        const char *p = req->prompt ? req->prompt : "";
        rc = pl_tokenizer_encode(t->tok, p, strlen(p), add_special, true, ids, n);
    }
    if (rc < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "tokenizer out of memory");
    return 0;
}

static const char *text_token_bytes(void *ud, int32_t id, size_t *len)
{
    engine_text *t = ud;
    if (pl_tokenizer_token_hidden(t->tok, id)) {
        *len = 0;
        return NULL;
    }
    return pl_tokenizer_token_bytes(t->tok, id, len);
}

static bool text_is_eog(void *ud, int32_t id)
{
    engine_text *t = ud;
    return pl_tokenizer_is_eog(t->tok, id) || pl_engine_hf_is_eos(&t->hf, id);
}

/* The model's own Jinja chat template: the GGUF's, or the checkpoint's. */
static bool model_template(const engine_text *t, pl_gguf_str *src)
{
    if (t->hf.files) {
        *src = (pl_gguf_str){t->hf.text.chat_template,
                             t->hf.text.chat_template ? strlen(t->hf.text.chat_template) : 0};
        return src->ptr != NULL;
    }
    return pl_gguf_get_str(t->gguf, "tokenizer.chat_template", src) == 0;
}

static const struct pl_tool_format *text_tool_format(void *ud)
{
    return pl_chat_style_tool_format(&((engine_text *)ud)->style);
}

static const struct pl_reasoning_format *text_reasoning_format(void *ud)
{
    return pl_chat_style_reasoning_format(&((engine_text *)ud)->style);
}

/* A special token's text, null when the vocabulary has none (or its text
 * is not UTF-8, which JSON cannot carry). */
static json_t *special_json(const pl_tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *s = id >= 0 ? pl_tokenizer_token_bytes(tok, id, &len) : NULL;
    json_t *j = s ? json_stringn(s, len) : NULL;
    return j ? j : json_null();
}

static json_t *special_id_json(int32_t id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

/* The GGUF's Jinja chat template, null when it has none or --chat-template
 * or the fallback chose a built-in family instead (then the Jinja is not
 * what parley renders). */
static json_t *template_json(const engine_text *t)
{
    pl_gguf_str src = {0};
    if (t->tmpl_forced || !model_template(t, &src))
        return json_null();
    json_t *j = json_stringn(src.ptr, (size_t)src.len);
    return j ? j : json_null();
}

/* GET /tokenizer_info: tokenizer_config.json's fields, named as
 * transformers names them for a GGUF vocabulary, plus the ids. */
static json_t *text_tokenizer_info(void *ud)
{
    engine_text *t = ud;
    pl_tokenizer_specials sp;
    pl_tokenizer_specials_get(t->tok, &sp);
    const char *cls = sp.model == PL_TOKENIZER_MODEL_LLAMA ? "LlamaTokenizerFast"
                                                           : "GPT2TokenizerFast";
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:b, s:o, s:s, s:i}",
                     "tokenizer_class", cls, "bos_token", special_json(t->tok, sp.bos),
                     "eos_token", special_json(t->tok, sp.eos), "pad_token",
                     special_json(t->tok, sp.pad), "unk_token", special_json(t->tok, sp.unk),
                     "bos_token_id", special_id_json(sp.bos), "eos_token_id",
                     special_id_json(sp.eos), "pad_token_id", special_id_json(sp.pad),
                     "unk_token_id", special_id_json(sp.unk), "add_bos_token", sp.add_bos,
                     "add_eos_token", sp.add_eos, "chat_template", template_json(t),
                     "chat_template_family", pl_chat_tmpl_name(t->style.tmpl), "vocab_size",
                     (int)pl_tokenizer_n_vocab(t->tok));
}

static char *token_text(const pl_tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *s = id >= 0 ? pl_tokenizer_token_bytes(tok, id, &len) : NULL;
    return s ? strndup(s, len) : strdup("");
}

static int pick_template(engine_text *t, const pl_engine_open_opts *o, char *err, size_t n)
{
    const pl_engine_config *c = o->cfg;
    if (c->chat_template && c->chat_template[0]) {
        pl_chat_tmpl k;
        if (pl_chat_tmpl_from_name(c->chat_template, &k) < 0) {
            snprintf(err, n, "unknown --chat-template '%s' (known: %s)", c->chat_template,
                     pl_chat_tmpl_names());
            return -1;
        }
        pl_chat_style_from_tmpl(&t->style, k);
        t->tmpl_forced = true;
        return 0;
    }
    pl_gguf_str src = {0};
    char *jinja = NULL;
    if (model_template(t, &src))
        jinja = strndup(src.ptr, (size_t)src.len);
    int rc = pl_chat_style_init(&t->style, jinja);
    free(jinja);
    if (rc < 0) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    if (t->style.tmpl != PL_CHAT_TMPL_UNKNOWN)
        return 0;
    if (!src.ptr && pl_family_chat_style(t->model->family, &t->style) == 0) {
        pl_info("%s has no chat template: using %s's", o->model_path, t->model->arch_name);
        return 0;
    }
    if (c->chat_template_strict) {
        snprintf(err, n, "the model's chat template is not one parley knows "
                         "(give --chat-template: %s)", pl_chat_tmpl_names());
        return -1;
    }
    pl_warn("unknown chat template in %s: using ChatML (set --chat-template)", o->model_path);
    pl_chat_style_from_tmpl(&t->style, PL_CHAT_TMPL_CHATML);
    t->tmpl_forced = true;
    return 0;
}

/* --model as a GGUF file, a checkpoint folder or ORG/NAME in the local
 * Hugging Face cache (hf_cache.h): t->meta is the model's GGUF either way;
 * a checkpoint's tokenizer is read here too (t->tok). */
static int open_files(engine_text *t, const pl_engine_open_opts *o, bool cpu, char *err,
                      size_t n)
{
    char path[4096], e2[1024];
    int kind = pl_hf_resolve(o->model_path, o->cfg->revision, path, sizeof path, e2, sizeof e2);
    if (kind < 0) {
        snprintf(err, n, "%s", e2);
        return -1;
    }
    if (kind == PL_MODEL_KIND_HF) {
        const pl_cpu_opts *c = &o->cfg->cpu;
        const char *wt = !cpu ? "bf16" : c->weight_type && c->weight_type[0]
                                             ? c->weight_type : "auto";
        if (pl_engine_hf_open(&t->hf, path, wt, c->threads, &t->tok, err, n) < 0)
            return -1;
        snprintf(t->dir, sizeof t->dir, "%s", path);
        t->meta = pl_hf_model_gguf(t->hf.files);
        return 0;
    }
    t->gguf = pl_gguf_open(path, e2, sizeof e2);
    if (!t->gguf) {
        snprintf(err, n, "%s: %s", o->model_path, e2);
        return -1;
    }
    t->meta = t->gguf;
    return 0;
}

/* A decoder served as an embedder: --pooling was given (vLLM's --runner
 * pooling); it runs on the CPU. */
static bool embeds(const pl_engine_open_opts *o)
{
    return o->cfg->pooling && o->cfg->pooling[0];
}

static engine_text *load_text(const pl_engine_open_opts *o, char *err, size_t n)
{
    engine_text *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    char e2[1024];
    bool cpu = !strcmp(o->device, "cpu") || embeds(o);
    if (open_files(t, o, cpu, err, n) < 0)
        goto fail;
    if ((t->encoder = pl_encoder_is(t->meta)))
        return t;
    /* Only the CPU's f32 GEMM path (not batch-invariant) wants dequantised
     * copies; the GPU takes bf16 straight from the GGUF's tensors (an 8B
     * bf16 model once got 32 GB of unused f32 copies and ~50 s of load). */
    pl_model_opts mo = {.keep_f32 = cpu && !o->cfg->cpu.batch_invariant,
                        .keep_packed = cpu ? pl_op_keep_packed : pl_keep_packed_all,
                        .keep_packed_experts = cpu ? pl_op_qdot_supported : NULL};
    t->model = pl_model_load(t->meta, &mo, e2, sizeof e2);
    if (!t->model) {
        snprintf(err, n, "%s: %s", o->model_path, e2);
        goto fail;
    }
    if (!t->tok && !(t->tok = pl_tokenizer_from_gguf(t->gguf, e2, sizeof e2))) {
        snprintf(err, n, "%s: %s", o->model_path, e2);
        goto fail;
    }
    if (pick_template(t, o, err, n) < 0)
        goto fail;
    t->bos_text = t->hf.files ? strdup(t->hf.text.bos_text)
                              : token_text(t->tok, pl_tokenizer_bos(t->tok));
    t->eos_text = t->hf.files ? strdup(t->hf.text.eos_text)
                              : token_text(t->tok, pl_tokenizer_eos(t->tok));
    return t;
fail:
    text_free(t);
    return NULL;
}

int pl_engine_cpu_context(int model_ctx, int kv_blocks, int block_size, int *count_len,
                          char *why, size_t n)
{
    long kv_tokens = (long)kv_blocks * block_size;
    int ctx = model_ctx;
    if ((long)model_ctx * CTX_SEQS <= kv_tokens) {
        snprintf(why, n, "the model's; the K/V cache holds %ld such sequences",
                 kv_tokens / model_ctx);
    } else {
        long few = kv_tokens / CTX_SEQS / block_size * block_size;
        int floor = model_ctx < CTX_FLOOR ? model_ctx : CTX_FLOOR;
        ctx = few > floor ? (int)few : floor;
        if (few > floor)
            snprintf(why, n, "the longest the K/V cache holds %d sequences of (the model's "
                     "is %d)", CTX_SEQS, model_ctx);
        else
            snprintf(why, n, "min(the model's %d, %d): the K/V cache holds fewer than %d "
                     "sequences of the model's", model_ctx, CTX_FLOOR, CTX_SEQS);
    }
    *count_len = ctx < CTX_FLOOR ? ctx : CTX_FLOOR;
    return ctx;
}

/* Whether the CUDA runner runs m; if not, why into err. */
static bool cuda_runs_(const pl_model *m, char *err, size_t n)
{
    if (pl_model_has_moe(m)) {
        snprintf(err, n, "the CUDA runner does not run %s's layers yet (experts, "
                 "attention sinks, YaRN): use --backend cpu", m->arch_name);
        return false;
    }
    if (!pl_family_runs(m->family, PL_FAMILY_RUNS_CUDA)) {
        snprintf(err, n, "the CUDA runner does not run %s models: use --backend cpu",
                 m->arch_name);
        return false;
    }
    return true;
}

static pl_runner *open_cuda(const pl_engine_open_opts *o, engine_text *t,
                            pl_runner_info *want, char *err, size_t n)
{
    const pl_engine_config *c = o->cfg;
    if (!pl_cuda_available(err, n) || !cuda_runs_(t->model, err, n))
        return NULL;
    want->num_blocks = 0;            /* sized from free GPU memory */
    /* 0: the model's context, capped by what the KV cache holds. */
    want->max_model_len = c->max_model_len;
    if (c->cuda.profile && c->cuda.graphs)
        pl_warn("--cuda-profile needs --no-cuda-graphs (graphs replay whole steps): "
                "not profiling");
    pl_runner *r = pl_cuda_runner_new(t->model, want, &c->cuda, err, n);
    if (r) {
        t->max_model_len = r->info.max_model_len;
        snprintf(t->ctx_why, sizeof t->ctx_why, "%s", c->max_model_len > 0 ? "asked for"
                 : "the model's, capped by what the K/V cache holds");
    }
    return r;
}

/* The CPU runner, its K/V cache from --kv-cache-mb; core->capacity_len
 * set where the context was chosen here. */
static pl_runner *open_cpu(const pl_engine_open_opts *o, engine_text *t, pl_runner_info *want,
                           pl_engine_options *core, char *err, size_t n)
{
    const pl_model *m = t->model;
    const pl_engine_config *c = o->cfg;
    if (!pl_family_runs(m->family, PL_FAMILY_RUNS_CPU)) {
        snprintf(err, n, "the CPU runner does not run %s models", m->arch_name);
        return NULL;
    }
    if (c->cuda.kv_cache_dtype == PL_CUDA_KV_FP8 || c->cuda.kv_cache_dtype == PL_CUDA_KV_FP8_E4M3) {
        snprintf(err, n, "--kv-cache-dtype fp8 needs the CUDA backend (the CPU runner's "
                 "cache: --kv-cache-f16)");
        return NULL;
    }
    /* KV bytes per block: K and V, halves (or floats), of the layers one
     * block holds (a cache group's: kv_layout.h). The runner keeps floats
     * for heads too wide for its f16 attention. */
    bool f16 = c->cpu.kv_f16 && m->head_dim <= PL_ATTN_MAX_F16_HEAD_DIM &&
               m->head_dim_swa <= PL_ATTN_MAX_F16_HEAD_DIM;
    if (pl_runner_kv_layout(&want->kv_layout, m, c->cpu.kv_groups) != 0) {
        snprintf(err, n, "%s: %d layers or their sliding windows do not fit the K/V cache "
                 "layout (at most %d layers, %d windows)", o->model_path, m->n_layer,
                 PL_KV_MAX_LAYERS, PL_KV_MAX_KINDS);
        return NULL;
    }
    const pl_kv_layout *lo = &want->kv_layout;
    size_t per_block = (size_t)lo->n_slots * 2 * (size_t)m->kv_dim *
                       (size_t)want->block_size * (f16 ? sizeof(uint16_t) : sizeof(float));
    size_t kv_bytes = (size_t)c->kv_cache_mb << 20;
    want->num_ckpts = 0;
    if (m->n_recurrent > 0 && core->prefix_caching) {
        /* A hybrid's recurrent-state checkpoints (kv_ckpt.h): half the
         * budget, at most 1024, none when fewer than 2 fit. Its attention
         * layers are a quarter of its layers, so half still holds many
         * contexts, while a debate keeps a checkpoint per agent and round:
         * with a quarter (26 on Qwen3.5-0.8B's shape in 2 GiB) a 6-question
         * debate evicted them before their next round, 5.6 % of its round
         * >= 2 prompt tokens from the cache against 53.8 % with half. */
        size_t ckb = pl_cpu_fwd_ckpt_bytes(m), n_ck = kv_bytes / 2 / ckb;
        want->num_ckpts = n_ck < 2 ? 0 : n_ck > 1024 ? 1024 : (int)n_ck;
        kv_bytes -= (size_t)want->num_ckpts * ckb;
    }
    want->num_blocks = (int)(kv_bytes / per_block);
    want->max_model_len = c->max_model_len;
    snprintf(t->ctx_why, sizeof t->ctx_why, "asked for");
    /* The context is chosen as if each sequence of the model's length
     * took one block per block_size positions: the blocks scaled by what
     * such a sequence really takes across the groups. */
    long ctx_blocks = (m->n_ctx_train + want->block_size - 1) / want->block_size;
    long eff = (long)((double)want->num_blocks * (double)ctx_blocks /
                      (double)pl_kv_layout_need(lo->n_kinds, lo->kind_window, lo->kind_groups,
                                                want->block_size, m->n_ctx_train));
    if (c->max_model_len <= 0)
        want->max_model_len = pl_engine_cpu_context(m->n_ctx_train, eff > INT_MAX ? INT_MAX : (int)eff,
                                                    want->block_size, &core->capacity_len,
                                                    t->ctx_why, sizeof t->ctx_why);
    int min_blocks = (int)pl_kv_layout_need(lo->n_kinds, lo->kind_window, lo->kind_groups,
                                            want->block_size, want->max_model_len);
    if (want->num_blocks < min_blocks) {
        snprintf(err, n, "--kv-cache-mb %d holds %d blocks; one %d-token sequence needs %d",
                 c->kv_cache_mb, want->num_blocks, want->max_model_len, min_blocks);
        return NULL;
    }
    t->max_model_len = want->max_model_len;
    pl_runner *r = pl_cpu_runner_open(m, want, &c->cpu, err, n);
    if (r)
        pl_log(PL_LOG_INFO, "cpu engine %s: %d threads, kernels %s, K/V cache %s "
               "(%d blocks of %d tokens)", o->model_path,
               c->cpu.threads > 0 ? c->cpu.threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
               r->kernels, f16 ? "f16" : "f32", want->num_blocks, want->block_size);
    return r;
}

static pl_runner *open_runner(const pl_engine_open_opts *o, engine_text *t,
                              pl_engine_options *core, char *err, size_t n)
{
    const pl_engine_config *c = o->cfg;
    pl_runner_info want = {.block_size = c->core.block_size, .max_seqs = c->core.max_num_seqs,
                           .max_rows = c->core.max_num_batched_tokens};
    if (!strcmp(o->device, "cuda"))
        return open_cuda(o, t, &want, err, n);
    if (!strcmp(o->device, "cpu"))
        return open_cpu(o, t, &want, core, err, n);
    snprintf(err, n, "unknown device '%s'", o->device);
    return NULL;
}

void pl_engine_model_name(const char *path, char *out, size_t n)
{
    char trimmed[4096];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    for (size_t k = strlen(trimmed); k > 1 && trimmed[k - 1] == '/'; k--)
        trimmed[k - 1] = '\0';             /* a checkpoint folder given as "dir/" */
    const char *base = strrchr(trimmed, '/');
    base = base ? base + 1 : trimmed;
    snprintf(out, n, "%s", base);
    char *dot = strstr(out, ".gguf");
    if (dot)
        *dot = '\0';
    /* Drop a trailing quant tag: ".Q4_1", "-q8_0", ".F16", "-BF16". */
    char *tag = strrchr(out, '.');
    char *dash = strrchr(out, '-');
    if (dash && (!tag || dash > tag))
        tag = dash;
    if (tag && (tag[1] == 'Q' || tag[1] == 'q' || !strcasecmp(tag + 1, "f16") ||
                !strcasecmp(tag + 1, "bf16") || !strcasecmp(tag + 1, "f32")) &&
        (isdigit((unsigned char)tag[2]) || tag[1] == 'f' || tag[1] == 'F' || tag[1] == 'b' ||
         tag[1] == 'B'))
        *tag = '\0';
    for (char *p = out; *p; p++)
        *p = (char)tolower((unsigned char)*p);
}

/* The served name: --served-model-name, ORG/NAME as given, or the file's. */
static void served_name(const pl_engine_open_opts *o, const engine_text *t, char *name,
                        size_t n)
{
    if (o->served_name && o->served_name[0])
        snprintf(name, n, "%s", o->served_name);
    else if (t->hf.files && access(o->model_path, F_OK) != 0)
        snprintf(name, n, "%s", o->model_path);  /* ORG/NAME, as vLLM serves it */
    else
        pl_engine_model_name(o->model_path, name, n);
}

/* An encoder, or a decoder asked to embed: its files (and the decoder's
 * model) go to the embedding backend (engine_embed.h). */
static pl_backend *open_encoder(struct event_base *base, const pl_engine_open_opts *o,
                                engine_text *t, char *err, size_t n)
{
    char name[256];
    served_name(o, t, name, sizeof name);
    if (strcmp(o->device, "cpu"))
        pl_warn("model %s: an %s runs on the CPU (the CUDA runner has no embedding "
                "kernels yet)", name, t->model ? "embedding decoder" : "encoder");
    pl_engine_embed_files f = {.gguf = t->gguf, .hf = t->hf, .meta = t->meta, .tok = t->tok,
                               .model = t->model, .dir = t->dir[0] ? t->dir : NULL};
    t->gguf = NULL;
    t->tok = NULL;
    t->model = NULL;
    memset(&t->hf, 0, sizeof t->hf);
    pl_backend *b = pl_engine_embed_open(base, name, &f, o->cfg, err, n);
    text_free(t);
    return b;
}

pl_backend *pl_engine_open(struct event_base *base, const pl_engine_open_opts *o,
                           char *err, size_t errlen)
{
    engine_text *t = load_text(o, err, errlen);
    if (!t)
        return NULL;
    if (t->encoder || embeds(o))
        return open_encoder(base, o, t, err, errlen);
    char refused[512];
    if (o->cpu_fallback && !strcmp(o->device, "cuda") &&
        !cuda_runs_(t->model, refused, sizeof refused)) {
        /* Loaded for the GPU (an HF checkpoint as bf16): load again for
         * the CPU, in the weights' own precision. */
        pl_warn("%s: %s; serving it on the CPU", o->model_path, refused);
        text_free(t);
        pl_engine_open_opts cpu = *o;
        cpu.device = "cpu";
        cpu.cpu_fallback = false;
        return pl_engine_open(base, &cpu, err, errlen);
    }
    pl_engine_options core = o->cfg->core;
    pl_runner *r = open_runner(o, t, &core, err, errlen);
    if (!r) {
        text_free(t);
        return NULL;
    }
    char name[256];
    served_name(o, t, name, sizeof name);
    pl_engine_text hooks = {.ud = t, .encode = text_encode, .token_bytes = text_token_bytes,
                            .is_eog = text_is_eog, .tool_format = text_tool_format,
                            .reasoning_format = text_reasoning_format,
                            .tokenizer_info = text_tokenizer_info, .free = text_free};
    pl_err e;
    char why[sizeof t->ctx_why];
    snprintf(why, sizeof why, "%s", t->ctx_why);  /* t belongs to the engine from here */
    int ctx = t->max_model_len;
    const pl_model *m = t->model;
    const pl_sampling_model_defaults *sd = t->hf.files && t->hf.sampling.set ? &t->hf.sampling
                                                                              : NULL;
    pl_info("model %s: %s, %d layers, %d-dim, vocab %d, template %s", name, m->arch_name,
            m->n_layer, m->n_embd, m->n_vocab, pl_chat_tmpl_name(t->style.tmpl));
    if (m->n_recurrent > 0 && core.prefix_caching && r->info.num_ckpts == 0) {
        /* a cache hit at P needs the recurrent state at P: a checkpoint */
        core.prefix_caching = false;
        pl_info("model %s: prefix caching off: no slots for its %d recurrent layers' state "
                "checkpoints (the %s runner has none, or half of --kv-cache-mb holds "
                "fewer than 2)",
                name, m->n_recurrent, r->ops->name);
    } else if (m->n_recurrent > 0 && core.prefix_caching) {
        pl_info("model %s: %d recurrent-state checkpoints of %.1f KiB for prefix hits (every "
                "%d blocks, and where hints point)", name, r->info.num_ckpts,
                (double)r->info.ckpt_bytes / 1024.0, core.ckpt_every);
    }
    pl_backend *b = pl_engine_backend_new(base, name, r, &hooks, &core, &e);
    if (!b) {
        snprintf(err, errlen, "%s", e.message);
        return NULL;
    }
    if (sd)
        b->sampling_defaults = sd;   /* t lives as long as b (hooks.free) */
    char counted[96] = " at most, each admitted by the KV blocks it needs";
    if (core.capacity_rule == PL_CAPACITY_WORST_CASE)
        snprintf(counted, sizeof counted, " (each counted as %d tokens; longer ones may be "
                 "preempted)", core.capacity_len > 0 && core.capacity_len < ctx
                 ? core.capacity_len : ctx);
    pl_info("model %s: context %d (%s), capacity %d sequences%s", name, ctx, why,
            pl_backend_capacity(b), counted);
    return b;
}

int pl_engine_gpu_available(char *why, size_t n)
{
    return pl_cuda_available(why, n);
}

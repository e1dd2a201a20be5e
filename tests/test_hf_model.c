/* test_hf_model.c - a Hugging Face checkpoint folder read as a GGUF model
 * (backends/engine/model/hf_model.c, hf_arch.c, hf_weights.c,
 * gguf_synth.c): config.json onto metadata, HF names onto GGUF names, q/k
 * rows permuted for llama, tied embeddings, types converted (in place when
 * they already are what the runner wants), FP8 scales per tensor, channel
 * and block; and every bad input an error naming the file and the tensor
 * or key. Also --model ORG/NAME in the local Hugging Face cache
 * (hf_cache.c). The checkpoints are written here, by a small writer of
 * the format.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/engine/model/hf_cache.h"
#include "backends/engine/model/hf_model.h"
#include "backends/engine/model/model.h"
#include "backends/engine/model/quant.h"
#include "src/base/half.h"

#define E 32   /* hidden */
#define H 2    /* heads */
#define KV 1   /* kv heads */
#define HD 16  /* head dim */
#define FF 64
#define NL 2
#define NV 40

typedef struct tensor {
    char name[96];
    char dtype[16];
    int n_dims;
    long shape[2];
    uint8_t *data;
    size_t nbytes;
} tensor;

static char dir_[256];
static tensor ts_[64];
static int nt_;
static json_t *cfg_;

static float rnd_(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static tensor *add_f32(const char *name, long r, long c)
{
    static uint32_t seed = 7;
    tensor *t = &ts_[nt_++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->dtype, sizeof t->dtype, "F32");
    t->n_dims = c ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c;
    size_t n = (size_t)r * (size_t)(c ? c : 1);
    t->nbytes = n * 4;
    t->data = malloc(t->nbytes);
    for (size_t i = 0; i < n; i++) {
        float f = rnd_(&seed) * 0.5f;
        memcpy(t->data + 4 * i, &f, 4);
    }
    return t;
}

static tensor *find(const char *name)
{
    for (int i = 0; i < nt_; i++)
        if (!strcmp(ts_[i].name, name))
            return &ts_[i];
    cr_assert_fail("no tensor %s", name);
    return NULL;
}

static void drop(const char *name)
{
    tensor *t = find(name);
    free(t->data);
    *t = ts_[--nt_];
}

/* A llama checkpoint of the dimensions above, f32, lm_head untied. */
static void make_llama(void)
{
    char n[96];
    for (int i = 0; i < nt_; i++)
        free(ts_[i].data);
    nt_ = 0;
    add_f32("model.embed_tokens.weight", NV, E);
    add_f32("model.norm.weight", E, 0);
    add_f32("lm_head.weight", NV, E);
    for (int l = 0; l < NL; l++) {
        const char *names[] = {"input_layernorm", "post_attention_layernorm"};
        for (int i = 0; i < 2; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, names[i]);
            add_f32(n, E, 0);
        }
        struct { const char *p; long r, c; } m[] = {
            {"self_attn.q_proj", H * HD, E}, {"self_attn.k_proj", KV * HD, E},
            {"self_attn.v_proj", KV * HD, E}, {"self_attn.o_proj", E, H * HD},
            {"mlp.gate_proj", FF, E}, {"mlp.up_proj", FF, E}, {"mlp.down_proj", E, FF}};
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, m[i].p);
            add_f32(n, m[i].r, m[i].c);
        }
    }
    json_decref(cfg_);
    cfg_ = json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b}",
                     "architectures", "LlamaForCausalLM", "hidden_size", E,
                     "intermediate_size", FF, "num_hidden_layers", NL, "num_attention_heads", H,
                     "num_key_value_heads", KV, "vocab_size", NV, "max_position_embeddings", 128,
                     "rms_norm_eps", 1e-5, "rope_theta", 10000.0, "tie_word_embeddings", 0);
}

static void write_files(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir_);
    cr_assert_eq(json_dump_file(cfg_, p, 0), 0);
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < nt_; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < ts_[i].n_dims; d++)
            json_array_append_new(shape, json_integer(ts_[i].shape[d]));
        json_object_set_new(h, ts_[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", ts_[i].dtype, "shape",
                                      shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + ts_[i].nbytes)));
        off += ts_[i].nbytes;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    uint64_t hl = strlen(hs);
    snprintf(p, sizeof p, "%s/model.safetensors", dir_);
    FILE *f = fopen(p, "wb");
    cr_assert(f);
    for (int i = 0; i < 8; i++)
        fputc((int)(hl >> (8 * i)) & 0xff, f);
    fwrite(hs, 1, hl, f);
    for (int i = 0; i < nt_; i++)
        fwrite(ts_[i].data, 1, ts_[i].nbytes, f);
    fclose(f);
    free(hs);
    json_decref(h);
}

static void setup(void)
{
    snprintf(dir_, sizeof dir_, "/tmp/parley_hfm_%d_XXXXXX", (int)getpid());
    cr_assert(mkdtemp(dir_));
    make_llama();
}

static void teardown(void)
{
    char cmd[400];
    for (int i = 0; i < nt_; i++)
        free(ts_[i].data);
    nt_ = 0;
    json_decref(cfg_);
    cfg_ = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(hf_model, .init = setup, .fini = teardown);

static pl_hf_model *open_as(pl_ggml_type t)
{
    char err[512];
    write_files();
    pl_hf_opts o = {.weight_type = t, .threads = 2};
    pl_hf_model *m = pl_hf_model_open(dir_, &o, err, sizeof err);
    cr_assert(m, "%s", err);
    return m;
}

static float f32_at(const tensor *t, size_t i)
{
    float f;
    memcpy(&f, t->data + 4 * i, 4);
    return f;
}

Test(hf_model, config_and_names_onto_gguf)
{
    pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
    const pl_gguf *g = pl_hf_model_gguf(m);
    pl_gguf_str s;
    uint64_t v;
    cr_assert_eq(pl_gguf_get_str(g, "general.architecture", &s), 0);
    cr_expect(s.len == 5 && !memcmp(s.ptr, "llama", 5));
    cr_expect(pl_gguf_get_u64(g, "llama.block_count", &v) == 0 && v == NL);
    cr_expect(pl_gguf_get_u64(g, "llama.attention.head_count_kv", &v) == 0 && v == KV);
    cr_expect(pl_gguf_get_u64(g, "llama.attention.key_length", &v) == 0 && v == HD);
    const pl_gguf_tensor *q = pl_gguf_tensor_find(g, "blk.1.attn_q.weight");
    cr_assert(q);
    cr_expect_eq(q->type, PL_GGML_TYPE_F32);
    cr_expect(q->ne[0] == E && q->ne[1] == H * HD);
    /* row r of GGUF's interleaved layout is HF row h*HD + (r%2)*HD/2 + (r%HD)/2 */
    const tensor *hq = find("model.layers.1.self_attn.q_proj.weight");
    for (int r = 0; r < H * HD; r++) {
        int h = r / HD, sr = h * HD + (r % 2) * (HD / 2) + (r % HD) / 2;
        float got;
        memcpy(&got, (const uint8_t *)q->data + 4 * ((size_t)r * E + 3), 4);
        cr_assert_eq(got, f32_at(hq, (size_t)sr * E + 3), "row %d", r);
    }
    cr_expect(pl_gguf_tensor_find(g, "output.weight"));
    cr_expect(pl_gguf_tensor_find(g, "blk.0.ffn_norm.weight"));
    pl_model *mm = pl_model_load(g, NULL, NULL, 0);
    cr_assert(mm);
    cr_expect_eq(mm->n_vocab, NV);
    cr_expect_eq(mm->head_dim, HD);
    cr_expect(!mm->tied);
    pl_model_free(mm);
    pl_hf_model_free(m);
}

Test(hf_model, quantised_at_load_and_bf16_in_place)
{
    pl_hf_model *m = open_as(PL_GGML_TYPE_Q8_0);
    const pl_gguf *g = pl_hf_model_gguf(m);
    const pl_gguf_tensor *d = pl_gguf_tensor_find(g, "blk.0.ffn_down.weight");
    cr_expect_eq(d->type, PL_GGML_TYPE_Q8_0);
    cr_expect_eq(pl_gguf_tensor_find(g, "blk.0.attn_norm.weight")->type, PL_GGML_TYPE_F32);
    float row[FF];
    cr_assert_eq(pl_dequant_row(d->type, d->data, row, FF), 0);
    const tensor *hd = find("model.layers.0.mlp.down_proj.weight");
    for (int j = 0; j < FF; j++)
        cr_assert_lt(fabsf(row[j] - f32_at(hd, (size_t)j)), 0.5f / 127 + 1e-6f, "col %d", j);
    /* all but the f32 norms, which are already what the model wants */
    cr_expect_eq(pl_hf_model_stats(m)->n_converted,
                 pl_hf_model_stats(m)->n_tensors - (1 + 2 * NL));
    pl_hf_model_free(m);
    /* bf16 weights asked for as bf16: used where they are, not copied */
    for (int i = 0; i < nt_; i++) {
        tensor *t = &ts_[i];
        size_t n = t->nbytes / 4;
        for (size_t k = 0; k < n; k++)
            memmove(t->data + 2 * k, t->data + 4 * k + 2, 2);
        t->nbytes = n * 2;
        snprintf(t->dtype, sizeof t->dtype, "BF16");
    }
    m = open_as(PL_GGML_TYPE_BF16);
    /* converted: the norms (to F32) and q, k (permuted) of each layer */
    cr_expect_eq(pl_hf_model_stats(m)->n_converted, 1 + NL * 4);
    cr_expect_eq(pl_gguf_tensor_find(pl_hf_model_gguf(m), "blk.0.attn_v.weight")->type,
                 PL_GGML_TYPE_BF16);
    pl_hf_model_free(m);
}

/* By default (--cpu-weight-type auto) a checkpoint keeps its own
 * precision: bf16 stays bf16 (in place), f16 stays f16, nothing is
 * quantised unless asked. */
static pl_hf_model *open_own(void)
{
    char err[512];
    write_files();
    pl_hf_opts o = {.weight_type = PL_GGML_TYPE_Q8_0, .own_precision = true, .threads = 2};
    pl_hf_model *m = pl_hf_model_open(dir_, &o, err, sizeof err);
    cr_assert(m, "%s", err);
    return m;
}

Test(hf_model, own_precision_by_default)
{
    pl_hf_model *m = open_own();
    cr_expect_eq(pl_gguf_tensor_find(pl_hf_model_gguf(m), "blk.0.ffn_down.weight")->type,
                 PL_GGML_TYPE_F32);
    pl_hf_model_free(m);
    for (int half = 0; half < 2; half++) {
        make_llama();
        for (int i = 0; i < nt_; i++) {
            tensor *t = &ts_[i];
            size_t n = t->nbytes / 4;
            for (size_t k = 0; k < n; k++) {
                float f;
                memcpy(&f, t->data + 4 * k, 4);
                uint16_t h = half ? pl_fp32_to_fp16(f) : pl_fp32_to_bf16(f);
                memcpy(t->data + 2 * k, &h, 2);
            }
            t->nbytes = n * 2;
            snprintf(t->dtype, sizeof t->dtype, half ? "F16" : "BF16");
        }
        m = open_own();
        pl_ggml_type want = half ? PL_GGML_TYPE_F16 : PL_GGML_TYPE_BF16;
        const pl_gguf *g = pl_hf_model_gguf(m);
        const char *names[] = {"blk.0.attn_v.weight", "blk.1.attn_q.weight",
                               "blk.0.ffn_down.weight", "token_embd.weight", "output.weight"};
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            cr_expect_eq(pl_gguf_tensor_find(g, names[i])->type, want, "%s", names[i]);
        const pl_gguf_tensor *v = pl_gguf_tensor_find(g, "blk.0.attn_v.weight");
        cr_expect_eq(memcmp(v->data, find("model.layers.0.self_attn.v_proj.weight")->data,
                            v->nbytes), 0);
        cr_expect_eq(pl_hf_model_stats(m)->n_converted, 1 + NL * 4);   /* norms, q, k */
        pl_hf_model_free(m);
    }
}

Test(hf_model, tied_embeddings)
{
    drop("lm_head.weight");
    json_object_set_new(cfg_, "tie_word_embeddings", json_true());
    pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
    cr_expect_null(pl_gguf_tensor_find(pl_hf_model_gguf(m), "output.weight"));
    pl_model *mm = pl_model_load(pl_hf_model_gguf(m), NULL, NULL, 0);
    cr_assert(mm);
    cr_expect(mm->tied);
    pl_model_free(mm);
    pl_hf_model_free(m);
}

/* e4m3 codes: 0x38 = 1, 0x40 = 2, 0xb8 = -1, 0x7e = 448, 0x01 = 2^-9. */
Test(hf_model, fp8_scales_per_tensor_channel_and_block)
{
    static const uint8_t codes[4] = {0x38, 0x40, 0xb8, 0x7e};
    static const float vals[4] = {1, 2, -1, 448};
    tensor *w = find("model.layers.0.mlp.up_proj.weight");   /* [FF, E] */
    snprintf(w->dtype, sizeof w->dtype, "F8_E4M3");
    w->nbytes = (size_t)FF * E;
    for (size_t i = 0; i < w->nbytes; i++)
        w->data[i] = codes[i % 4];
    tensor *s = add_f32("model.layers.0.mlp.up_proj.weight_scale", FF, 1);
    for (int r = 0; r < FF; r++) {
        float f = 0.5f + (float)r;
        memcpy(s->data + 4 * r, &f, 4);
    }
    json_object_set_new(cfg_, "quantization_config",
                        json_pack("{s:s, s:{s:{s:{s:s, s:i}}}}", "quant_method",
                                  "compressed-tensors", "config_groups", "group_0", "weights",
                                  "type", "float", "num_bits", 8));
    pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
    const pl_gguf_tensor *u = pl_gguf_tensor_find(pl_hf_model_gguf(m), "blk.0.ffn_up.weight");
    const float *x = u->data;
    for (int r = 0; r < FF; r += 7)
        for (int j = 0; j < E; j += 5)
            cr_assert_eq(x[r * E + j], vals[(r * E + j) % 4] * (0.5f + (float)r));
    cr_expect(pl_hf_model_stats(m)->fp8);
    pl_hf_model_free(m);
    /* one scale for the tensor */
    s->shape[0] = 1;
    s->n_dims = 1;
    s->nbytes = 4;
    m = open_as(PL_GGML_TYPE_F32);
    x = pl_gguf_tensor_find(pl_hf_model_gguf(m), "blk.0.ffn_up.weight")->data;
    cr_expect_eq(x[5 * E + 1], vals[(5 * E + 1) % 4] * 0.5f);
    pl_hf_model_free(m);
    /* 16x16 blocks: scale [4, 2], the fp8 method's weight_scale_inv */
    snprintf(s->name, sizeof s->name, "model.layers.0.mlp.up_proj.weight_scale_inv");
    s->n_dims = 2;
    s->shape[0] = FF / 16;
    s->shape[1] = E / 16;
    s->nbytes = 4 * 8;
    json_object_set_new(cfg_, "quantization_config",
                        json_pack("{s:s, s:[i, i]}", "quant_method", "fp8",
                                  "weight_block_size", 16, 16));
    m = open_as(PL_GGML_TYPE_F32);
    x = pl_gguf_tensor_find(pl_hf_model_gguf(m), "blk.0.ffn_up.weight")->data;
    cr_expect_eq(x[40 * E + 20], vals[(40 * E + 20) % 4] * (0.5f + (float)(2 * 2 + 1)));
    pl_hf_model_free(m);
}

/* Opening fails with a message holding want1 and want2. */
static void refused(const char *want1, const char *want2)
{
    char err[1024] = "";
    write_files();
    pl_hf_opts o = {.weight_type = PL_GGML_TYPE_Q8_0, .threads = 1};
    pl_hf_model *m = pl_hf_model_open(dir_, &o, err, sizeof err);
    cr_expect_null(m, "accepted (wanted '%s')", want1);
    cr_expect(strstr(err, want1), "'%s' not in: %s", want1, err);
    if (want2)
        cr_expect(strstr(err, want2), "'%s' not in: %s", want2, err);
    pl_hf_model_free(m);
}

Test(hf_model, refuses_bad_configs)
{
    json_object_set_new(cfg_, "architectures", json_pack("[s]", "FalconForCausalLM"));
    refused("config.json: key 'architectures'", "FalconForCausalLM");
    make_llama();
    json_object_del(cfg_, "hidden_size");
    refused("config.json: key 'hidden_size'", "missing");
    make_llama();
    json_object_set_new(cfg_, "num_key_value_heads", json_integer(3));
    refused("key 'num_key_value_heads'", "does not divide");
    make_llama();
    json_object_set_new(cfg_, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "longrope",
                                                        "factor", 4.0));
    refused("key 'rope_scaling.rope_type'", "longrope");
    make_llama();
    json_object_set_new(cfg_, "quantization_config", json_pack("{s:s}", "quant_method", "gptq"));
    refused("key 'quantization_config.quant_method'", "gptq");
    make_llama();
    json_object_set_new(cfg_, "vocab_size", json_string("forty"));
    refused("key 'vocab_size'", "integer");
}

static float meta_f32(const pl_hf_model *m, const char *key)
{
    float f = NAN;
    pl_gguf_get_f32(pl_hf_model_gguf(m), key, &f);
    return f;
}

/* transformers 5 writes rope_theta and the scaling inside rope_parameters;
 * a reader of the top-level key alone took 10,000 for a Qwen3's 1e6. */
Test(hf_model, transformers5_rope_parameters)
{
    json_object_del(cfg_, "rope_theta");
    json_object_set_new(cfg_, "rope_parameters", json_pack("{s:f, s:s}", "rope_theta", 1e6,
                                                           "rope_type", "default"));
    pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
    cr_expect_eq(meta_f32(m, "llama.rope.freq_base"), 1e6f);
    cr_expect_null(pl_gguf_find(pl_hf_model_gguf(m), "llama.rope.scaling.type"));
    pl_hf_model_free(m);
    json_object_set_new(cfg_, "rope_parameters",
                        json_pack("{s:f, s:s, s:f, s:f, s:f, s:i}", "rope_theta", 5e5,
                                  "rope_type", "llama3", "factor", 8.0, "low_freq_factor", 1.0,
                                  "high_freq_factor", 4.0, "original_max_position_embeddings",
                                  64));
    m = open_as(PL_GGML_TYPE_F32);
    pl_gguf_str st;
    uint64_t v = 0;
    cr_expect_eq(meta_f32(m, "llama.rope.freq_base"), 5e5f);
    cr_expect_eq(meta_f32(m, "llama.rope.scaling.factor"), 8.0f);
    cr_expect(pl_gguf_get_str(pl_hf_model_gguf(m), "llama.rope.scaling.type", &st) == 0 &&
              st.len == 6 && !memcmp(st.ptr, "llama3", 6));
    cr_expect(pl_gguf_get_u64(pl_hf_model_gguf(m), "llama.rope.scaling.original_context_length",
                              &v) == 0 && v == 64);
    pl_hf_model_free(m);
    /* YaRN with transformers' defaults; and its attention_factor */
    json_object_set_new(cfg_, "rope_parameters",
                        json_pack("{s:f, s:s, s:f, s:i, s:f}", "rope_theta", 1e4, "rope_type",
                                  "yarn", "factor", 4.0, "original_max_position_embeddings", 32,
                                  "attention_factor", 2 * (0.1 * log(4.0) + 1)));
    m = open_as(PL_GGML_TYPE_F32);
    cr_expect_float_eq(meta_f32(m, "llama.rope.scaling.attn_factor"), 2.0f, 1e-6f);
    pl_hf_model_free(m);
    json_object_set_new(json_object_get(cfg_, "rope_parameters"), "beta_fast", json_real(16));
    refused("key 'rope_parameters.beta_fast'", "32");
    /* both layouts, disagreeing */
    json_object_set_new(cfg_, "rope_parameters", json_pack("{s:f, s:s}", "rope_theta", 1e6,
                                                           "rope_type", "default"));
    json_object_set_new(cfg_, "rope_theta", json_real(1e4));
    refused("key 'rope_theta'", "rope_parameters.rope_theta");
    json_object_set_new(cfg_, "rope_theta", json_real(1e6));
    json_object_set_new(cfg_, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear",
                                                        "factor", 2.0));
    refused("key 'rope_scaling'", "disagrees with rope_parameters");
    json_object_del(cfg_, "rope_scaling");
    json_object_set_new(cfg_, "rope_parameters", json_pack("{s:f, s:s, s:f}", "rope_theta",
                                                           1e6, "rope_type", "dynamic",
                                                           "factor", 2.0));
    refused("key 'rope_parameters.rope_type'", "dynamic");
    json_object_set_new(cfg_, "rope_parameters", json_pack("{s:f, s:s, s:f}", "rope_theta",
                                                           1e6, "rope_type", "default",
                                                           "factor", 2.0));
    refused("key 'rope_parameters.factor'", "default");
    json_object_set_new(cfg_, "rope_parameters", json_pack("{s:f, s:f}", "rope_theta", 1e6,
                                                           "partial_rotary_factor", 0.5));
    refused("key 'rope_parameters'", "partial_rotary_factor 0.5");
}

/* Keys that change the numbers are read or refused, never defaulted. */
Test(hf_model, unread_and_contradicting_keys)
{
    json_object_set_new(cfg_, "use_qk_norm", json_true());
    refused("config.json: key 'use_qk_norm'", "does not read it");
    make_llama();
    json_object_set_new(cfg_, "hidden_act", json_string("gelu"));
    refused("key 'hidden_act'", "silu");
    make_llama();
    json_object_set_new(cfg_, "mlp_bias", json_true());
    refused("key 'mlp_bias'", NULL);
    make_llama();
    json_object_set_new(cfg_, "layer_types", json_pack("[s, s]", "sliding_attention",
                                                       "full_attention"));
    refused("key 'layer_types'", "layer 0");
    make_llama();
    json_object_set_new(cfg_, "layer_types", json_pack("[s, s]", "full_attention",
                                                       "full_attention"));
    json_object_set_new(cfg_, "dtype", json_string("bfloat16"));
    json_object_set_new(cfg_, "torch_dtype", json_string("float16"));
    refused("key 'dtype'", "torch_dtype");
    json_object_del(cfg_, "torch_dtype");
    json_object_set_new(cfg_, "transformers_version", json_string("5.23.0"));
    json_object_set_new(cfg_, "use_cache", json_true());
    pl_hf_model_free(open_as(PL_GGML_TYPE_F32));
}

Test(hf_model, refuses_bad_tensors)
{
    drop("model.layers.1.mlp.up_proj.weight");
    refused("tensor 'model.layers.1.mlp.up_proj.weight' is missing", NULL);
    make_llama();
    add_f32("model.layers.0.self_attn.q_proj.bias", H * HD, 0);
    refused("model.safetensors: tensor 'model.layers.0.self_attn.q_proj.bias' is not part", NULL);
    make_llama();
    add_f32("model.layers.2.mlp.up_proj.weight", FF, E);
    refused("tensor 'model.layers.2.mlp.up_proj.weight': layer 2", "num_hidden_layers 2");
    make_llama();
    find("model.layers.0.mlp.gate_proj.weight")->shape[0] = FF / 2;
    find("model.layers.0.mlp.gate_proj.weight")->nbytes /= 2;
    refused("tensor 'model.layers.0.mlp.gate_proj.weight': shape [32, 32] disagrees with "
            "config.json", "intermediate_size");
    make_llama();
    drop("lm_head.weight");
    refused("tensor 'lm_head.weight' is missing", NULL);
    make_llama();
    snprintf(find("model.norm.weight")->dtype, 16, "I32");
    refused("tensor 'model.norm.weight': dtype I32", NULL);
    make_llama();
    float nan = NAN;
    memcpy(find("model.layers.0.mlp.down_proj.weight")->data + 4 * 70, &nan, 4);
    refused("tensor 'model.layers.0.mlp.down_proj.weight': element 6 of row 1", "finite");
    make_llama();
    snprintf(find("model.layers.0.mlp.down_proj.weight")->dtype, 16, "F8_E4M3");
    find("model.layers.0.mlp.down_proj.weight")->nbytes /= 4;
    refused("tensor 'model.layers.0.mlp.down_proj.weight': FP8 weights without a scale", NULL);
    make_llama();
    add_f32("model.layers.0.mlp.down_proj.weight_scale", 3, 0);
    refused("tensor 'model.layers.0.mlp.down_proj.weight_scale': a scale for F32", NULL);
}

Test(hf_model, refuses_missing_files)
{
    char err[512] = "", p[512];
    pl_hf_opts o = {.weight_type = PL_GGML_TYPE_Q8_0};
    cr_expect_null(pl_hf_model_open(dir_, &o, err, sizeof err));
    cr_expect(strstr(err, "config.json: missing"), "%s", err);
    snprintf(p, sizeof p, "%s/config.json", dir_);
    FILE *f = fopen(p, "w");
    fputs("{\n \"architectures\": [\"LlamaForCausalLM\"],\n \"hidden_size\": }\n", f);
    fclose(f);
    cr_expect_null(pl_hf_model_open(dir_, &o, err, sizeof err));
    cr_expect(strstr(err, "config.json:3:"), "%s", err);
    cr_assert_eq(json_dump_file(cfg_, p, 0), 0);
    cr_expect_null(pl_hf_model_open(dir_, &o, err, sizeof err));
    cr_expect(strstr(err, "no model.safetensors"), "%s", err);
}

/* ---- the Hugging Face cache ---- */

static void mkdirs(const char *p)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    cr_assert_eq(system(cmd), 0);
}

static void touch(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

Test(hf_model, cache_resolution)
{
    char hub[400], p[600], out[4096], err[2048];
    snprintf(hub, sizeof hub, "%s/hub", dir_);
    setenv("HF_HUB_CACHE", hub, 1);
    snprintf(p, sizeof p, "%s/models--org--name/snapshots/abc123", hub);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--org--name/snapshots/abc123/config.json", hub);
    touch(p, "{}");
    /* the only snapshot, then refs/main, then a revision */
    cr_assert_eq(pl_hf_resolve("org/name", NULL, out, sizeof out, err, sizeof err),
                 PL_MODEL_KIND_HF, "%s", err);
    cr_expect(strstr(out, "models--org--name/snapshots/abc123"), "%s", out);
    snprintf(p, sizeof p, "%s/models--org--name/snapshots/def456", hub);
    mkdirs(p);
    cr_expect_eq(pl_hf_resolve("org/name", NULL, out, sizeof out, err, sizeof err), -1);
    cr_expect(strstr(err, "2 snapshots"), "%s", err);
    snprintf(p, sizeof p, "%s/models--org--name/refs", hub);
    mkdirs(p);
    snprintf(p, sizeof p, "%s/models--org--name/refs/main", hub);
    touch(p, "abc123\n");
    cr_assert_eq(pl_hf_resolve("org/name", "", out, sizeof out, err, sizeof err),
                 PL_MODEL_KIND_HF, "%s", err);
    cr_expect_eq(pl_hf_resolve("org/name", "def456", out, sizeof out, err, sizeof err), -1);
    cr_expect(strstr(err, "no config.json"), "%s", err);
    /* missing: every folder searched is named */
    setenv("HF_HOME", dir_, 1);
    cr_expect_eq(pl_hf_resolve("org/other", NULL, out, sizeof out, err, sizeof err), -1);
    cr_expect(strstr(err, "models--org--other"), "%s", err);
    cr_expect(strstr(err, hub), "%s", err);
    cr_expect(strstr(err, ".cache/huggingface/hub"), "%s", err);
    cr_expect(strstr(err, "does not download"), "%s", err);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    /* files, folders, names that are neither */
    cr_expect_eq(pl_hf_resolve(p, NULL, out, sizeof out, err, sizeof err), PL_MODEL_KIND_GGUF);
    cr_expect_eq(pl_hf_resolve(hub, NULL, out, sizeof out, err, sizeof err), -1);
    cr_expect(strstr(err, "without config.json"), "%s", err);
    cr_expect_eq(pl_hf_resolve("../nope/x.gguf", NULL, out, sizeof out, err, sizeof err), -1);
    cr_expect(strstr(err, "no such file"), "%s", err);
}

/* A multimodal Gemma 3 checkpoint: its text model under text_config (what
 * it leaves out takes transformers' defaults) and language_model., its
 * vision tower left alone. */
static void make_gemma3_composite(const char *prefix)
{
    char n[160];
    for (int i = 0; i < nt_; i++)
        free(ts_[i].data);
    nt_ = 0;
    snprintf(n, sizeof n, "%sembed_tokens.weight", prefix);
    add_f32(n, NV, E);
    snprintf(n, sizeof n, "%snorm.weight", prefix);
    add_f32(n, E, 0);
    add_f32("model.vision_tower.vision_model.embeddings.patch_embedding.weight", 4, 4);
    add_f32("model.multi_modal_projector.mm_input_projection_weight", 4, 4);
    for (int l = 0; l < NL; l++) {
        struct { const char *p; long r, c; } t[] = {
            {"input_layernorm", E, 0}, {"post_attention_layernorm", E, 0},
            {"pre_feedforward_layernorm", E, 0}, {"post_feedforward_layernorm", E, 0},
            {"self_attn.q_norm", HD, 0}, {"self_attn.k_norm", HD, 0},
            {"self_attn.q_proj", H * HD, E}, {"self_attn.k_proj", KV * HD, E},
            {"self_attn.v_proj", KV * HD, E}, {"self_attn.o_proj", E, H * HD},
            {"mlp.gate_proj", FF, E}, {"mlp.up_proj", FF, E}, {"mlp.down_proj", E, FF}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(n, sizeof n, "%slayers.%d.%s.weight", prefix, l, t[i].p);
            add_f32(n, t[i].r, t[i].c);
        }
    }
    json_decref(cfg_);
    cfg_ = json_pack("{s:[s], s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}}",
                     "architectures", "Gemma3ForConditionalGeneration", "model_type", "gemma3",
                     "text_config", "hidden_size", E, "intermediate_size", FF,
                     "num_hidden_layers", NL, "num_attention_heads", H, "num_key_value_heads",
                     KV, "head_dim", HD, "vocab_size", NV, "query_pre_attn_scalar", HD,
                     "sliding_window", 8);
}

Test(hf_model, gemma3_composite_text_model)
{
    const char *prefixes[] = {"model.language_model.", "language_model.model."};
    for (int k = 0; k < 2; k++) {
        make_gemma3_composite(prefixes[k]);
        pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
        const pl_gguf *g = pl_hf_model_gguf(m);
        uint64_t v;
        float f;
        cr_expect(pl_gguf_get_u64(g, "gemma3.block_count", &v) == 0 && v == NL);
        cr_expect(pl_gguf_get_u64(g, "gemma3.attention.sliding_window", &v) == 0 && v == 8);
        cr_expect(pl_gguf_get_f32(g, "gemma3.rope.freq_base", &f) == 0 && f == 1e6f);
        cr_expect_null(pl_gguf_tensor_find(g, "output.weight"));           /* tied */
        const pl_gguf_tensor *qn = pl_gguf_tensor_find(g, "blk.1.attn_q_norm.weight");
        char name[160];
        snprintf(name, sizeof name, "%slayers.1.self_attn.q_norm.weight", prefixes[k]);
        cr_assert(qn);
        cr_expect_eq(((const float *)qn->data)[3], f32_at(find(name), 3) + 1.0f);  /* 1 + w */
        pl_hf_model_free(m);
    }
    json_object_set_new(json_object_get(cfg_, "text_config"), "num_key_value_heads",
                        json_integer(3));
    refused("config.json: key 'text_config.num_key_value_heads'", "does not divide");
    json_object_set_new(cfg_, "text_config", json_string("gemma"));
    refused("config.json: key 'text_config': must be an object", NULL);
    /* transformers 5: one rope block per layer type */
    make_gemma3_composite("model.language_model.");
    json_t *tc = json_object_get(cfg_, "text_config");
    json_object_set_new(tc, "rope_parameters",
                        json_pack("{s:{s:f, s:s}, s:{s:f, s:s}}", "full_attention", "rope_theta",
                                  2e6, "rope_type", "default", "sliding_attention",
                                  "rope_theta", 2e4, "rope_type", "default"));
    json_object_set_new(tc, "layer_types", json_pack("[s, s]", "sliding_attention",
                                                     "sliding_attention"));
    json_object_set_new(tc, "_sliding_window_pattern", json_integer(6));
    pl_hf_model *m = open_as(PL_GGML_TYPE_F32);
    cr_expect_eq(meta_f32(m, "gemma3.rope.freq_base"), 2e6f);
    cr_expect_eq(meta_f32(m, "gemma3.rope.freq_base_swa"), 2e4f);
    pl_hf_model_free(m);
    json_object_set_new(tc, "rope_local_base_freq", json_real(1e4));
    refused("key 'text_config.rope_local_base_freq'", "sliding_attention.rope_theta");
    make_gemma3_composite("model.language_model.");
    json_object_set_new(json_object_get(cfg_, "text_config"), "intermediate_size",
                        json_integer(FF * 2));
    refused("disagrees with config.json", "intermediate_size");
}

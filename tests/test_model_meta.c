/* test_model_meta.c - the metadata paths of the architecture table
 * (backends/engine/model/model_meta.c) on the tiny family models of
 * tests/fixtures/gen_families.py and gen_moe.py, edited in memory: a missing, mistyped,
 * out-of-range or contradictory key, and a key of a feature parley does
 * not implement, is one error line naming the key; every truncation of a
 * file and a few thousand byte flips of its metadata are an error or a
 * model, never a crash (the same checks, unbounded, are the libFuzzer
 * target tests/fuzz/fuzz_model.c). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"

typedef struct image {
    uint8_t *p;
    size_t n;
} image;

static image read_fixture(const char *name)
{
    const char *src = getenv("PARLEY_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    image im = {.n = (size_t)ftell(f)};
    fseek(f, 0, SEEK_SET);
    im.p = malloc(im.n);
    cr_assert_eq(fread(im.p, 1, im.n, f), im.n);
    fclose(f);
    return im;
}

/* The metadata entry of key, which the test may edit (its value lives in
 * the image). */
static pl_gguf_kv *kv_of(pl_gguf *g, const char *key)
{
    pl_gguf_kv *kv = (pl_gguf_kv *)pl_gguf_find(g, key);
    cr_assert(kv, "no key %s", key);
    return kv;
}

/* Hide a key: a name no lookup matches. */
static void drop(pl_gguf *g, const char *key) { kv_of(g, key)->key.len = 0; }

/* Load g; expect an error that contains want. */
static void expect_error(pl_gguf *g, const char *want, const char *what)
{
    char err[256] = "";
    pl_model *m = pl_model_load(g, NULL, err, sizeof err);
    cr_expect_null(m, "%s: loaded", what);
    cr_expect(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", what, err, want);
    cr_expect_null(strchr(err, '\n'), "%s: one line", what);
    pl_model_free(m);
}

typedef void edit_fn(pl_gguf *g);

/* Parse a fresh copy of the fixture, apply the edit, expect the error. */
static void check(const char *file, edit_fn *edit, const char *want)
{
    image im = read_fixture(file);
    char err[256];
    pl_gguf *g = pl_gguf_parse(im.p, im.n, err, sizeof err);
    cr_assert(g, "%s", err);
    edit(g);
    expect_error(g, want, want);
    pl_gguf_free(g);
    free(im.p);
}

static void no_window(pl_gguf *g) { drop(g, "gemma3.attention.sliding_window"); }
static void window_str(pl_gguf *g)
{
    pl_gguf_kv *kv = kv_of(g, "gemma3.attention.sliding_window");
    kv->type = PL_GGUF_TYPE_STRING;
    kv->v.str = (pl_gguf_str){"512", 3};
}
static void kv_heads_3(pl_gguf *g) { kv_of(g, "gemma3.attention.head_count_kv")->v.u64 = 3; }
static void heads_0(pl_gguf *g) { kv_of(g, "qwen3.attention.head_count")->v.u64 = 0; }
static void key_len_odd(pl_gguf *g)
{
    kv_of(g, "gemma3.attention.key_length")->v.u64 = 31;
    kv_of(g, "gemma3.attention.value_length")->v.u64 = 31;
}
static void value_len(pl_gguf *g) { kv_of(g, "gemma3.attention.value_length")->v.u64 = 16; }
static void experts(pl_gguf *g)
{
    /* the file's own key renamed: an expert count of 2 */
    pl_gguf_kv *kv = kv_of(g, "qwen3.attention.head_count");
    kv->key = (pl_gguf_str){"qwen3.expert_count", 18};
    kv_of(g, "qwen3.attention.head_count_kv")->key =
        (pl_gguf_str){"qwen3.attention.head_count", 26};
}
static void longrope(pl_gguf *g)
{
    pl_gguf_kv *kv = kv_of(g, "gemma3.rope.scaling.type");
    kv->v.str = (pl_gguf_str){"longrope", 8};
}
/* Experts (tiny_qwen3moe, tiny_mixtral, tiny_gptoss). */
static void used_over(pl_gguf *g) { kv_of(g, "qwen3moe.expert_used_count")->v.u64 = 9; }
static void used_zero(pl_gguf *g) { kv_of(g, "qwen3moe.expert_used_count")->v.u64 = 0; }
static void count_missing(pl_gguf *g) { drop(g, "qwen3moe.expert_count"); }
static void count_huge(pl_gguf *g) { kv_of(g, "qwen3moe.expert_count")->v.u64 = 100000; }
static void count_other(pl_gguf *g) { kv_of(g, "qwen3moe.expert_count")->v.u64 = 7; }
/* context_length (its default is harmless) renamed to another key */
static void rename_ctx(pl_gguf *g, const char *arch, const char *key, uint64_t v)
{
    char k[96];
    snprintf(k, sizeof k, "%s.context_length", arch);
    pl_gguf_kv *kv = kv_of(g, k);
    kv->key = (pl_gguf_str){key, strlen(key)};
    kv->v.u64 = v;
}
static void gating_sigmoid(pl_gguf *g)
{
    rename_ctx(g, "qwen3moe", "qwen3moe.expert_gating_func", 2);
}
static void gating_softmax_oss(pl_gguf *g)
{
    rename_ctx(g, "gpt-oss", "gpt-oss.expert_gating_func", 1);
}
static void shared_experts(pl_gguf *g)
{
    rename_ctx(g, "qwen3moe", "qwen3moe.expert_shared_count", 1);
}
static void yarn_log_mul(pl_gguf *g)
{
    rename_ctx(g, "gpt-oss", "gpt-oss.rope.scaling.yarn_log_multiplier", 1);
}
static void norm_w_int(pl_gguf *g)
{
    pl_gguf_kv *kv = kv_of(g, "qwen3moe.expert_weights_norm");
    kv->type = PL_GGUF_TYPE_UINT32;
    kv->v.u64 = 1;
}
static void oss_no_window(pl_gguf *g) { drop(g, "gpt-oss.attention.sliding_window"); }
static void oss_no_ff_exp(pl_gguf *g) { drop(g, "gpt-oss.expert_feed_forward_length"); }
static void mixtral_dense(pl_gguf *g) { drop(g, "llama.expert_count"); }
static void layers_huge(pl_gguf *g) { kv_of(g, "qwen3.block_count")->v.u64 = 1u << 30; }
static void layers_more(pl_gguf *g) { kv_of(g, "qwen3.block_count")->v.u64 = 3; }
static void cap_zero(pl_gguf *g) { kv_of(g, "gemma2.final_logit_softcapping")->v.f64 = 0; }
static void cap_on_gemma3(pl_gguf *g)
{
    kv_of(g, "gemma3.rope.freq_base")->key = (pl_gguf_str){"gemma3.attn_logit_softcapping", 29};
}
static void eps_missing(pl_gguf *g) { drop(g, "qwen3.attention.layer_norm_rms_epsilon"); }
static void eps_int(pl_gguf *g)
{
    pl_gguf_kv *kv = kv_of(g, "qwen3.attention.layer_norm_rms_epsilon");
    kv->type = PL_GGUF_TYPE_UINT32;
    kv->v.u64 = 1;
}
static void window_on_qwen3(pl_gguf *g)
{
    kv_of(g, "qwen3.rope.freq_base")->key = (pl_gguf_str){"qwen3.attention.sliding_window", 30};
}
static void arch_unknown(pl_gguf *g)
{
    kv_of(g, "general.architecture")->v.str = (pl_gguf_str){"mamba", 5};
}
static void vocab_size(pl_gguf *g)
{
    kv_of(g, "qwen3.rope.freq_base")->key = (pl_gguf_str){"qwen3.vocab_size", 16};
}

Test(model_meta, bad_keys_are_named)
{
    check("tiny_gemma3.gguf", no_window, "gemma3.attention.sliding_window: missing");
    check("tiny_gemma3.gguf", window_str, "gemma3.attention.sliding_window: expected an integer");
    check("tiny_gemma3.gguf", kv_heads_3, "gemma3.attention.head_count_kv");
    check("tiny_qwen3.gguf", heads_0, "qwen3.attention.head_count: 0 is out of range");
    check("tiny_gemma3.gguf", key_len_odd, "must be even");
    check("tiny_gemma3.gguf", value_len, "gemma3.attention.value_length: 16 differs");
    check("tiny_qwen3.gguf", experts, "qwen3.expert_count: mixture-of-experts");
    check("tiny_gemma3.gguf", longrope, "gemma3.rope.scaling.type: unsupported rope scaling "
                                        "type 'longrope'");
    check("tiny_qwen3.gguf", layers_huge, "qwen3.block_count");
    check("tiny_qwen3.gguf", layers_more, "missing tensor blk.2.attn_norm.weight");
    check("tiny_gemma2.gguf", cap_zero, "gemma2.final_logit_softcapping: 0 must be a positive");
    check("tiny_gemma3.gguf", cap_on_gemma3, "gemma3.attn_logit_softcapping: attention "
                                             "soft-capping is not part of gemma3");
    check("tiny_qwen3.gguf", eps_missing, "qwen3.attention.layer_norm_rms_epsilon: missing");
    check("tiny_qwen3.gguf", eps_int, "expected a float");
    check("tiny_qwen3.gguf", window_on_qwen3, "qwen3.attention.sliding_window: "
                                               "sliding-window attention is not part of qwen3");
    check("tiny_qwen3.gguf", arch_unknown, "unsupported model architecture 'mamba'");
    check("tiny_qwen3.gguf", vocab_size, "qwen3.vocab_size: does not equal");
}

static void g4_shared_all(pl_gguf *g) { kv_of(g, "gemma4.attention.shared_kv_layers")->v.u64 = 5; }
static void g4_shared_global(pl_gguf *g)
{
    kv_of(g, "gemma4.attention.shared_kv_layers")->v.u64 = 3;   /* layer 2: no earlier global */
}
static void g4_shared_str(pl_gguf *g)
{
    kv_of(g, "gemma4.attention.shared_kv_layers")->type = PL_GGUF_TYPE_STRING;
}
static void g4_no_key_swa(pl_gguf *g) { drop(g, "gemma4.attention.key_length_swa"); }
static void g4_value_swa(pl_gguf *g) { kv_of(g, "gemma4.attention.value_length_swa")->v.u64 = 8; }
static void g4_rot_swa(pl_gguf *g) { kv_of(g, "gemma4.rope.dimension_count_swa")->v.u64 = 18; }
static void g4_no_pattern(pl_gguf *g) { drop(g, "gemma4.attention.sliding_window_pattern"); }
static void g4_no_ple(pl_gguf *g) { drop(g, "gemma4.embedding_length_per_layer_input"); }
static void g4_ple_wide(pl_gguf *g)
{
    kv_of(g, "gemma4.embedding_length_per_layer_input")->v.u64 = 16;
}
static void g4_ple_str(pl_gguf *g)
{
    kv_of(g, "gemma4.embedding_length_per_layer_input")->type = PL_GGUF_TYPE_STRING;
}
static void g4_kv_heads(pl_gguf *g) { kv_of(g, "gemma4.attention.head_count_kv")->v.u64 = 3; }
static void g4_pattern_short(pl_gguf *g)
{
    kv_of(g, "gemma4.attention.sliding_window_pattern")->v.arr.n = 4;
}
static void g4_ff_short(pl_gguf *g) { kv_of(g, "gemma4.feed_forward_length")->v.arr.n = 4; }
static void g4_ff_float(pl_gguf *g)
{
    kv_of(g, "gemma4.feed_forward_length")->v.arr.type = PL_GGUF_TYPE_FLOAT32;
}
static void g4_shared_on_gemma3(pl_gguf *g)
{
    pl_gguf_kv *kv = kv_of(g, "gemma3.attention.head_count_kv");
    static const char k[] = "gemma3.attention.shared_kv_layers";
    kv->key.ptr = k;
    kv->key.len = sizeof k - 1;
}

/* Gemma 4's keys (tiny_gemma4_e2b.gguf, gen_gemma4.py): each missing,
 * mistyped or contradictory one is named. */
Test(model_meta, bad_gemma4_keys_are_named)
{
    const char *f = "tiny_gemma4_e2b.gguf";
    check(f, g4_shared_all, "gemma4.attention.shared_kv_layers: 5 is out of range [0, 4]");
    check(f, g4_shared_global, "gemma4.attention.shared_kv_layers: shared layer 2 has no "
                               "earlier global layer");
    check(f, g4_shared_str, "gemma4.attention.shared_kv_layers: expected an integer");
    check(f, g4_no_key_swa, "gemma4.attention.key_length_swa: missing");
    check(f, g4_value_swa, "gemma4.attention.value_length_swa: 8 differs from key_length_swa");
    check(f, g4_rot_swa, "gemma4.rope.dimension_count_swa: 18 rotated dims");
    check(f, g4_no_pattern, "gemma4.attention.sliding_window_pattern: missing");
    check(f, g4_pattern_short, "gemma4.attention.sliding_window_pattern: expected 5 booleans");
    check(f, g4_no_ple, "gemma4.embedding_length_per_layer_input: missing");
    check(f, g4_ple_wide, "per_layer_token_embd.weight: shape");
    check(f, g4_ple_str, "gemma4.embedding_length_per_layer_input: expected an integer");
    check(f, g4_kv_heads, "gemma4.attention.head_count_kv: 3 is out of range");
    /* tiny_gemma4_wide.gguf: feed_forward_length one per layer */
    check("tiny_gemma4_wide.gguf", g4_ff_short,
          "gemma4.feed_forward_length: expected 5 integers (one per layer)");
    check("tiny_gemma4_wide.gguf", g4_ff_float,
          "gemma4.feed_forward_length: expected 5 integers (one per layer)");
    check("tiny_gemma3.gguf", g4_shared_on_gemma3,
          "gemma3.attention.shared_kv_layers: layers sharing earlier layers' K/V is not "
          "supported");
}

Test(model_meta, bad_expert_keys_are_named)
{
    check("tiny_qwen3moe.gguf", used_over, "qwen3moe.expert_used_count: 9 is out of range [1, 8]");
    check("tiny_qwen3moe.gguf", used_zero, "qwen3moe.expert_used_count: 0 is out of range");
    check("tiny_qwen3moe.gguf", count_missing, "qwen3moe.expert_count: missing");
    check("tiny_qwen3moe.gguf", count_huge, "qwen3moe.expert_count: 100000 is out of range");
    check("tiny_qwen3moe.gguf", count_other, "tensor blk.0.ffn_gate_inp.weight: shape");
    check("tiny_qwen3moe.gguf", gating_sigmoid, "qwen3moe.expert_gating_func: gating "
                                                "function 2 is not supported");
    check("tiny_gptoss.gguf", gating_softmax_oss, "gpt-oss.expert_gating_func: gating "
                                                  "function 1 is not supported");
    check("tiny_qwen3moe.gguf", shared_experts, "qwen3moe.expert_shared_count: shared experts");
    check("tiny_gptoss.gguf", yarn_log_mul, "gpt-oss.rope.scaling.yarn_log_multiplier: YaRN's");
    check("tiny_qwen3moe.gguf", norm_w_int, "qwen3moe.expert_weights_norm: expected a bool");
    check("tiny_gptoss.gguf", oss_no_window, "gpt-oss.attention.sliding_window: missing");
    check("tiny_gptoss.gguf", oss_no_ff_exp, "gpt-oss.expert_feed_forward_length: missing");
    check("tiny_mixtral.gguf", mixtral_dense, "llama.expert_used_count: 2 is out of range [0, 0]");
}

/* A gemma3 file read as gemma2 (the name changed in place): its q/k norm
 * tensors are no part of gemma2, and are refused rather than ignored. */
Test(model_meta, unused_tensor_is_refused)
{
    image im = read_fixture("tiny_gemma3.gguf");
    for (size_t i = 0; i + 6 <= im.n; i++)
        if (!memcmp(im.p + i, "gemma3", 6))
            im.p[i + 5] = '2';
    char err[256];
    pl_gguf *g = pl_gguf_parse(im.p, im.n, err, sizeof err);
    cr_assert(g, "%s", err);
    expect_error(g, "tensor blk.0.attn_q_norm.weight: not used by architecture gemma2",
                 "gemma3 as gemma2");
    pl_gguf_free(g);
    free(im.p);
}

/* Every prefix of each file, and byte flips all over its metadata: parse
 * and load give a model or an error message, never a crash (ASan and
 * UBSan check the reads in the sanitized run). */
static void mangle(const char *file)
{
    image im = read_fixture(file);
    char err[256];
    uint8_t *copy = malloc(im.n);
    size_t meta_end = 0;
    pl_gguf *g0 = pl_gguf_parse(im.p, im.n, err, sizeof err);
    cr_assert(g0);
    meta_end = (size_t)((const uint8_t *)g0->tensors[0].name.ptr - im.p) + 64;
    pl_gguf_free(g0);
    uint32_t s = 2024;
    for (size_t k = 0; k < 3000 + meta_end; k++) {
        memcpy(copy, im.p, im.n);
        size_t n = im.n;
        if (k < meta_end) {
            n = k;                               /* truncated */
        } else {
            s = s * 1103515245u + 12345u;
            copy[(s >> 8) % meta_end] ^= (uint8_t)(1u << (s >> 28) % 8);  /* one flip */
        }
        pl_gguf *g = pl_gguf_parse(copy, n, err, sizeof err);
        if (!g)
            continue;
        err[0] = 0;
        pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_keep_packed_all};
        pl_model *m = pl_model_load(g, &mo, err, sizeof err);
        cr_expect(m || err[0], "%s: no model and no message at %zu", file, k);
        pl_model_free(m);
        pl_gguf_free(g);
    }
    free(copy);
    free(im.p);
}

Test(model_meta, truncations_and_flips_never_crash, .timeout = 120)
{
    mangle("tiny_qwen3.gguf");
    mangle("tiny_gemma2.gguf");
    mangle("tiny_gemma3.gguf");
    mangle("tiny_mistral.gguf");
    mangle("tiny_qwen3moe.gguf");
    mangle("tiny_gptoss_q8.gguf");
    mangle("tiny_qwen35moe.gguf");
}

/* The fuzz target's seeds (tests/fuzz/make_model_corpus.py) are models of
 * each architecture, with their vocabularies, so fuzzing starts inside the
 * table's paths. */
Test(model_meta, fuzz_seeds_load)
{
    static const char *const seeds[] = {"llama_swa", "qwen2", "qwen3", "gemma2", "gemma3",
                                        "qwen3moe", "gpt_oss", "gemma4", "qwen35",
                                        "qwen35moe"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char name[96], err[256];
        snprintf(name, sizeof name, "../fuzz/model_corpus/%s.gguf", seeds[i]);
        image im = read_fixture(name);
        pl_gguf *g = pl_gguf_parse(im.p, im.n, err, sizeof err);
        cr_assert(g, "%s: %s", name, err);
        pl_model *m = pl_model_load(g, NULL, err, sizeof err);
        cr_expect(m, "%s: %s", name, err);
        pl_model_free(m);
        pl_gguf_free(g);
        free(im.p);
    }
}

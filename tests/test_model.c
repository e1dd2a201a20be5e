/* test_model.c - backends/engine/model/model.c on small synthetic GGUF images:
 * hyperparameters, tied embeddings, clear errors for an unsupported
 * architecture or a mismatched shape, rope scaling; and the CPU runner on
 * that model: prefill + decode over the paged cache equals one prefill,
 * placeholders without a previous sample are an error. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"

enum { E = 32, NH = 2, NKV = 1, HD = 16, FF = 64, NV = 8 };

typedef struct buf { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void kv_u32(buf *b, const char *k, uint32_t v) { put_str(b, k); put_u32(b, 4); put_u32(b, v); }
static void kv_f32(buf *b, const char *k, float v) { put_str(b, k); put_u32(b, 6); put(b, &v, 4); }
static void kv_str(buf *b, const char *k, const char *v) { put_str(b, k); put_u32(b, 8); put_str(b, v); }

typedef struct tdesc { char name[48]; uint64_t ne0, ne1; } tdesc;

/* A one-layer llama-shaped F32 model; bad_k gives attn_k a wrong shape. */
static buf build(const char *arch, int bad_k)
{
    tdesc t[] = {{"token_embd.weight", E, NV}, {"output_norm.weight", E, 0},
                 {"blk.0.attn_norm.weight", E, 0}, {"blk.0.ffn_norm.weight", E, 0},
                 {"blk.0.attn_q.weight", E, NH * HD}, {"blk.0.attn_k.weight", E, NKV * HD + bad_k},
                 {"blk.0.attn_v.weight", E, NKV * HD}, {"blk.0.attn_output.weight", NH * HD, E},
                 {"blk.0.ffn_gate.weight", E, FF}, {"blk.0.ffn_up.weight", E, FF},
                 {"blk.0.ffn_down.weight", FF, E}};
    int nt = sizeof(t) / sizeof(t[0]);
    buf b = {0};
    char k[64];
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)nt);
    put_u64(&b, 8);
    kv_str(&b, "general.architecture", arch);
#define KEY(s) (snprintf(k, sizeof(k), "%s." s, arch), k)
    kv_u32(&b, KEY("block_count"), 1);
    kv_u32(&b, KEY("embedding_length"), E);
    kv_u32(&b, KEY("feed_forward_length"), FF);
    kv_u32(&b, KEY("attention.head_count"), NH);
    kv_u32(&b, KEY("attention.head_count_kv"), NKV);
    kv_f32(&b, KEY("rope.freq_base"), 10000.0f);
    kv_f32(&b, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        put_str(&b, t[i].name);
        put_u32(&b, t[i].ne1 ? 2 : 1);
        put_u64(&b, t[i].ne0);
        if (t[i].ne1)
            put_u64(&b, t[i].ne1);
        put_u32(&b, 0);          /* F32 */
        put_u64(&b, off);
        off += (t[i].ne0 * (t[i].ne1 ? t[i].ne1 : 1) * 4 + 31) / 32 * 32;
    }
    while (b.n % 32)
        put(&b, "", 1);
    uint32_t s = 12345;
    for (int i = 0; i < nt; i++) {
        size_t n = t[i].ne0 * (t[i].ne1 ? t[i].ne1 : 1), start = b.n;
        for (size_t j = 0; j < n; j++) {
            s = s * 1103515245u + 12345u;
            float v = t[i].ne1 ? ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.5f : 1.0f;
            put(&b, &v, 4);
        }
        while ((b.n - start) % 32)
            put(&b, "", 1);
    }
    return b;
}

static pl_model *load(buf *b, pl_gguf **g, char *err, size_t n)
{
    *g = pl_gguf_parse(b->p, b->n, err, n);
    cr_assert(*g, "%s", err);
    return pl_model_load(*g, NULL, err, n);
}

Test(model, loads_llama_hparams)
{
    buf b = build("llama", 0);
    pl_gguf *g;
    char err[256];
    pl_model *m = load(&b, &g, err, sizeof(err));
    cr_assert(m, "%s", err);
    cr_assert_eq(m->n_layer, 1);
    cr_assert_eq(m->n_head_kv, NKV);
    cr_assert_eq(m->head_dim, HD);
    cr_assert_eq(m->n_vocab, NV);
    cr_assert(m->tied, "no output.weight: tied to token_embd");
    cr_assert(!m->rope_neox);
    cr_assert_float_eq(m->rope_inv_freq[1], powf(10000.0f, -2.0f / HD), 1e-7f);
    pl_model_free(m);
    pl_gguf_free(g);
    free(b.p);
}

Test(model, rejects_unsupported_arch_and_bad_shape)
{
    char err[256];
    pl_gguf *g;
    buf b = build("gpt2", 0);
    cr_assert_null(load(&b, &g, err, sizeof(err)));
    cr_assert(strstr(err, "gpt2"), "%s", err);
    pl_gguf_free(g);
    free(b.p);
    b = build("llama", 1);
    cr_assert_null(load(&b, &g, err, sizeof(err)));
    cr_assert(strstr(err, "blk.0.attn_k.weight"), "%s", err);
    pl_gguf_free(g);
    free(b.p);
}

Test(model, llama3_rope_scaling)
{
    float plain[32], scaled[32];
    pl_model_rope_freqs(plain, 64, 500000.0f, "none", 1, 1, 4, 8192, NULL);
    pl_model_rope_freqs(scaled, 64, 500000.0f, "llama3", 8, 1, 4, 8192, NULL);
    for (int i = 0; i < 32; i++) {
        double wl = 2 * M_PI / plain[i];
        if (wl < 8192 / 4.0)
            cr_assert_float_eq(scaled[i], plain[i], 1e-9f, "high frequencies unchanged");
        else if (wl > 8192)
            cr_assert_float_eq(scaled[i], plain[i] / 8, 1e-9f, "low frequencies / factor");
        else
            cr_assert(scaled[i] < plain[i] && scaled[i] > plain[i] / 8);
    }
    float f[32];
    for (int i = 0; i < 32; i++)
        f[i] = 2.0f;
    pl_model_rope_freqs(scaled, 64, 500000.0f, "none", 1, 1, 4, 8192, f);
    cr_assert_float_eq(scaled[3], plain[3] / 2, 1e-9f, "rope_freqs factors divide");
}

typedef struct step { int32_t tok[8], pos[8], rs[8], slot, first, nrows, ctx; bool smp;
                      pl_seq_sampling s; pl_step_input in; } step;

static void make_step(step *st, int32_t *bt, int n, int p0, const int32_t *toks)
{
    for (int i = 0; i < n; i++) {
        st->tok[i] = toks[i];
        st->pos[i] = p0 + i;
        st->rs[i] = 0;
    }
    st->slot = 0, st->first = 0, st->nrows = n, st->ctx = p0 + n, st->smp = true;
    st->s = (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                              .top_logprobs = 3};
    st->in = (pl_step_input){.n_rows = n, .tokens = st->tok, .positions = st->pos,
                             .row_seq = st->rs, .n_seqs = 1, .seq_slot = &st->slot,
                             .seq_first_row = &st->first, .seq_n_rows = &st->nrows,
                             .seq_ctx_len = &st->ctx, .seq_sample = &st->smp,
                             .block_table = bt, .max_blocks_per_seq = 4, .sampling = &st->s};
}

Test(model, runner_decode_matches_prefill)
{
    buf b = build("llama", 0);
    pl_gguf *g;
    char err[256];
    pl_model *m = load(&b, &g, err, sizeof(err));
    cr_assert(m, "%s", err);
    pl_runner_info want = {.block_size = 2, .num_blocks = 12, .max_seqs = 1, .max_rows = 8,
                           .max_model_len = 8};
    pl_runner *r = pl_cpu_runner_new(m, &want, 2, err, sizeof(err));
    cr_assert(r, "%s", err);
    r->keep_logits = true;
    int32_t bt_a[4] = {6, 1, 3, 0}, bt_b[4] = {2, 7, 4, 5};
    int32_t toks[6] = {1, 5, 2, 7, 3, PL_TOKEN_PLACEHOLDER};
    const pl_step_output *o;
    step s1, s2;
    make_step(&s1, bt_a, 1, 0, &toks[5]);
    cr_assert_eq(r->ops->wait(r, r->ops->launch(r, &s1.in), &o), -1,
                 "a placeholder needs a previous sample");
    make_step(&s1, bt_a, 5, 0, toks);      /* prefill 5, sample the 6th */
    cr_assert_eq(r->ops->wait(r, r->ops->launch(r, &s1.in), &o), 0);
    int32_t t6 = o->sampled[0];
    float ref[NV];
    make_step(&s1, bt_b, 5, 0, toks);      /* the same in other blocks ... */
    toks[5] = t6;
    make_step(&s2, bt_b, 1, 5, &toks[5]);  /* ... then t6 as a placeholder */
    s2.tok[0] = PL_TOKEN_PLACEHOLDER;
    int a = r->ops->launch(r, &s1.in), c = r->ops->launch(r, &s2.in);
    cr_assert_eq(r->ops->launch(r, &s1.in), -1, "at most two steps in flight");
    cr_assert_eq(r->ops->wait(r, a, &o), 0);
    cr_assert_eq(o->sampled[0], t6);
    cr_assert_eq(r->ops->wait(r, c, &o), 0);
    memcpy(ref, o->logits, sizeof(ref));
    step s3;                              /* one prefill of all 6 tokens */
    make_step(&s3, bt_a, 6, 0, toks);
    cr_assert_eq(r->ops->wait(r, r->ops->launch(r, &s3.in), &o), 0);
    for (int v = 0; v < NV; v++)
        cr_assert_float_eq(o->logits[v], ref[v], 1e-4f, "vocab %d", v);
    /* Copy-on-write while a step is in flight: the copies run after it. */
    int32_t bt_c[4] = {8, 9, 10, 11};
    make_step(&s1, bt_a, 5, 0, toks);
    make_step(&s2, bt_c, 1, 5, &toks[5]);
    s2.tok[0] = PL_TOKEN_PLACEHOLDER;
    a = r->ops->launch(r, &s1.in);
    r->ops->copy_block(r, 6, 8);
    r->ops->copy_block(r, 1, 9);
    r->ops->copy_block(r, 3, 10);
    c = r->ops->launch(r, &s2.in);
    cr_assert_eq(r->ops->wait(r, a, &o), 0);
    cr_assert_eq(r->ops->wait(r, c, &o), 0);
    for (int v = 0; v < NV; v++)
        cr_assert_float_eq(o->logits[v], ref[v], 1e-4f, "after copy_block, vocab %d", v);
    double z = 0;
    for (int i = 0; i < 3; i++)
        z += exp(o->top_logprobs[i]);
    cr_assert(z > 0.3 && z <= 1.0001);
    r->ops->free(r);
    pl_model_free(m);
    pl_gguf_free(g);
    free(b.p);
}

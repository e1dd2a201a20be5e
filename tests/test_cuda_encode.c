/* test_cuda_encode.c - the encoder's CUDA kernels (encode.cuh) against
 * float64 references written from BertModel's definitions (LayerNorm over
 * the centred values, GELU's erf form, softmax attention within each text,
 * mean/CLS/last pooling, F.normalize), and the whole GPU encoder
 * (cuda_encode.h) against the CPU's pl_encode_batch on a random BERT.
 * Skipped without a GPU.
 *
 * Tolerances (tu_nerr): fp32 outputs 1e-5 of their largest value; bf16
 * outputs 8e-3 (two bf16 ulps); the whole encoder, whose GEMMs read bf16
 * weights and activations, per text cosine >= 0.9995 and 3e-2 nerr. */
#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/encode.h"
#include "backends/engine/cuda/cuda_encode.h"
#include "backends/engine/cuda/encode.cuh"

#define TOL_F32 1e-5
#define TOL_BF16 8e-3

static void ln_ref(double *x, int d, const float *w, const float *b, double eps)
{
    double mean = 0, var = 0;
    for (int c = 0; c < d; c++)
        mean += x[c];
    mean /= d;
    for (int c = 0; c < d; c++)
        var += (x[c] - mean) * (x[c] - mean);
    double inv = 1.0 / sqrt(var / d + eps);
    for (int c = 0; c < d; c++)
        x[c] = (x[c] - mean) * inv * w[c] + b[c];
}

Test(cuda_encode, embed_norm_matches_reference)
{
    SKIP_WITHOUT_GPU();
    int d = 384, rows = 37, vocab = 50, npos = 64;
    float *tok = malloc(sizeof(float) * vocab * d), *pos = malloc(sizeof(float) * npos * d);
    float type0[384], w[384], b[384];
    int32_t ids[37], ps[37];
    tu_seed(3);
    tu_fill(tok, (size_t)vocab * d, 1.0f);
    tu_fill(pos, (size_t)npos * d, 0.5f);
    tu_fill(type0, d, 0.2f);
    tu_fill(w, d, 1.0f);
    tu_fill(b, d, 0.3f);
    for (int r = 0; r < rows; r++) {
        ids[r] = (r * 7 + 3) % vocab;
        ps[r] = r % 20;
    }
    float *dt = tu_dev(tok, sizeof(float) * vocab * d), *dp = tu_dev(pos, sizeof(float) * npos * d);
    float *dty = tu_dev(type0, sizeof type0), *dw = tu_dev(w, sizeof w), *db = tu_dev(b, sizeof b);
    int32_t *di = tu_dev(ids, sizeof ids), *dps = tu_dev(ps, sizeof ps);
    float *dx = tu_dev(NULL, sizeof(float) * rows * d);
    pl_bf16 *dxb = tu_dev(NULL, sizeof(pl_bf16) * rows * d);
    OK(pl_cuda_enc_embed_norm(di, dps, dt, dp, dty, dw, db, 1e-12f, dx, dxb, rows, d, 0));
    float *got = malloc(sizeof(float) * rows * d), *gotb = malloc(sizeof(float) * rows * d);
    float *want = malloc(sizeof(float) * rows * d);
    tu_get(got, dx, sizeof(float) * rows * d);
    tu_get_bf16(gotb, dxb, (size_t)rows * d);
    for (int r = 0; r < rows; r++) {
        double x[384];
        for (int c = 0; c < d; c++)
            x[c] = (double)tok[ids[r] * d + c] + pos[ps[r] * d + c] + type0[c];
        ln_ref(x, d, w, b, 1e-12);
        for (int c = 0; c < d; c++)
            want[r * d + c] = (float)x[c];
    }
    cr_expect_leq(tu_nerr(got, want, (size_t)rows * d), TOL_F32);
    cr_expect_leq(tu_nerr(gotb, want, (size_t)rows * d), TOL_BF16);
    cudaFree(dt), cudaFree(dp), cudaFree(dty), cudaFree(dw), cudaFree(db), cudaFree(di);
    cudaFree(dps), cudaFree(dx), cudaFree(dxb);
    free(tok), free(pos), free(got), free(gotb), free(want);
}

Test(cuda_encode, add_norm_and_bias_gelu_match_reference)
{
    SKIP_WITHOUT_GPU();
    int d = 96, ff = 300, rows = 21;
    size_t nd = (size_t)rows * d, nf = (size_t)rows * ff;
    float *x = malloc(sizeof(float) * nd), *y = malloc(sizeof(float) * nd);
    float *h = malloc(sizeof(float) * nf), bias[96], w[96], b[96], bf[300];
    tu_seed(5);
    tu_fill(x, nd, 2.0f);
    tu_fill(y, nd, 1.0f);
    tu_fill(h, nf, 4.0f);
    tu_fill(bias, d, 0.5f);
    tu_fill(w, d, 1.0f);
    tu_fill(b, d, 0.1f);
    tu_fill(bf, ff, 1.0f);
    float *dx = tu_dev(x, sizeof(float) * nd), *dy = tu_dev(y, sizeof(float) * nd);
    float *dh = tu_dev(h, sizeof(float) * nf), *dbias = tu_dev(bias, sizeof bias);
    float *dw = tu_dev(w, sizeof w), *db = tu_dev(b, sizeof b), *dbf = tu_dev(bf, sizeof bf);
    pl_bf16 *dxb = tu_dev(NULL, sizeof(pl_bf16) * nd), *dhb = tu_dev(NULL, sizeof(pl_bf16) * nf);
    OK(pl_cuda_enc_add_norm(dx, dy, dbias, dw, db, 1e-5f, dxb, rows, d, 0));
    OK(pl_cuda_enc_bias(dh, dbf, 1, dhb, rows, ff, 0));
    float *gx = malloc(sizeof(float) * nd), *gh = malloc(sizeof(float) * nf);
    float *ghb = malloc(sizeof(float) * nf), *wx = malloc(sizeof(float) * nd);
    float *wh = malloc(sizeof(float) * nf);
    tu_get(gx, dx, sizeof(float) * nd);
    tu_get(gh, dh, sizeof(float) * nf);
    tu_get_bf16(ghb, dhb, nf);
    for (int r = 0; r < rows; r++) {
        double t[96];
        for (int c = 0; c < d; c++)
            t[c] = (double)x[r * d + c] + y[r * d + c] + bias[c];
        ln_ref(t, d, w, b, 1e-5);
        for (int c = 0; c < d; c++)
            wx[r * d + c] = (float)t[c];
        for (int c = 0; c < ff; c++) {
            double v = (double)h[r * ff + c] + bf[c];
            wh[r * ff + c] = (float)(0.5 * v * (1.0 + erf(v / sqrt(2.0))));
        }
    }
    cr_expect_leq(tu_nerr(gx, wx, nd), TOL_F32);
    cr_expect_leq(tu_nerr(gh, wh, nf), TOL_F32);
    cr_expect_leq(tu_nerr(ghb, wh, nf), TOL_BF16);
    cudaFree(dx), cudaFree(dy), cudaFree(dh), cudaFree(dbias), cudaFree(dw), cudaFree(db);
    cudaFree(dbf), cudaFree(dxb), cudaFree(dhb);
    free(x), free(y), free(h), free(gx), free(gh), free(ghb), free(wx), free(wh);
}

/* Texts of 1, 7, 33, 130 and 600 rows (past a 512-row limit, under the
 * kernel's), 6 heads of 64: every query attends to all of its text only. */
Test(cuda_encode, attention_stays_within_each_text)
{
    SKIP_WITHOUT_GPU();
    int lens[] = {1, 7, 33, 130, 600}, n = 5, nh = 6, hd = 64, d = nh * hd, rows = 0;
    int32_t start[5], len32[5];
    for (int t = 0; t < n; t++) {
        start[t] = rows;
        len32[t] = lens[t];
        rows += lens[t];
    }
    size_t nq = (size_t)rows * 3 * d;
    float *qkv = malloc(sizeof(float) * nq), *want = malloc(sizeof(float) * rows * d);
    float *got = malloc(sizeof(float) * rows * d);
    double *s = malloc(sizeof(double) * 600);
    tu_seed(9);
    tu_fill(qkv, nq, 1.0f);
    float scale = 1.0f / 8.0f;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < lens[t]; i++) {
                const float *q = qkv + (size_t)(start[t] + i) * 3 * d + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < lens[t]; j++) {
                    const float *k = qkv + (size_t)(start[t] + j) * 3 * d + d + h * hd;
                    double acc = 0;
                    for (int c = 0; c < hd; c++)
                        acc += (double)q[c] * k[c];
                    s[j] = acc * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < lens[t]; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int c = 0; c < hd; c++) {
                    double acc = 0;
                    for (int j = 0; j < lens[t]; j++)
                        acc += s[j] * qkv[(size_t)(start[t] + j) * 3 * d + 2 * d + h * hd + c];
                    want[(size_t)(start[t] + i) * d + h * hd + c] = (float)(acc / sum);
                }
            }
    float *dq = tu_dev(qkv, sizeof(float) * nq);
    int32_t *ds = tu_dev(start, sizeof start), *dl = tu_dev(len32, sizeof len32);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * rows * d);
    OK(pl_cuda_enc_attention(dq, ds, dl, n, 600, nh, hd, scale, dout, 0));
    tu_get_bf16(got, dout, (size_t)rows * d);
    cr_expect_leq(tu_nerr(got, want, (size_t)rows * d), TOL_BF16);
    cr_expect_eq(pl_cuda_enc_attention(dq, ds, dl, n, PL_CUDA_ENC_MAX_LEN + 1, nh, hd, scale,
                                       dout, 0), -1, "a text over the kernel's limit");
    cudaFree(dq), cudaFree(ds), cudaFree(dl), cudaFree(dout);
    free(qkv), free(want), free(got), free(s);
}

Test(cuda_encode, pooling_matches_reference)
{
    SKIP_WITHOUT_GPU();
    int lens[] = {3, 1, 17}, n = 3, d = 200, rows = 21;
    int32_t start[] = {0, 3, 4}, len32[] = {3, 1, 17};
    float *x = malloc(sizeof(float) * rows * d), got[3 * 200], want[3 * 200];
    tu_seed(11);
    tu_fill(x, (size_t)rows * d, 3.0f);
    float *dx = tu_dev(x, sizeof(float) * rows * d), *dout = tu_dev(NULL, sizeof got);
    int32_t *ds = tu_dev(start, sizeof start), *dl = tu_dev(len32, sizeof len32);
    for (int pk = 1; pk <= 3; pk++)
        for (int norm = 0; norm <= 1; norm++) {
            OK(pl_cuda_enc_pool(dx, ds, dl, n, d, pk, norm, dout, 0));
            tu_get(got, dout, sizeof got);
            for (int t = 0; t < n; t++) {
                double v[200], ss = 0;
                for (int c = 0; c < d; c++) {
                    if (pk == 1) {
                        v[c] = 0;
                        for (int r = 0; r < lens[t]; r++)
                            v[c] += x[(size_t)(start[t] + r) * d + c];
                        v[c] /= lens[t];
                    } else {
                        int r = pk == 2 ? start[t] : start[t] + lens[t] - 1;
                        v[c] = x[(size_t)r * d + c];
                    }
                    ss += v[c] * v[c];
                }
                for (int c = 0; c < d; c++)
                    want[t * d + c] = (float)(norm ? v[c] / fmax(sqrt(ss), 1e-12) : v[c]);
            }
            cr_expect_leq(tu_nerr(got, want, sizeof got / sizeof *got), TOL_F32,
                          "pooling %d, normalize %d", pk, norm);
        }
    cudaFree(dx), cudaFree(dout), cudaFree(ds), cudaFree(dl);
    free(x);
}

/* A random BERT of 2 layers, 4 heads of 16, FFN 256, in host memory. */
static float *rnd(size_t n, float scale, float shift)
{
    float *p = malloc(sizeof(float) * n);
    tu_fill(p, n, scale);
    for (size_t i = 0; i < n; i++)
        p[i] += shift;
    return p;
}

static pl_encoder *random_bert(void)
{
    pl_encoder *m = calloc(1, sizeof *m);
    *m = (pl_encoder){.n_layer = 2, .n_embd = 64, .n_head = 4, .head_dim = 16, .n_ff = 256,
                      .n_vocab = 120, .n_pos = 160, .n_types = 2, .eps = 1e-12f,
                      .pooling = PL_POOLING_MEAN};
    size_t d = 64, ff = 256;
    tu_seed(21);
    m->tok_embd = rnd(120 * d, 1.0f, 0);
    m->pos_embd = rnd(160 * d, 0.3f, 0);
    m->type_embd = rnd(2 * d, 0.1f, 0);
    m->embd_norm_w = rnd(d, 0.2f, 1.0f);
    m->embd_norm_b = rnd(d, 0.1f, 0);
    m->layers = calloc(2, sizeof *m->layers);
    for (int l = 0; l < 2; l++) {
        pl_enc_layer *y = &m->layers[l];
        float s = 1.0f / 8.0f;
        y->wq = rnd(d * d, s, 0), y->wk = rnd(d * d, s, 0), y->wv = rnd(d * d, s, 0);
        y->bq = rnd(d, 0.1f, 0), y->bk = rnd(d, 0.1f, 0), y->bv = rnd(d, 0.1f, 0);
        y->wo = rnd(d * d, s, 0), y->bo = rnd(d, 0.1f, 0);
        y->attn_norm_w = rnd(d, 0.2f, 1.0f), y->attn_norm_b = rnd(d, 0.1f, 0);
        y->w_up = rnd(ff * d, s, 0), y->b_up = rnd(ff, 0.1f, 0);
        y->w_down = rnd(d * ff, 1.0f / 16.0f, 0), y->b_down = rnd(d, 0.1f, 0);
        y->out_norm_w = rnd(d, 0.2f, 1.0f), y->out_norm_b = rnd(d, 0.1f, 0);
    }
    return m;
}

static void free_bert(pl_encoder *m)
{
    for (int l = 0; l < m->n_layer; l++) {
        pl_enc_layer *y = &m->layers[l];
        float *p[] = {y->wq, y->wk, y->wv, y->bq, y->bk, y->bv, y->wo, y->bo, y->attn_norm_w,
                      y->attn_norm_b, y->w_up, y->b_up, y->w_down, y->b_down, y->out_norm_w,
                      y->out_norm_b};
        for (size_t i = 0; i < sizeof p / sizeof *p; i++)
            free(p[i]);
    }
    free(m->layers), free(m->tok_embd), free(m->pos_embd), free(m->type_embd);
    free(m->embd_norm_w), free(m->embd_norm_b), free(m);
}

Test(cuda_encode, encoder_matches_cpu_runner)
{
    SKIP_WITHOUT_GPU();
    pl_encoder *m = random_bert();
    int lens[] = {1, 5, 40, 160, 12, 77}, n = 6, d = m->n_embd;
    int32_t *ids[6];
    for (int t = 0; t < n; t++) {
        ids[t] = malloc(sizeof(int32_t) * 200);   /* room for the refused cases' reads */
        for (int p = 0; p < 200; p++)
            ids[t][p] = (t * 31 + p * 17 + 1) % m->n_vocab;
    }
    char err[256] = "";
    pl_cuda_encoder *e = pl_cuda_encoder_new(m, 400, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    float cpu[6 * 64], gpu[6 * 64];
    pl_pooling kinds[] = {PL_POOLING_MEAN, PL_POOLING_CLS, PL_POOLING_LAST};
    for (int k = 0; k < 3; k++)
        for (int norm = 0; norm <= 1; norm++) {
            cr_assert_eq(pl_encode_batch(m, NULL, (const int32_t *const *)ids, lens, n,
                                         kinds[k], norm, cpu), 0);
            OK(pl_cuda_encode_batch(e, (const int32_t *const *)ids, lens, n, kinds[k], norm,
                                    gpu));
            for (int t = 0; t < n; t++) {
                double ab = 0, aa = 0, bb = 0;
                for (int c = 0; c < d; c++) {
                    ab += (double)gpu[t * d + c] * cpu[t * d + c];
                    aa += (double)gpu[t * d + c] * gpu[t * d + c];
                    bb += (double)cpu[t * d + c] * cpu[t * d + c];
                }
                cr_expect_geq(ab / sqrt(aa * bb), 0.9995, "pooling %d norm %d text %d: cos %f",
                              kinds[k], norm, t, ab / sqrt(aa * bb));
            }
            cr_expect_leq(tu_nerr(gpu, cpu, (size_t)n * d), 3e-2, "pooling %d norm %d",
                          kinds[k], norm);
        }
    /* a batch over max_rows, a text over n_pos, an id out of range: refused */
    int big[] = {160, 160, 160};
    cr_expect_eq(pl_cuda_encode_batch(e, (const int32_t *const *)ids, big, 3, PL_POOLING_MEAN,
                                      true, gpu), -1);
    int over[] = {161};
    cr_expect_eq(pl_cuda_encode_batch(e, (const int32_t *const *)ids, over, 1,
                                      PL_POOLING_MEAN, true, gpu), -1);
    int32_t bad[] = {0, 120}, *bads[] = {bad};
    int two[] = {2};
    cr_expect_eq(pl_cuda_encode_batch(e, (const int32_t *const *)bads, two, 1,
                                      PL_POOLING_MEAN, true, gpu), -1);
    pl_cuda_encoder_free(e);
    for (int t = 0; t < n; t++)
        free(ids[t]);
    free_bert(m);
}

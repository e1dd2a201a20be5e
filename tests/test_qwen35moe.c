/* test_qwen35moe.c - the qwen35moe family (Qwen3.5 MoE: Gated DeltaNet
 * hybrid layers, in every layer routed experts beside a shared expert with
 * its sigmoid gate) on the CPU forward pass, with
 * tests/fixtures/tiny_qwen35moe.gguf (llama.cpp's converter on a
 * transformers checkpoint, gen_qwen35moe.py) against transformers' float32
 * logits and llama-cpp-python 0.3.36's on the same file (logits_all, f32;
 * tiny_qwen35moe_ref.json):
 *  - teacher-forced logits of whole sequences within 1e-3 of transformers
 *    (1e-2 of llama.cpp, whose kernels are 5e-3 from transformers), prompt
 *    logprobs within 0.02 nats mean, the same argmax (greedy) everywhere;
 *  - one row per call and prefill in uneven pieces agree with the whole
 *    sequence within float tolerance;
 *  - batch invariance: a sequence's logits are the same bits alone and
 *    beside another sequence's rows (its experts grouped with the other's),
 *    in prefill and in decode, here and on fuzz_model's seed with Q8_0
 *    experts and shared expert (the quantised kernels).
 * The checkpoint folder itself is checked by test_hf_transformers.py and
 * test_qwen35moe.py.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/forward.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/forced.h"

#define BS 16
#define MAX_CTX 64

static pl_gguf *g_gguf;
static pl_model *g_model;
static json_t *g_ref;

static void setup(void)
{
    pl_test_open_fixture("tiny_qwen35moe.gguf", "tiny_qwen35moe_ref.json", &g_gguf, &g_model, &g_ref);
}

static void teardown(void)
{
    pl_model_free(g_model);
    pl_gguf_free(g_gguf);
    json_decref(g_ref);
}

TestSuite(qwen35moe, .init = setup, .fini = teardown, .timeout = 120);

/* Sequence i of the fixture: its ids and transformers' logits (n, nv). */
static int seq_ref(int i, int32_t *ids, float *ref)
{
    return pl_test_ref_seq(g_ref, "hf_logits", i, g_model->n_vocab, MAX_CTX, ids, ref);
}

Test(qwen35moe, loads_with_experts_and_shared_expert)
{
    const pl_model *m = g_model;
    cr_assert_eq(m->n_layer, 4);
    cr_assert_eq(m->n_recurrent, 3);
    cr_assert(m->layers[0].recurrent && m->layers[2].recurrent && !m->layers[3].recurrent);
    cr_assert(m->attn_out_gate);
    cr_assert_eq(m->n_expert, 4);
    cr_assert_eq(m->n_expert_used, 2);
    cr_assert_eq(m->n_ff_exp, 16);
    cr_assert_eq(m->n_ff_shexp, 32);
    cr_assert(m->moe_norm_w);
    for (int l = 0; l < m->n_layer; l++) {
        const pl_layer *y = &m->layers[l];
        cr_assert(y->gate_inp_shexp && y->gate_shexp.rows == 32 && y->down_shexp.cols == 32,
                  "layer %d: no shared expert", l);
    }
}

/* parley's teacher-forced logits on every fixture sequence against the
 * reference under key (what: its name in messages): max |dlogit| below
 * tol, prompt logprobs within 0.02 nats mean, greedy tokens equal. */
static void match_reference(const char *key, const char *what, double tol)
{
    pl_test_match_ref(g_model, g_ref, key, what, tol, 0, 0.02, BS, MAX_CTX);
}

Test(qwen35moe, logits_match_transformers) { match_reference("hf_logits", "transformers", 1e-3); }

/* llama.cpp 0.3.36 (llama-cpp-python, logits_all) on the same GGUF; its
 * ggml kernels are themselves up to 5e-3 from transformers on these ids
 * (gen_qwen35moe.py prints it), hence the wider bound on single logits. */
Test(qwen35moe, logits_match_llama_cpp)
{
    match_reference("llama_logits", "llama.cpp 0.3.36", 1e-2);
}

/* The whole sequence at once (chunked form), one row a call (the
 * recurrent step), and pieces of 5, 11 and the rest: the same logits
 * within float tolerance, and each form within 1e-3 of transformers. The
 * bound is wider than the dense model's 1e-4: the two forms' rounding
 * moves these logits by up to 5e-4 (transformers' own step and chunked
 * forms are 1.6e-4 apart on rows 7..15; gen_qwen35moe.py prints it). */
Test(qwen35moe, chunked_equals_step)
{
    int32_t ids[MAX_CTX];
    float *ref = malloc(sizeof(float) * MAX_CTX * g_model->n_vocab);
    int n = seq_ref(1, ids, ref), ends[] = {5, 16, n};
    pl_test_check_pieces(g_model, ids, n, ends, 3, ref, 1e-3, BS, MAX_CTX);
    free(ref);
}

/* Sequence 0 alone, then beside sequence 2 (before and after it, its own
 * slot): the same bits, in prefill and in decode (the ids taken modulo m's
 * vocabulary). */
static void batch_invariant(const pl_model *m)
{
    int32_t a[MAX_CTX], b[MAX_CTX];
    int na = seq_ref(0, a, NULL), nb = seq_ref(2, b, NULL);
    for (int i = 0; i < na || i < nb; i++) {
        a[i] %= m->n_vocab;
        b[i] %= m->n_vocab;
    }
    pl_test_check_batch_invariant(m, a, 20, b, BS, MAX_CTX, 0);
}

Test(qwen35moe, batch_invariant) { batch_invariant(g_model); }

/* The same on fuzz_model's qwen35moe seed (make_model_corpus.py: Q8_0
 * experts and shared expert, kept packed: the quantised kernels). */
Test(qwen35moe, batch_invariant_q8_0)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fuzz/model_corpus/qwen35moe.gguf", src ? src : ".");
    pl_gguf *g = pl_gguf_open(p, err, sizeof err);
    cr_assert(g, "%s", err);
    pl_model *m = pl_model_load(g, NULL, err, sizeof err);
    cr_assert(m, "%s", err);
    cr_assert(m->n_expert == 4 && m->n_ff_shexp > 0 && !m->layers[0].gate_exps.w.f32);
    cr_assert_eq(m->layers[0].gate_shexp.type, PL_GGML_TYPE_Q8_0);
    batch_invariant(m);
    pl_model_free(m);
    pl_gguf_free(g);
}

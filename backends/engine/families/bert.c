/* bert.c - the bert family (BertModel: all-MiniLM, BGE, E5 and the other
 * sentence-transformers encoders): an encoder that embeds, never
 * generates (encoder.h reads its file, cpu/encode.c runs it).
 *
 *   x = LayerNorm(token_embd[id] + position_embd[pos] + token_types[0])
 *   per layer: a = softmax(q.k / sqrt(head_dim)) v over the whole text
 *                  (bidirectional), q/k/v/o with biases;
 *              x = LayerNorm(x + a @ wo^T + bo);
 *              x = LayerNorm(x + gelu(x @ up^T + bu) @ down^T + bd)
 *   embedding = pool(x) (mean, first or last row), then normalised when
 *               the model says so (sentence-transformers' Normalize)
 *
 * Tensors under llama.cpp's names (convert_hf_to_gguf.py's BertModel and
 * src/models/bert.cpp), so a GGUF bert file reads the same way. */
#include "backends/engine/families/family.h"

#include <string.h>

#define E_ "embeddings."
#define L_ "encoder.layer.%d."
#define B_ "blk.%d."

static const pl_hf_tmap globals_[] = {
    {E_ "word_embeddings.weight", "token_embd.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, 0},
    {E_ "position_embeddings.weight", "position_embd.weight", PL_HF_DIM_POS, PL_HF_DIM_HIDDEN,
     0},
    {E_ "token_type_embeddings.weight", "token_types.weight", PL_HF_DIM_TYPES,
     PL_HF_DIM_HIDDEN, 0},
    {E_ "LayerNorm.weight", "token_embd_norm.weight", PL_HF_DIM_HIDDEN, 0, 0},
    {E_ "LayerNorm.bias", "token_embd_norm.bias", PL_HF_DIM_HIDDEN, 0, 0},
    PL_HF_END,
};

/* A linear layer (weight and bias) and a LayerNorm (weight and bias). */
#define LIN_(hf, gg, d0, d1)                                                         \
    {L_ hf ".weight", B_ gg ".weight", d0, d1, 0}, {L_ hf ".bias", B_ gg ".bias", d0, 0, 0}
#define LN_(hf, gg) LIN_(hf, gg, PL_HF_DIM_HIDDEN, 0)

static const pl_hf_tmap layer_[] = {
    LIN_("attention.self.query", "attn_q", PL_HF_DIM_Q, PL_HF_DIM_HIDDEN),
    LIN_("attention.self.key", "attn_k", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN),
    LIN_("attention.self.value", "attn_v", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN),
    LIN_("attention.output.dense", "attn_output", PL_HF_DIM_HIDDEN, PL_HF_DIM_Q),
    LN_("attention.output.LayerNorm", "attn_output_norm"),
    LIN_("intermediate.dense", "ffn_up", PL_HF_DIM_FF, PL_HF_DIM_HIDDEN),
    LIN_("output.dense", "ffn_down", PL_HF_DIM_HIDDEN, PL_HF_DIM_FF),
    LN_("output.LayerNorm", "layer_output_norm"),
    PL_HF_END,
};

/* BertModel's pooler (a tanh head sentence-transformers does not use) and
 * its position_ids buffer, which llama.cpp's converter drops too. */
static const char *const skip_[] = {"embeddings.position_ids", "pooler.dense.weight",
                                    "pooler.dense.bias", NULL};

/* Keys that change nothing at inference. */
static const char *const unused_[] = {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                      "classifier_dropout", "gradient_checkpointing", NULL};

static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    double eps = 1e-12;
    const char *pos = NULL;
    for (const char *const *k = unused_; *k; k++)
        pl_hf_json_get(c, *k);
    if (pl_family_hf_int(c, "max_position_embeddings", true, 1, 1 << 20, 0, &sh->n_pos, err,
                         n) ||
        pl_family_hf_int(c, "type_vocab_size", false, 1, 1 << 16, 2, &sh->n_types, err, n) ||
        pl_family_hf_num(c, "layer_norm_eps", 1e-30, 0.5, 1e-12, &eps, err, n) ||
        pl_hf_json_str(c, "position_embedding_type", false, &pos, err, n) < 0)
        return -1;
    if (pos && strcmp(pos, "absolute"))
        return pl_hf_json_fail(c, "position_embedding_type", err, n, "'%s': only absolute "
                               "position embeddings are supported", pos);
    if (sh->n_head_kv != sh->n_head)
        return pl_hf_json_fail(c, "num_key_value_heads", err, n, "%d: a BERT encoder has "
                               "one key/value head per query head", sh->n_head_kv);
    if (pl_family_hf_put_f32(s, a, "attention.layer_norm_epsilon", eps, err, n) ||
        pl_gguf_synth_bool(s, "bert.attention.causal", 0) ||
        pl_gguf_synth_u32(s, "tokenizer.ggml.token_type_count", (uint32_t)sh->n_types))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

static const pl_hf_arch hf_[] = {
    {"BertModel", "bert", layer_, 0, false, true, 10000, hparams_, NULL, globals_, skip_},
};

const pl_family pl_family_bert = {
    .name = "bert", .note = "an encoder: embeddings",
    .model = {.encoder = true, .act = PL_FFN_GELU_ERF},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU,
};

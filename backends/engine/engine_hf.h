/* engine_hf.h - the parts of a Hugging Face checkpoint folder the engine
 * opens besides the model (engine_open.c): the weights converted for the
 * runner (model/hf_model.h), the tokenizer and chat template
 * (text/tokenizer_hf.h), and generation_config.json's end-of-sequence ids.
 */
#ifndef PL_ENGINE_HF_H
#define PL_ENGINE_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/engine/model/hf_model.h"
#include "backends/text/tokenizer_hf.h"

#define PL_ENGINE_HF_MAX_EOS 16

typedef struct pl_engine_hf {
    pl_hf_model *files;          /**< the weights as a GGUF (owned) */
    pl_hf_text text;             /**< chat template, BOS/EOS text (owned) */
    int32_t eos[PL_ENGINE_HF_MAX_EOS]; /**< generation_config.json's
                                      eos_token_id (one id or a list), and
                                      config.json's: they end generation */
    int n_eos;
    /** generation_config.json's temperature, top_p, top_k, min_p,
     *  repetition_penalty and max_new_tokens, which the API applies where a
     *  request leaves them out, as vLLM does */
    pl_sampling_model_defaults sampling;
} pl_engine_hf;

/**
 * Open checkpoint folder dir for a runner: weight_type is what the weight
 * matrices become ("q8_0", ... for the CPU's --cpu-weight-type; "auto" (or
 * NULL): each in its own precision; "bf16" for CUDA), threads converts them. *tok receives the tokenizer (the caller
 * frees it). Checks that every token id fits the model's vocabulary.
 * Returns 0, or -1 with "FILE: tensor or key: why" in err (h is then
 * empty).
 */
int pl_engine_hf_open(pl_engine_hf *h, const char *dir, const char *weight_type, int threads,
                      struct pl_tokenizer **tok, char *err, size_t errlen);
void pl_engine_hf_free(pl_engine_hf *h);

/** Whether id is one of h's end-of-sequence ids. */
bool pl_engine_hf_is_eos(const pl_engine_hf *h, int32_t id);

#endif

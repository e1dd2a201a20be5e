/* tokenizer_hf.h - the tokenizer of a Hugging Face checkpoint folder:
 * tokenizer.json (the model, normalizer, pre-tokenizer, added tokens,
 * post-processor) and tokenizer_config.json (special tokens, add_bos_token,
 * the chat template), built into the same pl_tokenizer a GGUF vocabulary
 * gives (tokenizer.h).
 *
 * Read: BPE models, byte-level (ByteLevel pre-tokenizer, with Split regex
 * and Digits steps, NFC normalizer: GPT-2, SmolLM2, Llama 3, Qwen 2/3) or
 * SentencePiece-style (byte_fallback, spaces as U+2581 by a Replace
 * normalizer or a Metaspace pre-tokenizer, a prefix space by Prepend or
 * prepend_scheme: Llama 2, Mistral, Gemma). Anything else is refused with
 * the file and key named.
 */
#ifndef PL_TOKENIZER_HF_H
#define PL_TOKENIZER_HF_H

#include <stddef.h>
#include <stdint.h>

#include "backends/text/tokenizer.h"

/** What tokenizer_config.json adds to the tokenizer. */
typedef struct pl_hf_text {
    char *chat_template;         /**< Jinja source, or NULL (malloc'd) */
    char *bos_text, *eos_text;   /**< the special tokens' text ("" when none) */
} pl_hf_text;

/**
 * Build the tokenizer of checkpoint folder dir. *text (may be NULL)
 * receives the chat template and BOS/EOS texts; free with pl_hf_text_free.
 * The chat template comes from tokenizer_config.json's chat_template (a
 * string, or a list whose "default" entry is taken), else
 * chat_template.jinja, else chat_template.json. Returns NULL with
 * "FILE: key 'K': why" in err.
 */
pl_tokenizer *pl_tokenizer_from_hf(const char *dir, pl_hf_text *text, char *err,
                                   size_t errlen);
void pl_hf_text_free(pl_hf_text *text);

#endif

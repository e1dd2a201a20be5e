/* tokenizer.h - text <-> token ids for GGUF models, matching llama.cpp.
 *
 * Three models: `bert` (WordPiece as the tokenizers library does it, see
 * tokenizer_wpm.c), `gpt2` (byte-level BPE with merge ranks and a PCRE2
 * pre-tokenizer chosen by tokenizer.ggml.pre) and `llama` (SentencePiece
 * BPE with scores, U+2581 for spaces, <0xNN> byte fallback).
 * A tokenizer is immutable after creation and safe to share between
 * threads; encode allocates its own scratch per call.
 */
#ifndef PL_TOKENIZER_H
#define PL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/formats/gguf.h"

typedef struct pl_tokenizer pl_tokenizer;

/** Token types, numbered as in GGUF's tokenizer.ggml.token_type. */
typedef enum pl_token_type {
    PL_TOKEN_TYPE_UNDEFINED = 0,
    PL_TOKEN_TYPE_NORMAL = 1,
    PL_TOKEN_TYPE_UNKNOWN = 2,
    PL_TOKEN_TYPE_CONTROL = 3,
    PL_TOKEN_TYPE_USER_DEFINED = 4,
    PL_TOKEN_TYPE_UNUSED = 5,
    PL_TOKEN_TYPE_BYTE = 6,
} pl_token_type;

typedef enum pl_tokenizer_model {
    PL_TOKENIZER_MODEL_GPT2 = 1,  /**< byte-level BPE with merges */
    PL_TOKENIZER_MODEL_LLAMA = 2, /**< SentencePiece BPE with scores */
    PL_TOKENIZER_MODEL_BERT = 3,  /**< WordPiece (BertNormalizer, "##") */
} pl_tokenizer_model;

/** A vocabulary as plain arrays (what the GGUF holds), for
 *  pl_tokenizer_init. All pointers are borrowed for the call only. */
typedef struct pl_tokenizer_vocab {
    pl_tokenizer_model model;
    const char *pre;             /**< tokenizer.ggml.pre; NULL = default */
    int32_t n_tokens;
    const char *const *tokens;   /**< (n_tokens) token texts */
    const uint32_t *token_lens;  /**< (n_tokens) byte lengths */
    const float *scores;         /**< (n_tokens) or NULL */
    const int32_t *types;        /**< (n_tokens) pl_token_type or NULL */
    int32_t n_merges;
    const char *const *merges;   /**< (n_merges) "left right", rank = index */
    const uint32_t *merge_lens;  /**< (n_merges) byte lengths */
    int32_t bos, eos, unk, pad, eot, eom; /**< -1 = none */
    int add_bos, add_eos;        /**< 1/0, or -1 = model default */
    /** What add_eos appends when it is not eos: a Hugging Face template's
     *  closing token (Qwen3-Embedding's <|endoftext|>, while its eos_token,
     *  which ends generation, is <|im_end|>); tail_own false: eos. */
    bool tail_own;
    int32_t tail;
    int add_space_prefix;        /**< 1/0, or -1 = model default */
    /* Hugging Face tokenizer.json (tokenizer_hf.c); zero from a GGUF: */
    const char *const *pre_regex; /**< gpt2: split regexes applied in order
                                       instead of pre's; NULL = pre's */
    int n_pre_regex;
    int ignore_merges;           /**< gpt2: 1 on, -1 off, 0 = pre's default */
    bool nfc;                    /**< NFC-normalise text before the model */
    bool space_prefix_first;     /**< llama: the prefix space at the start of
                                      the text only, not after each special
                                      token (Metaspace prepend_scheme first) */
    bool space_prefix_if_none;   /**< llama: no prefix space before text that
                                      starts with one (a Metaspace
                                      pre-tokenizer's rule) */
    /* bert (WordPiece): BertNormalizer's switches and the model's limit */
    bool wpm_clean_text, wpm_chinese, wpm_strip_accents, wpm_lowercase;
    int32_t wpm_max_word_chars;  /**< longer words are unk; 0 = 100 */
} pl_tokenizer_vocab;

/** Build a tokenizer from plain arrays (copied). Returns NULL with a
 *  message in err for an unsupported model or pre-tokenizer or a bad
 *  vocabulary. Free with pl_tokenizer_free. */
pl_tokenizer *pl_tokenizer_init(const pl_tokenizer_vocab *v, char *err,
                                size_t errlen);

/** Read tokenizer.ggml.* from a GGUF (model, pre, tokens, scores,
 *  token_type, merges, special ids, add_bos/eos, add_space_prefix).
 *  Returns NULL with a message naming the unsupported model or pre-type
 *  or the missing/mistyped key. The tokenizer does not borrow g. */
pl_tokenizer *pl_tokenizer_from_gguf(const pl_gguf *g, char *err,
                                     size_t errlen);

void pl_tokenizer_free(pl_tokenizer *t);

/** Tokenize len bytes of text (any bytes: invalid UTF-8 is handled as
 *  llama.cpp does, by U+FFFD for gpt2 and byte fallback for llama).
 *  add_special: add BOS/EOS where the model asks for them.
 *  parse_special: recognise control tokens' text (e.g. "<|im_start|>");
 *  user-defined tokens are always recognised, as in llama.cpp.
 *  On success returns 0, *ids is malloc'd (caller frees; may be NULL when
 *  *n == 0). Returns -1 on allocation failure. */
int pl_tokenizer_encode(const pl_tokenizer *t, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t **ids,
                        int *n);

/** Raw bytes of a token: gpt2 byte-level text decoded, SPM U+2581 turned
 *  into a space and <0xNN> into the byte; control/unknown tokens give their
 *  text. Borrowed, lives as long as t. NULL (len 0) for an id out of range. */
const char *pl_tokenizer_token_bytes(const pl_tokenizer *t, int32_t id,
                                     size_t *len);

/** Concatenate the bytes of n ids into buf (at most cap bytes, then NUL
 *  when room). special: include control tokens' text; otherwise they
 *  produce nothing. Returns the full length needed, excluding the NUL. */
size_t pl_tokenizer_decode(const pl_tokenizer *t, const int32_t *ids, int n,
                           bool special, char *buf, size_t cap);

int32_t pl_tokenizer_n_vocab(const pl_tokenizer *t);

/** A vocabulary's special tokens and flags (ids are -1 when none). */
typedef struct pl_tokenizer_specials {
    pl_tokenizer_model model;
    int32_t bos, eos, unk, pad, eot;
    bool add_bos, add_eos;       /**< what encode's add_special adds */
} pl_tokenizer_specials;

/** Fill *out with t's special tokens and flags. */
void pl_tokenizer_specials_get(const pl_tokenizer *t, pl_tokenizer_specials *out);
int32_t pl_tokenizer_bos(const pl_tokenizer *t); /**< -1 when none */
int32_t pl_tokenizer_eos(const pl_tokenizer *t); /**< -1 when none */
pl_token_type pl_tokenizer_token_type(const pl_tokenizer *t, int32_t id);
/** Whether id's text stays out of a reply unless special tokens are asked
 *  for: control tokens, and unused ones (a vocabulary's padding, as
 *  llama.cpp's converter pads Qwen's), which llama.cpp's token_to_piece
 *  renders as nothing. */
bool pl_tokenizer_token_hidden(const pl_tokenizer *t, int32_t id);
/** Whether id ends generation: EOS, EOT, EOM, and control tokens whose
 *  text is a known end-of-turn marker ("<|im_end|>", "<|endoftext|>", ...). */
bool pl_tokenizer_is_eog(const pl_tokenizer *t, int32_t id);
/** Token id of an exact token text, or -1. */
int32_t pl_tokenizer_find(const pl_tokenizer *t, const char *text, size_t len);

#endif

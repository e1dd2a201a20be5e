/* tokenizer_hf_internal.h - what tokenizer_hf.c (tokenizer.json) and
 * tokenizer_hf_config.c (tokenizer_config.json, post-processor) share
 * while one tokenizer is read. Not for use elsewhere.
 */
#ifndef PL_TOKENIZER_HF_INTERNAL_H
#define PL_TOKENIZER_HF_INTERNAL_H

#include <stdbool.h>

#include "backends/formats/hf_json.h"
#include "backends/text/tokenizer_hf.h"

#define HF_MAX_RE 4              /* split steps (pretokenize.c's limit) */

/* json_array_foreach that tolerates NULL (no elements). */
#define json_each_(arr, i, v) json_array_foreach((arr), (i), (v))

typedef struct hf_tok {
    pl_hf_json tj, cj;           /* tokenizer.json, tokenizer_config.json */
    pl_tokenizer_vocab v;        /* what pl_tokenizer_init gets */
    int32_t n;                   /* ids: 0 .. n-1 */
    const char **tok;            /* (n) borrowed from tj; "" for unused ids */
    uint32_t *len;               /* (n) */
    int32_t *types;              /* (n) pl_token_type */
    float *scores;               /* (n) SentencePiece-style merge scores */
    const char **merges;         /* byte-level "left right", owned */
    uint32_t *merge_lens;
    int32_t n_merges;
    char *regex[HF_MAX_RE];      /* split steps, owned */
    int n_regex;
    bool byte_level;             /* a ByteLevel pre-tokenizer step */
    bool space_to_meta;          /* spaces become U+2581 */
    bool split_space;            /* Gemma's no-op Split on " " */
    int32_t *map;                /* open addressing: text -> id */
    uint32_t map_cap;
} hf_tok;

/* Text -> id over h->tok (first id wins), built once the vocabulary is. */
int pl_hf_tok_map_init_(hf_tok *h);
void pl_hf_tok_map_free_(hf_tok *h);
int32_t pl_hf_tok_lookup_(const hf_tok *h, const char *s, size_t len);
/* An exact token text (NUL-terminated, may be NULL), or -1. */
int32_t pl_hf_tok_find_(const hf_tok *h, const char *s);

/* BOS/EOS/PAD and add_bos/add_eos from the post-processor and
 * tokenizer_config.json; the chat template into *text. */
int pl_hf_tok_specials_(hf_tok *h, const char *dir, pl_hf_text *text, char *err, size_t n);

#endif

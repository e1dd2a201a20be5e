/* tokenizer_internal.h - shared pieces of the tokenizer's .c files:
 * the tokenizer struct, hash maps, the output id vector, UTF-8 helpers
 * and the pre-tokenizer. Not for use outside backends/text/tokenizer*.c.
 */
#ifndef PL_TOKENIZER_INTERNAL_H
#define PL_TOKENIZER_INTERNAL_H

#include "backends/text/tokenizer.h"

/** Open-addressing map from token text to id. Keys point into the
 *  tokenizer's text arena. A Bloom filter of the texts (two bits each,
 *  8 bits per slot) answers most lookups of texts that are no token
 *  without touching the table: SentencePiece merging asks for ~3 texts
 *  per byte of input, a third of them no token, and a 262k vocabulary's
 *  table and texts are far from the caches. */
typedef struct pl_tok_strmap {
    int32_t *slots;              /**< (cap) id or -1 */
    uint32_t cap;                /**< power of two */
    uint64_t *bloom;             /**< (cap * 8 / 64) bits */
} pl_tok_strmap;

/** Open-addressing map from a (left id, right id) pair to a BPE merge. */
typedef struct pl_tok_pairmap {
    uint64_t *keys;              /**< (cap) left << 32 | right, or ~0 */
    int32_t *rank;               /**< (cap) merge rank */
    int32_t *merged;             /**< (cap) id of left+right, or -1 */
    uint32_t cap;
} pl_tok_pairmap;

/** Growable id vector used as encode's output. */
typedef struct pl_tok_ids {
    int32_t *v;
    int n, cap;
} pl_tok_ids;

typedef struct pl_pretok pl_pretok;

/** A trie of the special tokens' texts (tokenizer_special.c). */
typedef struct pl_tok_trie {
    int32_t root[256];           /**< node of each first byte, or -1 */
    struct pl_tok_trie_node *nodes;
    int32_t n, cap;
} pl_tok_trie;

/** encode's pieces of text: a special token (id >= 0) or raw text (-1). */
typedef struct pl_tok_frag {
    int32_t id;
    size_t off, len;
} pl_tok_frag;

typedef struct pl_tok_frags {
    pl_tok_frag *v;
    size_t n, cap;
} pl_tok_frags;

struct pl_tokenizer {
    pl_tokenizer_model model;
    int32_t n_vocab;
    char *text;                  /**< arena: token texts, NUL separated */
    uint32_t *text_off;          /**< (n_vocab) */
    uint32_t *text_len;          /**< (n_vocab) */
    char *bytes;                 /**< arena: decoded raw bytes per token */
    uint32_t *bytes_off;         /**< (n_vocab) */
    uint32_t *bytes_len;         /**< (n_vocab) */
    float *scores;               /**< (n_vocab) */
    int8_t *types;               /**< (n_vocab) pl_token_type */
    uint8_t *eog;                /**< (n_vocab) 1 = ends generation */
    pl_tok_strmap map;           /**< text -> id */
    pl_tok_pairmap merges;       /**< gpt2 only */
    int32_t *special;            /**< control/user-defined/unknown ids,
                                      longest text first */
    int32_t n_special;
    pl_tok_trie special_trie;    /**< the texts of special[], by priority */
    int32_t byte_tok[256];       /**< gpt2: id of the byte's byte-level
                                      char; llama: id of <0xNN>; -1 none */
    int32_t bos, eos, unk, pad, eot, eom;
    int32_t tail;                /* what add_eos appends (eos unless the
                                    vocabulary names another) */
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;          /**< llama3: a whole word in the vocab
                                      is taken as is */
    bool nfc;                    /**< NFC-normalise raw text (Qwen) */
    bool space_prefix_first;     /**< prefix space at offset 0 only */
    bool space_prefix_if_none;   /**< none before a leading space */
    pl_pretok *pre;              /**< gpt2 only */
    int32_t *spm_bridge;         /**< llama: tokens with a U+2581 after another
                                      character (they may join two words) */
    int32_t n_spm_bridge;        /**< their count; -1: too many to split
                                      the text into words */
    bool wpm_clean_text, wpm_chinese, wpm_strip_accents, wpm_lowercase; /**< bert */
    int32_t wpm_max_word_chars;  /**< bert: longer words are unk */
};

/* ---- maps (tokenizer_map.c) ---- */
int pl_tok_strmap_init(pl_tok_strmap *m, const pl_tokenizer *t);
int32_t pl_tok_strmap_get(const pl_tok_strmap *m, const pl_tokenizer *t,
                          const char *s, size_t len);
void pl_tok_strmap_free(pl_tok_strmap *m);
int pl_tok_pairmap_init(pl_tok_pairmap *m, uint32_t n);
/** Insert keeps the first (lowest) rank for a pair. */
void pl_tok_pairmap_put(pl_tok_pairmap *m, int32_t l, int32_t r,
                        int32_t rank, int32_t merged);
/** Returns the rank, or -1 when the pair has no merge. */
int32_t pl_tok_pairmap_get(const pl_tok_pairmap *m, int32_t l, int32_t r,
                           int32_t *merged);
void pl_tok_pairmap_free(pl_tok_pairmap *m);

/* ---- ids ---- */
int pl_tok_ids_push(pl_tok_ids *ids, int32_t id);
int pl_tok_frags_push(pl_tok_frags *f, int32_t id, size_t off, size_t len);

/* ---- special-token partition (tokenizer_special.c) ---- */
/** Build t->special_trie from t->special. 0, or -1 out of memory. */
int pl_tok_trie_init(pl_tokenizer *t);
void pl_tok_trie_free(pl_tok_trie *tr);
/** Cut text into raw fragments and special tokens (user-defined ones
 *  always, control and unknown ones when parse_special) as llama.cpp's
 *  tokenizer_st_partition does; appended to *out. 0, or -1 out of memory. */
int pl_tok_partition(const pl_tokenizer *t, const char *text, size_t len, bool parse_special,
                     pl_tok_frags *out);

/* ---- UTF-8 ---- */
/** llama.cpp's length of a UTF-8 sequence from its lead byte (1..4;
 *  continuation bytes count as 1). */
static inline size_t pl_tok_utf8_len(uint8_t b)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1, 2, 2, 3, 4};
    return lut[b >> 4];
}
/** Encode cp as UTF-8 into out (4 bytes room); returns the length. */
size_t pl_tok_utf8_put(uint32_t cp, char *out);

/* ---- pre-tokenizer (pretokenize.c) ---- */
/** Compile the regexes of a tokenizer.ggml.pre name (NULL = default).
 *  Sets *ignore_merges for llama3-style vocabularies. */
pl_pretok *pl_pretok_init(const char *pre, bool *ignore_merges, char *err,
                          size_t errlen);
/** Compile n regexes (tokenizer.json's split patterns) as one pre-type. */
pl_pretok *pl_pretok_init_regex(const char *const *re, int n, char *err,
                                size_t errlen);
void pl_pretok_free(pl_pretok *p);

/* ---- normalisation (nfc.c) ---- */
/** The NFC form of len bytes of UTF-8 (invalid bytes become U+FFFD) into a
 *  new buffer *out of *out_len bytes (caller frees). Returns 0 or -1. */
int pl_tok_nfc(const char *s, size_t len, char **out, size_t *out_len);

/** Called once per pre-tokenized word (bytes of the normalised text). */
typedef int (*pl_pretok_word_fn)(void *ctx, const char *word, size_t len);
/** Normalise text like llama.cpp (invalid UTF-8 -> U+FFFD) and split it
 *  with the regexes in sequence, calling fn per word in order.
 *  Returns 0, or -1 on allocation failure or when fn fails. */
int pl_pretok_split(const pl_pretok *p, const char *text, size_t len,
                    pl_pretok_word_fn fn, void *ctx);

/* ---- models ---- */
/** Byte-level BPE of one raw text fragment (gpt2). */
int pl_tok_bpe_encode(const pl_tokenizer *t, const char *text, size_t len,
                      pl_tok_ids *out);
/** Build gpt2 tables: byte_tok, merges, decoded token bytes. */
int pl_tok_bpe_prepare(pl_tokenizer *t, const pl_tokenizer_vocab *v,
                       char *err, size_t errlen);
/** Byte-level char -> byte table (gpt2's bytes_to_unicode, inverted):
 *  returns the byte, or -1 when cp is not a byte-level char. */
int pl_tok_bpe_unbyte(uint32_t cp);

/** SentencePiece BPE of one raw text fragment (llama); prefix_space adds
 *  the leading U+2581. */
int pl_tok_spm_encode(const pl_tokenizer *t, const char *text, size_t len,
                      bool prefix_space, pl_tok_ids *out);
/** Build llama tables: byte_tok, decoded token bytes. */
int pl_tok_spm_prepare(pl_tokenizer *t, char *err, size_t errlen);

/** WordPiece of one raw text fragment (bert): BertNormalizer,
 *  BertPreTokenizer, greedy longest-match pieces. */
int pl_tok_wpm_encode(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out);
/** Take v's WordPiece switches; build decoded token bytes ("##x" -> "x",
 *  a word -> " word"). Needs v->unk. */
int pl_tok_wpm_prepare(pl_tokenizer *t, const pl_tokenizer_vocab *v, char *err, size_t errlen);

/** Token text of id (NUL terminated, in the arena). */
static inline const char *pl_tok_text(const pl_tokenizer *t, int32_t id)
{
    return t->text + t->text_off[id];
}

#endif

/* chat_template_internal.h - what chat_template.c shares with the
 * per-family renderers in chat_template_families.c: a growable output
 * buffer, Python-compatible whitespace stripping, and the render context. */
#ifndef PL_CHAT_TEMPLATE_INTERNAL_H
#define PL_CHAT_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/text/chat_template.h"

/** A growable string. oom is sticky: after a failed growth every append is
 *  a no-op and the render reports out of memory once at the end. */
typedef struct pl_ct_buf {
    char *p;
    size_t len, cap;
    bool oom;
} pl_ct_buf;

void pl_ct_putn_(pl_ct_buf *b, const char *s, size_t n);
/** Append a NUL-terminated string; NULL appends nothing. */
void pl_ct_put_(pl_ct_buf *b, const char *s);
/** Append s[0..n) without leading and trailing whitespace as Python's
 *  str.strip() (and Jinja's trim filter) defines it: ASCII and Unicode
 *  spaces, decoded from UTF-8. */
void pl_ct_put_stripped_(pl_ct_buf *b, const char *s, size_t n);
/** The bounds [*a, *e) of s[0..n) without the whitespace
 *  pl_ct_put_stripped_ strips (*a == *e when nothing is left). */
void pl_ct_strip_(const char *s, size_t n, size_t *a, size_t *e);

/** Everything a family renderer needs. Strings are never NULL here. */
typedef struct pl_ct_ctx {
    const pl_chat_style *style;
    const pl_chat_message *msgs;
    int n;                   /**< >= 1 */
    bool agp;                /**< add_generation_prompt */
    pl_chat_kwargs kw;       /**< keyword arguments (none: zeroed) */
    const char *bos, *eos;
    pl_ct_buf *out;
    pl_ct_buf *scratch;      /**< for pieces that are stripped as a whole */
    pl_err *err;
} pl_ct_ctx;

/** Role and content of message i ("" for a NULL content). */
const char *pl_ct_role_(const pl_ct_ctx *c, int i);
const char *pl_ct_content_(const pl_ct_ctx *c, int i);
bool pl_ct_role_is_(const pl_ct_ctx *c, int i, const char *role);

/** Set a 400 error on "messages" quoting the template's own message; -1. */
int pl_ct_reject_(const pl_ct_ctx *c, const char *why);

/* One renderer per family: 0, or -1 with c->err set. */
int pl_ct_render_chatml_(const pl_ct_ctx *c);
int pl_ct_render_llama3_(const pl_ct_ctx *c);
int pl_ct_render_llama2_(const pl_ct_ctx *c);
int pl_ct_render_mistral_(const pl_ct_ctx *c);
int pl_ct_render_gemma_(const pl_ct_ctx *c);
int pl_ct_render_phi3_(const pl_ct_ctx *c);
int pl_ct_render_zephyr_(const pl_ct_ctx *c);
int pl_ct_render_harmony_(const pl_ct_ctx *c);
/** ChatML with PL_CHAT_F_QWEN35 (chat_template_qwen35.c). */
int pl_ct_render_qwen35_(const pl_ct_ctx *c);
/** Gemma with PL_CHAT_F_GEMMA4 (chat_template_gemma4.c). */
int pl_ct_render_gemma4_(const pl_ct_ctx *c);

/** Append v as transformers' tojson writes it (Python's json.dumps with
 *  ensure_ascii=False: ", " and ": " separators, floats as repr). */
void pl_ct_put_pyjson_(pl_ct_buf *b, json_t *v);
/** Append s[0..n) (UTF-8) as json.dumps writes a string. */
void pl_ct_put_pyjson_string_(pl_ct_buf *b, const char *s, size_t n);
/** Append v as Python's str() gives it (a string as it is, True, None,
 *  numbers as repr; containers as JSON). */
void pl_ct_put_pystr_(pl_ct_buf *b, json_t *v);
/** Python's truth value of a JSON value (NULL: undefined, false). */
bool pl_ct_truthy_(json_t *v);

#endif

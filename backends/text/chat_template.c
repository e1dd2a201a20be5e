/* chat_template.c - chat-template families: detection from the Jinja
 * source, names, styles (variant bits and default system prompts), the
 * output buffer and the render entry points. The per-family renderers are
 * in chat_template_families.c. */
#include "backends/text/chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/chat_template_internal.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"

static const char *const tmpl_names[] = {
    [PL_CHAT_TMPL_CHATML] = "chatml",   [PL_CHAT_TMPL_LLAMA3] = "llama3",
    [PL_CHAT_TMPL_LLAMA2] = "llama2",   [PL_CHAT_TMPL_MISTRAL] = "mistral",
    [PL_CHAT_TMPL_GEMMA] = "gemma",     [PL_CHAT_TMPL_PHI3] = "phi3",
    [PL_CHAT_TMPL_ZEPHYR] = "zephyr",   [PL_CHAT_TMPL_HARMONY] = "harmony",
};

const char *pl_chat_tmpl_name(pl_chat_tmpl t)
{
    if ((unsigned)t >= PL_CHAT_TMPL_UNKNOWN)
        return "unknown";
    return tmpl_names[t];
}

const char *pl_chat_tmpl_names(void)
{
    return "chatml, llama3, llama2, mistral, gemma, phi3, zephyr, harmony";
}

int pl_chat_tmpl_from_name(const char *name, pl_chat_tmpl *out)
{
    if (!name)
        return -1;
    for (int t = 0; t < PL_CHAT_TMPL_UNKNOWN; t++) {
        if (strcmp(name, tmpl_names[t]) == 0) {
            *out = (pl_chat_tmpl)t;
            return 0;
        }
    }
    return -1;
}

static bool has(const char *src, const char *marker)
{
    return strstr(src, marker) != NULL;
}

/* The order matters: Phi-3 and Zephyr both use <|user|>; Llama 2 and
 * Mistral both use [INST], only Llama 2 has <<SYS>>. */
pl_chat_tmpl pl_chat_tmpl_detect(const char *src)
{
    if (!src || !*src)
        return PL_CHAT_TMPL_UNKNOWN;
    if (has(src, "<|start|>") && has(src, "<|channel|>") && has(src, "<|message|>"))
        return PL_CHAT_TMPL_HARMONY;
    if (has(src, "<|im_start|>"))
        return PL_CHAT_TMPL_CHATML;
    if (has(src, "<|start_header_id|>"))
        return PL_CHAT_TMPL_LLAMA3;
    if (has(src, "<start_of_turn>") || (has(src, "<|turn>") && has(src, "<|tool_call>call:")))
        return PL_CHAT_TMPL_GEMMA;
    if (has(src, "[INST]"))
        return has(src, "<<SYS>>") ? PL_CHAT_TMPL_LLAMA2 : PL_CHAT_TMPL_MISTRAL;
    if (has(src, "<|user|>")) {
        if (has(src, "<|end|>"))
            return PL_CHAT_TMPL_PHI3;
        if (has(src, "eos_token") || has(src, "</s>"))
            return PL_CHAT_TMPL_ZEPHYR;
    }
    return PL_CHAT_TMPL_UNKNOWN;
}

/* ---- default system prompt ------------------------------------------- */

/* Decode Jinja string-literal escapes of s[0..n) into a new string. */
static char *unescape_literal(const char *s, size_t n)
{
    char *r = malloc(n + 1), *w = r;
    if (!r)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '\\' && i + 1 < n) {
            ch = s[++i];
            switch (ch) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            default: break;  /* \\ \' \" and anything else: the char itself */
            }
        }
        *w++ = ch;
    }
    *w = '\0';
    return r;
}

/* The quote character that opens the literal holding src[at]: the nearest
 * ' or " before it. 0 when there is none. */
static char enclosing_quote(const char *src, size_t at)
{
    while (at-- > 0)
        if (src[at] == '\'' || src[at] == '"')
            return src[at];
    return 0;
}

/* Text of the first literal '<|im_start|>system\n TEXT <|im_end|>' in a
 * ChatML source: the prompt the template inserts when the conversation has
 * no system message (SmolLM2, Qwen 1.5/2/2.5). A literal that stops after
 * the newline (followed by + messages[0]['content']) is not one. */
static int find_chatml_default_system(const char *src, char **out)
{
    static const char head[] = "<|im_start|>system";
    *out = NULL;
    for (const char *p = strstr(src, head); p; p = strstr(p + 1, head)) {
        const char *t = p + sizeof head - 1;
        if (t[0] == '\n')
            t += 1;
        else if (t[0] == '\\' && t[1] == 'n')
            t += 2;
        else
            continue;
        const char *end = strstr(t, "<|im_end|>");
        char q = enclosing_quote(src, (size_t)(p - src));
        if (!end || end == t || !q)
            continue;
        const char *qp = memchr(t, q, (size_t)(end - t));
        if (qp)
            continue;  /* the literal closes before <|im_end|> */
        *out = unescape_literal(t, (size_t)(end - t));
        return *out ? 0 : -1;
    }
    return 0;
}

int pl_chat_style_init(pl_chat_style *s, const char *src)
{
    memset(s, 0, sizeof *s);
    s->tmpl = pl_chat_tmpl_detect(src);
    switch (s->tmpl) {
    case PL_CHAT_TMPL_CHATML:
        if (has(src, "<tool_response>"))
            s->flags |= PL_CHAT_F_QWEN_TOOLS;
        if (has(src, "</think>") && has(src, "last_query_index"))
            s->flags |= PL_CHAT_F_QWEN3_THINK;
        if (has(src, "<function=") && has(src, "<parameter=") && has(src, "last_query_index"))
            s->flags |= PL_CHAT_F_QWEN35;
        return find_chatml_default_system(src, &s->default_system);
    case PL_CHAT_TMPL_LLAMA3:
        if (!has(src, "add_generation_prompt"))
            s->flags |= PL_CHAT_F_ALWAYS_GEN;
        break;
    case PL_CHAT_TMPL_MISTRAL:
        if (has(src, "system_message"))
            s->flags |= PL_CHAT_F_MISTRAL_SYSTEM;
        else if (has(src, "eos_token + ' '"))
            s->flags |= PL_CHAT_F_EOS_SPACE;
        break;
    case PL_CHAT_TMPL_GEMMA:
        if (has(src, "bos_token"))
            s->flags |= PL_CHAT_F_BOS;
        if (has(src, "first_user_prefix"))
            s->flags |= PL_CHAT_F_GEMMA_SYSTEM;
        if (has(src, "<|turn>") && has(src, "<|tool_call>call:"))
            s->flags = PL_CHAT_F_GEMMA4;
        break;
    default:
        break;
    }
    return 0;
}

void pl_chat_style_from_tmpl(pl_chat_style *s, pl_chat_tmpl t)
{
    memset(s, 0, sizeof *s);
    s->tmpl = t;
    if (t == PL_CHAT_TMPL_GEMMA)
        s->flags = PL_CHAT_F_BOS;
}

const pl_tool_format *pl_chat_style_tool_format(const pl_chat_style *s)
{
    switch (s->tmpl) {
    case PL_CHAT_TMPL_CHATML:
        if (s->flags & PL_CHAT_F_QWEN35)
            return &pl_tool_qwen3_coder;
        return s->flags & PL_CHAT_F_QWEN_TOOLS ? &pl_tool_hermes : &pl_tool_generic;
    case PL_CHAT_TMPL_LLAMA3: return &pl_tool_llama3;
    case PL_CHAT_TMPL_MISTRAL: return &pl_tool_mistral;
    case PL_CHAT_TMPL_HARMONY: return &pl_tool_harmony;
    case PL_CHAT_TMPL_GEMMA:
        return s->flags & PL_CHAT_F_GEMMA4 ? &pl_tool_gemma4 : &pl_tool_generic;
    default: return &pl_tool_generic;
    }
}

const pl_reasoning_format *pl_chat_style_reasoning_format(const pl_chat_style *s)
{
    if (s->tmpl == PL_CHAT_TMPL_HARMONY)
        return &pl_reasoning_harmony;
    if (s->tmpl == PL_CHAT_TMPL_CHATML && (s->flags & PL_CHAT_F_QWEN35))
        return &pl_reasoning_qwen35;
    if (s->tmpl == PL_CHAT_TMPL_GEMMA && (s->flags & PL_CHAT_F_GEMMA4))
        return &pl_reasoning_gemma4;
    return s->flags & PL_CHAT_F_QWEN3_THINK ? &pl_reasoning_qwen3 : NULL;
}

void pl_chat_style_free(pl_chat_style *s)
{
    free(s->default_system);
    memset(s, 0, sizeof *s);
    s->tmpl = PL_CHAT_TMPL_UNKNOWN;
}

/* ---- output buffer ----------------------------------------------------- */

void pl_ct_putn_(pl_ct_buf *b, const char *s, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void pl_ct_put_(pl_ct_buf *b, const char *s)
{
    if (s)
        pl_ct_putn_(b, s, strlen(s));
}

/* Decode one UTF-8 sequence at s[0..n); *len gets its length (1 for an
 * invalid byte, which then decodes as U+FFFD: never a space). */
static uint32_t utf8_decode(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    int k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
          : (c & 0xF8) == 0xF0 ? 3 : -1;
    *len = 1;
    if (k == 0)
        return c;
    if (k < 0 || (size_t)k >= n)
        return 0xFFFD;
    uint32_t cp = c & (0x3F >> k);
    for (int i = 1; i <= k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0xFFFD;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *len = (size_t)k + 1;
    return cp;
}

/* Python's str.isspace(). */
static bool py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85
        || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A)
        || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F
        || c == 0x3000;
}

/* Start of the trailing whitespace of s[0..n): walk back over UTF-8
 * continuation bytes to each sequence start and test the character. */
static size_t strip_end(const unsigned char *s, size_t n)
{
    while (n > 0) {
        size_t st = n - 1, len;
        while (st > 0 && n - st < 4 && (s[st] & 0xC0) == 0x80)
            st--;
        uint32_t cp = utf8_decode(s + st, n - st, &len);
        if (st + len != n)
            cp = 0xFFFD;  /* a stray continuation byte */
        if (!py_isspace(cp))
            break;
        n = st;
    }
    return n;
}

void pl_ct_strip_(const char *str, size_t n, size_t *a_out, size_t *e_out)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t a = 0, len;
    while (a < n && py_isspace(utf8_decode(s + a, n - a, &len)))
        a += len;
    size_t e = strip_end(s, n);
    *a_out = a;
    *e_out = e > a ? e : a;
}

void pl_ct_put_stripped_(pl_ct_buf *b, const char *str, size_t n)
{
    size_t a, e;
    pl_ct_strip_(str, n, &a, &e);
    if (e > a)
        pl_ct_putn_(b, str + a, e - a);
}

/* ---- rendering --------------------------------------------------------- */

const char *pl_ct_role_(const pl_ct_ctx *c, int i)
{
    return c->msgs[i].role;
}

const char *pl_ct_content_(const pl_ct_ctx *c, int i)
{
    return c->msgs[i].content ? c->msgs[i].content : "";
}

bool pl_ct_role_is_(const pl_ct_ctx *c, int i, const char *role)
{
    return strcmp(c->msgs[i].role, role) == 0;
}

int pl_ct_reject_(const pl_ct_ctx *c, const char *why)
{
    return pl_err_set(c->err, 400, "invalid_request_error", "messages", "",
                      "messages do not fit the model's chat template (%s): %s",
                      pl_chat_tmpl_name(c->style->tmpl), why);
}

static int (*const renderers[])(const pl_ct_ctx *) = {
    [PL_CHAT_TMPL_CHATML] = pl_ct_render_chatml_,
    [PL_CHAT_TMPL_LLAMA3] = pl_ct_render_llama3_,
    [PL_CHAT_TMPL_LLAMA2] = pl_ct_render_llama2_,
    [PL_CHAT_TMPL_MISTRAL] = pl_ct_render_mistral_,
    [PL_CHAT_TMPL_GEMMA] = pl_ct_render_gemma_,
    [PL_CHAT_TMPL_PHI3] = pl_ct_render_phi3_,
    [PL_CHAT_TMPL_ZEPHYR] = pl_ct_render_zephyr_,
    [PL_CHAT_TMPL_HARMONY] = pl_ct_render_harmony_,
};

static int check_messages(const pl_chat_message *msgs, int n, pl_err *err)
{
    if (n < 1 || !msgs)
        return pl_err_set(err, 400, "invalid_request_error", "messages", "",
                          "messages must hold at least one message");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role)
            return pl_err_set(err, 400, "invalid_request_error", "messages",
                              "", "messages[%d] has no role", i);
    return 0;
}

int pl_chat_style_render(const pl_chat_style *s, const pl_chat_message *msgs,
                         int n, bool add_generation_prompt,
                         const char *bos_text, const char *eos_text,
                         char **out, pl_err *err)
{
    return pl_chat_style_render_kw(s, msgs, n, add_generation_prompt, bos_text, eos_text,
                                   NULL, out, err);
}

int pl_chat_style_render_kw(const pl_chat_style *s, const pl_chat_message *msgs,
                            int n, bool add_generation_prompt,
                            const char *bos_text, const char *eos_text,
                            const pl_chat_kwargs *kw, char **out, pl_err *err)
{
    pl_ct_buf buf = {0}, scratch = {0};
    int rc = -1;
    *out = NULL;
    if ((unsigned)s->tmpl >= PL_CHAT_TMPL_UNKNOWN) {
        pl_err_set(err, 500, "server_error", NULL, "",
                   "the model's chat template is not supported");
        goto done;
    }
    if (check_messages(msgs, n, err) < 0)
        goto done;
    pl_ct_ctx c = {
        .style = s, .msgs = msgs, .n = n, .agp = add_generation_prompt,
        .kw = kw ? *kw : (pl_chat_kwargs){0},
        .bos = bos_text ? bos_text : "", .eos = eos_text ? eos_text : "",
        .out = &buf, .scratch = &scratch, .err = err,
    };
    if (renderers[s->tmpl](&c) < 0)
        goto done;
    pl_ct_putn_(&buf, "", 0);
    if (!buf.oom && !buf.p)
        buf.p = calloc(1, 1);  /* an empty rendering is still a string */
    if (buf.oom || scratch.oom || !buf.p) {
        pl_err_set(err, 500, "server_error", NULL, "",
                   "out of memory rendering the chat template");
        goto done;
    }
    *out = buf.p;
    buf.p = NULL;
    rc = 0;
done:
    free(buf.p);
    free(scratch.p);
    return rc;
}

int pl_chat_tmpl_render(pl_chat_tmpl t, const pl_chat_message *msgs, int n,
                        bool add_generation_prompt, const char *bos_text,
                        const char *eos_text, char **out, pl_err *err)
{
    pl_chat_style s;
    pl_chat_style_from_tmpl(&s, t);
    return pl_chat_style_render(&s, msgs, n, add_generation_prompt, bos_text,
                                eos_text, out, err);
}

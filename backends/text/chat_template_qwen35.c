/* chat_template_qwen35.c - Qwen3.5's chat template (Qwen/Qwen3.5-*, the
 * template llama.cpp keeps as models/templates/Qwen3.5-4B.jinja; also
 * Qwen3.6): ChatML whose every message text is trimmed, whose assistant
 * turns after the last user query always carry a think block, and whose
 * generation prompt opens the reasoning ("<think>\n") unless
 * enable_thinking is false. Tools, calls and results reach it through the
 * qwen3_coder tool format (tool_qwen35.c), rendered into the messages by
 * the API as for the other non-native formats. Followed step by step so
 * that the output equals jinja2's, byte for byte. */
#include <string.h>

#include "backends/text/chat_template_internal.h"

#define PUT(c, s) pl_ct_put_((c)->out, (s))

typedef struct span {
    const char *p;
    size_t n;
} span;

/* The template's render_content(message.content)|trim. */
static span trimmed(const char *s, size_t n)
{
    size_t a, e;
    pl_ct_strip_(s, n, &a, &e);
    return (span){s + a, e - a};
}

static void put_span(const pl_ct_ctx *c, span s)
{
    pl_ct_putn_(c->out, s.p, s.n);
}

static bool is_tool_response(span s)
{
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    return s.n >= sizeof open - 1 + sizeof close - 1 &&
           !memcmp(s.p, open, sizeof open - 1) &&
           !memcmp(s.p + s.n - (sizeof close - 1), close, sizeof close - 1);
}

static span content_of(const pl_ct_ctx *c, int i)
{
    const char *s = pl_ct_content_(c, i);
    return trimmed(s, strlen(s));
}

/* ns.last_query_index: the last user turn that is not a wrapped tool
 * result; -1 when there is none (the template raises). */
static int last_query(const pl_ct_ctx *c)
{
    for (int i = c->n - 1; i >= 0; i--)
        if (pl_ct_role_is_(c, i, "user") && !is_tool_response(content_of(c, i)))
            return i;
    return -1;
}

static const char *find(span s, const char *needle)
{
    return memmem(s.p, s.n, needle, strlen(needle));
}

static const char *find_last(span s, const char *needle)
{
    const char *last = NULL;
    size_t k = strlen(needle);
    for (const char *p = s.p; (p = memmem(p, (size_t)(s.p + s.n - p), needle, k)); p += k)
        last = p;
    return last;
}

/* An assistant turn: its reasoning_content when given, else the part of
 * the content before the first </think> (after its last <think>, newlines
 * stripped) and the content after the last </think>. */
static void assistant(const pl_ct_ctx *c, int i, int last_q)
{
    span content = content_of(c, i), reasoning = {"", 0};
    const char *given = c->msgs[i].reasoning;
    if (given) {
        reasoning = (span){given, strlen(given)};
    } else if (find(content, "</think>")) {
        span head = {content.p, (size_t)(find(content, "</think>") - content.p)};
        while (head.n && head.p[head.n - 1] == '\n')
            head.n--;
        const char *open = find_last(head, "<think>");
        if (open)
            head = (span){open + 7, (size_t)(head.p + head.n - open - 7)};
        while (head.n && head.p[0] == '\n')
            head.p++, head.n--;
        reasoning = head;
        const char *tail = find_last(content, "</think>") + 8;
        content = (span){tail, (size_t)(content.p + content.n - tail)};
        while (content.n && content.p[0] == '\n')
            content.p++, content.n--;
    }
    reasoning = trimmed(reasoning.p, reasoning.n);
    PUT(c, "<|im_start|>assistant\n");
    if (i > last_q) {
        PUT(c, "<think>\n");
        put_span(c, reasoning);
        PUT(c, "\n</think>\n\n");
    }
    put_span(c, content);
    PUT(c, "<|im_end|>\n");
}

/* A run of tool results is one user turn of <tool_response> blocks. */
static void tool_result(const pl_ct_ctx *c, int i)
{
    if (i > 0 && !pl_ct_role_is_(c, i - 1, "tool"))
        PUT(c, "<|im_start|>user");
    PUT(c, "\n<tool_response>\n");
    put_span(c, content_of(c, i));
    PUT(c, "\n</tool_response>");
    if (i == c->n - 1 || !pl_ct_role_is_(c, i + 1, "tool"))
        PUT(c, "<|im_end|>\n");
}

int pl_ct_render_qwen35_(const pl_ct_ctx *c)
{
    if (pl_ct_role_is_(c, 0, "system")) {
        PUT(c, "<|im_start|>system\n");
        put_span(c, content_of(c, 0));
        PUT(c, "<|im_end|>\n");
    }
    int last_q = last_query(c);
    if (last_q < 0)
        return pl_ct_reject_(c, "No user query found in messages.");
    for (int i = 0; i < c->n; i++) {
        if (pl_ct_role_is_(c, i, "system")) {
            if (i)
                return pl_ct_reject_(c, "System message must be at the beginning.");
        } else if (pl_ct_role_is_(c, i, "user")) {
            PUT(c, "<|im_start|>user\n");
            put_span(c, content_of(c, i));
            PUT(c, "<|im_end|>\n");
        } else if (pl_ct_role_is_(c, i, "assistant")) {
            assistant(c, i, last_q);
        } else if (pl_ct_role_is_(c, i, "tool")) {
            tool_result(c, i);
        } else {
            return pl_ct_reject_(c, "Unexpected message role.");
        }
    }
    if (c->agp)
        PUT(c, c->kw.enable_thinking == PL_THINKING_OFF
                   ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                   : "<|im_start|>assistant\n<think>\n");
    return 0;
}

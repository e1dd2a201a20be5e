/* chat_template_families.c - one renderer per chat-template family. Each
 * follows its official Jinja template step by step (which messages it
 * prints, where it strips whitespace, when it raises), so that the output
 * equals what transformers' apply_chat_template gives, byte for byte. The
 * templates themselves are in tests/fixtures/gen_chat_template_fixtures.py. */
#include <string.h>

#include "backends/text/chat_template_internal.h"

#define PUT(c, s) pl_ct_put_((c)->out, (s))

static const char ALTERNATE[] =
    "Conversation roles must alternate user/assistant/user/assistant/...";

/* The alternation test of the strict templates:
 * (role == 'user') != (index % 2 == 0) raises. */
static bool breaks_alternation(const pl_ct_ctx *c, int i, int index)
{
    return pl_ct_role_is_(c, i, "user") != (index % 2 == 0);
}

/* ---- ChatML (SmolLM2, Qwen, Hermes) ------------------------------------- */

/* Qwen 2.5: a run of "tool" turns becomes one user turn of
 * <tool_response> blocks. */
static void chatml_qwen_tool(const pl_ct_ctx *c, int i)
{
    if (i == 0 || !pl_ct_role_is_(c, i - 1, "tool"))
        PUT(c, "<|im_start|>user");
    PUT(c, "\n<tool_response>\n");
    PUT(c, pl_ct_content_(c, i));
    PUT(c, "\n</tool_response>");
    if (i == c->n - 1 || !pl_ct_role_is_(c, i + 1, "tool"))
        PUT(c, "<|im_end|>\n");
}

static bool chatml_plain_role(const pl_ct_ctx *c, int i)
{
    return pl_ct_role_is_(c, i, "user") || pl_ct_role_is_(c, i, "system")
        || pl_ct_role_is_(c, i, "assistant");
}

/* Qwen3: the index of the last user turn that is not a run of tool
 * results (the template's last_query_index); n - 1 when there is none. */
static int qwen3_last_query(const pl_ct_ctx *c)
{
    for (int i = c->n - 1; i >= 0; i--) {
        const char *s = pl_ct_content_(c, i);
        size_t n = strlen(s);
        bool wrapped = n >= 16 && !strncmp(s, "<tool_response>", 15) &&
                       !strcmp(s + n - 16, "</tool_response>");
        if (pl_ct_role_is_(c, i, "user") && !wrapped)
            return i;
    }
    return c->n - 1;
}

static const char *skip_newlines(const char *s, const char *end)
{
    while (s < end && *s == '\n')
        s++;
    return s;
}

/* Qwen3's assistant turn: its reasoning_content when given (the content
 * then as it is), else content.split('</think>')[-1].lstrip('\n') is the
 * answer, and the part before the first </think>, after its last <think>,
 * without the newlines around it, the reasoning; the reasoning is kept (in
 * a think block) only after the last user query. */
static void qwen3_assistant(const pl_ct_ctx *c, int i, int last_query)
{
    const char *content = pl_ct_content_(c, i), *end = strstr(content, "</think>");
    const char *body = content, *r0 = content, *r1 = content;
    const char *given = c->msgs[i].reasoning;
    bool has_reasoning = false;
    if (given) {
        r0 = skip_newlines(given, given + strlen(given));
        r1 = given + strlen(given);
        while (r1 > r0 && r1[-1] == '\n')
            r1--;
        has_reasoning = *given != '\0';
    } else if (end) {
        for (const char *p = end; p; p = strstr(p + 8, "</think>"))
            body = p + 8;
        body = skip_newlines(body, body + strlen(body));
        r1 = end;
        while (r1 > content && r1[-1] == '\n')
            r1--;
        for (const char *p = content; (p = memmem(p, (size_t)(r1 - p), "<think>", 7)); p += 7)
            r0 = p + 7;
        r0 = skip_newlines(r0, r1);
        has_reasoning = r1 > r0;
    }
    PUT(c, "<|im_start|>assistant\n");
    if (i > last_query && (i == c->n - 1 || has_reasoning)) {
        PUT(c, "<think>\n");
        pl_ct_putn_(c->out, r0, (size_t)(r1 - r0));
        PUT(c, "\n</think>\n\n");
        body = skip_newlines(body, body + strlen(body));
    }
    PUT(c, body);
    PUT(c, "<|im_end|>\n");
}

int pl_ct_render_chatml_(const pl_ct_ctx *c)
{
    if (c->style->flags & PL_CHAT_F_QWEN35)
        return pl_ct_render_qwen35_(c);
    bool qwen = c->style->flags & PL_CHAT_F_QWEN_TOOLS;
    bool think = c->style->flags & PL_CHAT_F_QWEN3_THINK;
    int last_query = think ? qwen3_last_query(c) : -1;
    if (c->style->default_system && !pl_ct_role_is_(c, 0, "system")) {
        PUT(c, "<|im_start|>system\n");
        PUT(c, c->style->default_system);
        PUT(c, "<|im_end|>\n");
    }
    for (int i = 0; i < c->n; i++) {
        if (qwen && pl_ct_role_is_(c, i, "tool")) {
            chatml_qwen_tool(c, i);
            continue;
        }
        if (qwen && !chatml_plain_role(c, i))
            continue;
        if (think && pl_ct_role_is_(c, i, "assistant")) {
            qwen3_assistant(c, i, last_query);
            continue;
        }
        PUT(c, "<|im_start|>");
        PUT(c, pl_ct_role_(c, i));
        PUT(c, "\n");
        PUT(c, pl_ct_content_(c, i));
        PUT(c, "<|im_end|>\n");
    }
    if (c->agp)
        PUT(c, "<|im_start|>assistant\n");
    if (c->agp && think && c->kw.enable_thinking == PL_THINKING_OFF)
        PUT(c, "<think>\n\n</think>\n\n");
    return 0;
}

/* ---- Llama 3 ----------------------------------------------------------- */

int pl_ct_render_llama3_(const pl_ct_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        const char *content = pl_ct_content_(c, i);
        if (i == 0)
            PUT(c, c->bos);
        PUT(c, "<|start_header_id|>");
        PUT(c, pl_ct_role_(c, i));
        PUT(c, "<|end_header_id|>\n\n");
        pl_ct_put_stripped_(c->out, content, strlen(content));
        PUT(c, "<|eot_id|>");
    }
    if (c->agp || (c->style->flags & PL_CHAT_F_ALWAYS_GEN))
        PUT(c, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* ---- Llama 2 chat ------------------------------------------------------ */

/* The first turn carries the system prompt; the template strips the
 * combined text, so an empty user turn also loses the "\n\n" after
 * <</SYS>>. */
static void llama2_turn(const pl_ct_ctx *c, int i, const char *sys)
{
    pl_ct_buf *t = c->scratch;
    t->len = 0;
    if (sys) {
        pl_ct_put_(t, "<<SYS>>\n");
        pl_ct_put_(t, sys);
        pl_ct_put_(t, "\n<</SYS>>\n\n");
    }
    pl_ct_put_(t, pl_ct_content_(c, i));
    bool user = pl_ct_role_is_(c, i, "user");
    if (user) {
        PUT(c, c->bos);
        PUT(c, "[INST] ");
    } else {
        PUT(c, " ");
    }
    if (t->p)
        pl_ct_put_stripped_(c->out, t->p, t->len);
    if (user) {
        PUT(c, " [/INST]");
    } else {
        PUT(c, " ");
        PUT(c, c->eos);
    }
}

int pl_ct_render_llama2_(const pl_ct_ctx *c)
{
    int start = 0;
    const char *sys = NULL;
    if (pl_ct_role_is_(c, 0, "system")) {
        start = 1;
        sys = pl_ct_content_(c, 0);
    }
    for (int i = start; i < c->n; i++) {
        int k = i - start;
        if (breaks_alternation(c, i, k))
            return pl_ct_reject_(c, ALTERNATE);
        /* Only user and assistant turns print anything; other roles at odd
         * positions pass the alternation test and are dropped. */
        if (pl_ct_role_is_(c, i, "user") || pl_ct_role_is_(c, i, "assistant"))
            llama2_turn(c, i, k == 0 ? sys : NULL);
    }
    return 0;
}

/* ---- Mistral ------------------------------------------------------------ */

/* v0.1 / v0.2 first releases and Mixtral: every message alternates, system
 * included (so a system message is an alternation error). */
static int mistral_legacy(const pl_ct_ctx *c)
{
    PUT(c, c->bos);
    for (int i = 0; i < c->n; i++) {
        if (breaks_alternation(c, i, i))
            return pl_ct_reject_(c, ALTERNATE);
        if (pl_ct_role_is_(c, i, "user")) {
            PUT(c, "[INST] ");
            PUT(c, pl_ct_content_(c, i));
            PUT(c, " [/INST]");
        } else if (pl_ct_role_is_(c, i, "assistant")) {
            PUT(c, pl_ct_content_(c, i));
            PUT(c, c->eos);
            if (c->style->flags & PL_CHAT_F_EOS_SPACE)
                PUT(c, " ");
        } else {
            return pl_ct_reject_(c,
                                 "Only user and assistant roles are supported!");
        }
    }
    return 0;
}

/* mistralai's "v1" template: an optional leading system message goes into
 * the first user turn. */
static int mistral_system(const pl_ct_ctx *c)
{
    int start = 0;
    const char *sys = NULL;
    if (pl_ct_role_is_(c, 0, "system")) {
        start = 1;
        sys = pl_ct_content_(c, 0);
    }
    PUT(c, c->bos);
    for (int i = start; i < c->n; i++) {
        int k = i - start;
        if (breaks_alternation(c, i, k))
            return pl_ct_reject_(c, "After the optional system message, "
                                    "conversation roles must alternate "
                                    "user/assistant/user/assistant/...");
        if (pl_ct_role_is_(c, i, "user")) {
            PUT(c, " [INST] ");
            if (k == 0 && sys) {
                PUT(c, sys);
                PUT(c, "\n\n");
            }
            PUT(c, pl_ct_content_(c, i));
            PUT(c, " [/INST]");
        } else if (pl_ct_role_is_(c, i, "assistant")) {
            PUT(c, " ");
            PUT(c, pl_ct_content_(c, i));
            PUT(c, c->eos);
        } else {
            return pl_ct_reject_(c, "Only user and assistant roles are "
                                    "supported, with the exception of an "
                                    "initial optional system message!");
        }
    }
    return 0;
}

int pl_ct_render_mistral_(const pl_ct_ctx *c)
{
    if (c->style->flags & PL_CHAT_F_MISTRAL_SYSTEM)
        return mistral_system(c);
    return mistral_legacy(c);
}

/* ---- Gemma -------------------------------------------------------------- */

/* The text a leading system message puts before the first user turn's:
 * Gemma 3's template puts it as it is and a blank line. Gemma 1 and 2's
 * raise "System role not supported"; parley folds it in as llama.cpp's
 * server does (trimmed, and nothing when empty), so that jobs and system
 * prompts work on Gemma 2 (the seed's configuration names one). */
static void gemma_system_prefix(const pl_ct_ctx *c)
{
    const char *sys = pl_ct_content_(c, 0);
    if (c->style->flags & PL_CHAT_F_GEMMA_SYSTEM) {
        PUT(c, sys);
        PUT(c, "\n\n");
        return;
    }
    c->scratch->len = 0;
    pl_ct_put_stripped_(c->scratch, sys, strlen(sys));
    if (c->scratch->len == 0)
        return;
    pl_ct_putn_(c->out, c->scratch->p, c->scratch->len);
    PUT(c, "\n\n");
}

int pl_ct_render_gemma_(const pl_ct_ctx *c)
{
    if (c->style->flags & PL_CHAT_F_GEMMA4)
        return pl_ct_render_gemma4_(c);
    int start = pl_ct_role_is_(c, 0, "system") ? 1 : 0;
    if (c->style->flags & PL_CHAT_F_BOS)
        PUT(c, c->bos);
    for (int i = start; i < c->n; i++) {
        if (breaks_alternation(c, i, i - start))
            return pl_ct_reject_(c, ALTERNATE);
        const char *content = pl_ct_content_(c, i);
        PUT(c, "<start_of_turn>");
        PUT(c, pl_ct_role_is_(c, i, "assistant") ? "model" : pl_ct_role_(c, i));
        PUT(c, "\n");
        if (i == start && start == 1)
            gemma_system_prefix(c);
        pl_ct_put_stripped_(c->out, content, strlen(content));
        PUT(c, "<end_of_turn>\n");
    }
    if (c->agp)
        PUT(c, "<start_of_turn>model\n");
    return 0;
}

/* ---- Phi-3 and Zephyr: <|role|> turns, other roles dropped -------------- */

static bool phi_role(const pl_ct_ctx *c, int i)
{
    return pl_ct_role_is_(c, i, "system") || pl_ct_role_is_(c, i, "user")
        || pl_ct_role_is_(c, i, "assistant");
}

static void role_header(const pl_ct_ctx *c, int i)
{
    PUT(c, "<|");
    PUT(c, pl_ct_role_(c, i));
    PUT(c, "|>\n");
}

int pl_ct_render_phi3_(const pl_ct_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        if (!phi_role(c, i))
            continue;
        role_header(c, i);
        PUT(c, pl_ct_content_(c, i));
        PUT(c, "<|end|>\n");
    }
    PUT(c, c->agp ? "<|assistant|>\n" : c->eos);
    return 0;
}

/* Zephyr's template puts each {{ }} on its own line; trim_blocks removes
 * the newlines after block tags but not after expressions, hence the "\n"
 * after every turn and after the generation prompt. */
int pl_ct_render_zephyr_(const pl_ct_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        if (phi_role(c, i)) {
            role_header(c, i);
            PUT(c, pl_ct_content_(c, i));
            PUT(c, c->eos);
            PUT(c, "\n");
        }
        if (i == c->n - 1 && c->agp)
            PUT(c, "<|assistant|>\n");
    }
    return 0;
}

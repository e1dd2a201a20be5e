/* fuzz_reasoning.c - libFuzzer target: a reasoning model's reply split into
 * reasoning, content and calls (api/oai_reasoning.c over
 * backends/text/reasoning*.c), and a chat request rendered by the
 * templates that read reasoning, tools and efforts (gpt-oss's harmony,
 * Qwen3's ChatML, Gemma 4's).
 *
 * Input: byte 0 picks the format (bit 2: gemma4, else bit 0: qwen3 or
 * harmony; bit 1: calls as calls; bits 3-4: enable_thinking absent, off,
 * on), byte 1 seeds the cuts, the rest is the reply. The reply
 * fed whole and fed in deltas cut at pseudo-random lengths must give the
 * same pieces, merged as a client merges them (abort otherwise). When the
 * rest is a JSON chat request that parses, its messages, tools and effort
 * are rendered by both templates: 0 with text, or -1 with a 400 or 500.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/oai_params.h"
#include "api/oai_reasoning.h"
#include "api/oai_tools.h"
#include "backends/text/chat_template.h"

/* The pieces of one reply, merged: a kind byte then its bytes, a new
 * group where the kind changes or a call begins. */
typedef struct merged {
    char *buf;
    size_t n, cap;
    int last;
} merged;

static void put(merged *m, const void *p, size_t len)
{
    if (m->n + len > m->cap) {
        m->cap = (m->n + len) * 2 + 64;
        m->buf = realloc(m->buf, m->cap);
        if (!m->buf)
            abort();
    }
    memcpy(m->buf + m->n, p, len);
    m->n += len;
}

static bool collect(void *ud, const pl_reply_piece *p)
{
    merged *m = ud;
    int kind = (int)p->kind;
    if (kind == PL_REPLY_PIECE_CALL_BEGIN) {
        put(m, "\1B", 2);
        put(m, p->name, strlen(p->name));
        put(m, &(char){(char)('0' + p->index % 10)}, 1);
    } else if (p->len) {
        if (kind != m->last) {
            put(m, "\1", 1);
            put(m, &(char){(char)('0' + kind)}, 1);
        }
        put(m, p->text, p->len);
    }
    m->last = p->len || kind == PL_REPLY_PIECE_CALL_BEGIN ? kind : m->last;
    return true;
}

static void split(const pl_reasoning_format *fmt, bool calls, pl_thinking thinking,
                  const char *reply, size_t len, uint32_t seed, merged *m)
{
    pl_reply_split s;
    pl_reply_split_init(&s, fmt, calls, thinking);
    for (size_t at = 0; at < len;) {
        size_t cut = len - at;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            size_t c = 1 + (seed >> 16) % 24;
            cut = c < cut ? c : cut;
        }
        pl_reply_split_feed(&s, reply + at, cut, 1, collect, m);
        at += cut;
    }
    pl_reply_split_finish(&s, collect, m);
}

/* The request as the API hands it to a gpt-oss model (tools, calls and
 * efforts kept for the template) and to a Qwen3 one. */
static void render_all(json_t *body)
{
    pl_oai_params p = {0};
    pl_err e;
    if (!json_is_object(body) || pl_oai_parse(body, true, &p, &e) < 0)
        goto done;
    p.tool_format = &pl_tool_harmony;
    if (pl_oai_tools_prepare_native(&p, body, &e) < 0)
        goto done;
    pl_gen_request r;
    pl_oai_to_request(&p, &r);
    pl_chat_kwargs kw = {.enable_thinking = r.thinking, .reasoning_effort = r.reasoning_effort,
                         .model_identity = r.model_identity, .tools = r.tools,
                         .date = "2026-01-01"};
    static const pl_chat_tmpl tmpls[] = {PL_CHAT_TMPL_HARMONY, PL_CHAT_TMPL_CHATML,
                                         PL_CHAT_TMPL_GEMMA};
    for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++) {
        pl_chat_style st;
        pl_chat_style_from_tmpl(&st, tmpls[i]);
        st.flags |= tmpls[i] == PL_CHAT_TMPL_CHATML ? PL_CHAT_F_QWEN3_THINK : 0;
        if (tmpls[i] == PL_CHAT_TMPL_GEMMA)
            st.flags = PL_CHAT_F_GEMMA4;
        char *out = NULL;
        int rc = pl_chat_style_render_kw(&st, r.messages, r.n_messages, true, "", "", &kw,
                                         &out, &e);
        if (rc == 0 ? !out : (e.status != 400 && e.status != 500))
            abort();
        free(out);
    }
done:
    pl_oai_params_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const pl_reasoning_format *fmt = data[0] & 4   ? &pl_reasoning_gemma4
                                     : data[0] & 1 ? &pl_reasoning_harmony
                                                   : &pl_reasoning_qwen3;
    bool calls = data[0] & 2;
    static const pl_thinking thinking[] = {PL_THINKING_DEFAULT, PL_THINKING_OFF, PL_THINKING_ON,
                                           PL_THINKING_DEFAULT};
    pl_thinking th = thinking[(data[0] >> 3) & 3];
    const char *reply = (const char *)data + 2;
    size_t len = size - 2;
    merged whole = {.last = -1}, cut = {.last = -1};
    split(fmt, calls, th, reply, len, 0, &whole);
    split(fmt, calls, th, reply, len, data[1] | 0x100u, &cut);
    if (whole.n != cut.n || (whole.n && memcmp(whole.buf, cut.buf, whole.n)))
        abort();
    free(whole.buf);
    free(cut.buf);
    json_t *body = json_loadb(reply, len, JSON_REJECT_DUPLICATES, NULL);
    if (body)
        render_all(body);
    json_decref(body);
    return 0;
}

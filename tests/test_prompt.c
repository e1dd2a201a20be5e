/* test_prompt.c - what each agent reads, as seed 000 defines it:
 * speak_after_within_round decides which current-round replies a prompt
 * quotes (and when the agent speaks); visible_to decides who reads a reply
 * in later rounds only. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/formats/gguf.h"
#include "backends/text/chat_template.h"
#include "backends/text/tokenizer.h"
#include "src/jobs/prompt.h"
#include "tests/helpers/model_path.h"

/* A two-round spec with these agents (JSON). */
static pl_job_spec parse_agents(const char *agents)
{
    char js[1024];
    snprintf(js, sizeof js, "{\"experiment\":\"vis\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
             "\"agents\":%s,\"num_rounds\":2,\"validation\":{\"enabled\":false},"
             "\"questions\":[{\"id\":\"q\",\"text\":\"T?\"}]}", agents);
    json_t *r = json_loads(js, 0, NULL);
    pl_job_spec s;
    pl_spec_problems p = {0};
    cr_assert_eq(pl_job_spec_parse(r, NULL, &s, &p), 0);
    json_decref(r);
    return s;
}

/* a is visible to b only; mod speaks after a and b. */
static pl_job_spec spec(void)
{
    return parse_agents("[{\"id\":\"a\",\"visible_to\":[\"b\"]},{\"id\":\"b\"},"
                        "{\"id\":\"mod\",\"speak_after_within_round\":[\"a\",\"b\"]}]");
}

/* a is visible to b only; c speaks after nobody; mod speaks after a, b. */
static pl_job_spec spec4(void)
{
    return parse_agents("[{\"id\":\"a\",\"visible_to\":[\"b\"]},{\"id\":\"b\"},{\"id\":\"c\"},"
                        "{\"id\":\"mod\",\"role_specific_config\":"
                        "{\"speak_after_within_round\":[\"a\",\"b\"]}}]");
}

/* issue 35.5: visible_to used to hide a's reply from the moderator that
 * speaks after a in the same round. */
Test(prompt, speak_after_decides_current_round_quotes)
{
    pl_job_spec s = spec4();
    cr_assert_eq(s.agents[3].deps, 3u, "mod speaks after a and b");
    const char *finals[8] = {"SECRET-A0", "OPEN-B0", "OPEN-C0", NULL, NULL, NULL, NULL, NULL};
    char *u = pl_prompt_round_user(&s, &s.questions[0], 3, 0, finals);
    cr_assert(strstr(u, "OPEN-B0"), "b's reply is quoted to mod: %s", u);
    cr_assert(strstr(u, "SECRET-A0"), "so is a's: mod speaks after a (seed 000): %s", u);
    cr_assert_null(strstr(u, "OPEN-C0"), "mod does not speak after c: %s", u);
    free(u);
    pl_job_spec_free(&s);
}

Test(prompt, visible_to_filters_later_rounds)
{
    pl_job_spec s = spec4();
    const char *finals[8] = {"SECRET-A0", "OPEN-B0", "OPEN-C0", "MOD-0",
                             "SECRET-A1", "OPEN-B1", NULL, NULL};
    /* Round 1 for c: a's round-0 reply is not for c; b's and mod's are. */
    char *u = pl_prompt_round_user(&s, &s.questions[0], 2, 1, finals);
    cr_assert_null(strstr(u, "SECRET-A"), "%s", u);
    cr_assert(strstr(u, "OPEN-B0") && strstr(u, "MOD-0"), "%s", u);
    free(u);
    /* Round 1 for b: a's round-0 reply is visible to b. */
    u = pl_prompt_round_user(&s, &s.questions[0], 1, 1, finals);
    cr_assert(strstr(u, "SECRET-A0") && strstr(u, "MOD-0"), "%s", u);
    free(u);
    /* Round 1 for mod: c's round-0 reply (not seen yet); a's and b's of
     * round 0 were quoted in round 0; this round's a and b again. */
    u = pl_prompt_round_user(&s, &s.questions[0], 3, 1, finals);
    cr_assert(strstr(u, "OPEN-C0"), "%s", u);
    cr_assert_null(strstr(u, "SECRET-A0"), "seen in round 0 already: %s", u);
    cr_assert_null(strstr(u, "OPEN-B0"), "seen in round 0 already: %s", u);
    cr_assert(strstr(u, "SECRET-A1") && strstr(u, "OPEN-B1"), "%s", u);
    free(u);
    pl_job_spec_free(&s);
}

/* ---- prompt_layout: shared_prefix ---- */

static pl_job_spec debate_spec(const char *layout)
{
    char js[1024];
    snprintf(js, sizeof js,
        "{\"experiment\":\"d\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
        "\"prompt_layout\":\"%s\","
        "\"agents\":[{\"id\":\"p0\",\"role\":\"participant\",\"system_prompt\":\"PERSONA0\"},"
        "{\"id\":\"p1\",\"role\":\"participant\",\"system_prompt\":\"PERSONA1\"},"
        "{\"id\":\"p2\",\"role\":\"participant\"},"
        "{\"id\":\"mod\",\"role\":\"moderator\",\"system_prompt\":\"MODP\","
        "\"speak_after_within_round\":[\"p0\",\"p1\",\"p2\"]}],"
        "\"num_rounds\":3,"
        "\"questions\":[{\"id\":\"q\",\"text\":\"QTEXT?\",\"choices\":[\"x\",\"y\"]}]}",
        layout);
    json_t *r = json_loads(js, 0, NULL);
    pl_job_spec s;
    pl_spec_problems p = {0};
    cr_assert_eq(pl_job_spec_parse(r, NULL, &s, &p), 0, "%s", p.n ? p.v[0].message : "");
    json_decref(r);
    return s;
}

typedef struct msgs {
    pl_chat_message *m;
    int n;
} msgs;

static msgs render(pl_job_spec *s, int agent, int round, const char *const *finals)
{
    msgs o;
    cr_assert_eq(pl_prompt_shared(s, &s->questions[0], agent, round, finals, &o.m, &o.n), 0);
    return o;
}

/* a[0..n) equals b[0..n), role and content. */
static bool same_prefix(msgs a, msgs b, int n)
{
    if (a.n < n || b.n < n)
        return false;
    for (int i = 0; i < n; i++)
        if (strcmp(a.m[i].role, b.m[i].role) || strcmp(a.m[i].content, b.m[i].content))
            return false;
    return true;
}

Test(prompt_shared, layout_option_parsed_and_checked)
{
    pl_job_spec s = debate_spec("shared_prefix");
    cr_assert(s.shared_prefix);
    pl_job_spec_free(&s);
    s = debate_spec("seed");
    cr_assert_not(s.shared_prefix);
    pl_job_spec_free(&s);
    json_t *r = json_loads("{\"experiment\":\"d\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
                           "\"prompt_layout\":\"shared\",\"agents\":[{\"id\":\"a\"}],"
                           "\"questions\":[{\"id\":\"q\",\"text\":\"T\"}]}", 0, NULL);
    pl_spec_problems p = {0};
    cr_assert_eq(pl_job_spec_parse(r, NULL, &s, &p), -1);
    bool found = false;
    for (int i = 0; i < p.n; i++)
        found |= !strcmp(p.v[i].path, "prompt_layout") && strstr(p.v[i].message, "shared_prefix");
    cr_assert(found, "the problem names prompt_layout and the accepted values");
    pl_spec_problems_free(&p);
    json_decref(r);
}

/* Where needle starts in hay, or -1. */
static long at(const char *hay, const char *needle)
{
    const char *p = strstr(hay, needle);
    return p ? p - hay : -1;
}

Test(prompt_shared, round_prompts_share_one_prefix_and_extend_it)
{
    pl_job_spec s = debate_spec("shared_prefix");
    const char *finals[12] = {"A0", "B0", "C0", "M0", "A1", "B1", "C1", "M1", "A2", "B2", "C2"};
    for (int round = 0; round < 3; round++) {
        msgs p[4];
        for (int a = 0; a < 4; a++)
            p[a] = render(&s, a, round, finals);
        /* Shared part: roster, question, per finished round the
         * moderator's turn and its reply. */
        int shared = 2 + 2 * round;
        for (int a = 0; a < 4; a++) {
            cr_assert_eq(p[a].n, shared + 1, "round %d agent %d: %d messages", round, a, p[a].n);
            cr_assert(same_prefix(p[0], p[a], shared), "round %d agent %d shares the prefix",
                      round, a);
        }
        cr_assert_str_eq(p[0].m[0].role, "system");
        const char *roster = p[0].m[0].content;
        cr_assert(at(roster, "PERSONA0") >= 0 && at(roster, "PERSONA1") > at(roster, "PERSONA0") &&
                  at(roster, "MODP") > at(roster, "PERSONA1"), "the roster: %s", roster);
        cr_assert(strstr(p[0].m[1].content, "QTEXT?") && strstr(p[0].m[1].content, "B) y"));
        cr_assert(strstr(p[0].m[1].content, "Answer: B"), "the answer format is shared");
        /* Fixed order: rounds in order, agents in spec order, own ones too,
         * the moderator's part, then its message as the assistant turn. */
        for (int r = 0; r < round; r++) {
            const char *u = p[0].m[2 + 2 * r].content;
            char hdr[32];
            snprintf(hdr, sizeof hdr, "Round %d:", r + 1);
            cr_assert_eq(at(u, hdr), 0, "%s", u);
            long last = 0;
            for (int j = 0; j < 3; j++) {
                char q[32];
                snprintf(q, sizeof q, "p%d: %s", j, finals[r * 4 + j]);
                long pos = at(u, q);
                cr_assert_gt(pos, last, "round %d quote %d in order: %s", r, j, u);
                last = pos;
            }
            cr_assert_gt(at(u, "You are mod."), last, "%s", u);
            cr_assert_str_eq(p[0].m[3 + 2 * r].role, "assistant");
            cr_assert_str_eq(p[0].m[3 + 2 * r].content, finals[r * 4 + 3]);
        }
        /* The round's instruction, then the agent's part, last and only
         * there: the participants' turns differ in the id alone. */
        char own[64];
        snprintf(own, sizeof own, "Round %d of 3:", round + 1);
        const char *t0 = p[0].m[shared].content, *t1 = p[1].m[shared].content;
        cr_assert(strstr(t0, own), "%s", t0);
        cr_assert_lt(strlen(t0), 100);
        cr_assert_eq(at(t0, "You are p0."), (long)strlen(t0) - 11, "%s", t0);
        cr_assert_eq(at(t1, "You are p1."), (long)strlen(t1) - 11, "%s", t1);
        cr_assert_eq(strncmp(t0, t1, strlen(t0) - 2), 0);
        /* The moderator reads this round's participants in order in the
         * very turn round + 1 repeats, followed by its reply. */
        for (int j = 0; j < 3; j++)
            cr_assert(strstr(p[3].m[shared].content, finals[round * 4 + j]));
        if (round < 2) {
            msgs next = render(&s, 1, round + 1, finals);
            cr_assert(same_prefix(p[3], next, shared + 1),
                      "round %d+1 extends the moderator's round-%d prompt", round, round);
            cr_assert_str_eq(next.m[shared + 1].role, "assistant");
            cr_assert_str_eq(next.m[shared + 1].content, finals[round * 4 + 3]);
            pl_prompt_messages_free(next.m, next.n);
        }
        for (int a = 0; a < 4; a++)
            pl_prompt_messages_free(p[a].m, p[a].n);
    }
    pl_job_spec_free(&s);
}

/* Without an agent that speaks after all others, a finished round is one
 * user turn of its messages, the same for every agent. */
Test(prompt_shared, no_closer_one_turn_per_round)
{
    json_t *r = json_loads(
        "{\"experiment\":\"d\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
        "\"prompt_layout\":\"shared_prefix\",\"num_rounds\":3,\"validation\":{\"enabled\":false},"
        "\"agents\":[{\"id\":\"x\"},{\"id\":\"y\"},{\"id\":\"z\",\"speak_after_within_round\":[\"x\"]}],"
        "\"questions\":[{\"id\":\"q\",\"text\":\"T\"}]}", 0, NULL);
    pl_job_spec s;
    pl_spec_problems pr = {0};
    cr_assert_eq(pl_job_spec_parse(r, NULL, &s, &pr), 0, "%s", pr.n ? pr.v[0].message : "");
    json_decref(r);
    const char *finals[9] = {"X0", "Y0", "Z0", "X1", "Y1", "Z1"};
    msgs m[3];
    for (int a = 0; a < 3; a++) {
        m[a] = render(&s, a, 2, finals);
        cr_assert_eq(m[a].n, 5);
        cr_assert(same_prefix(m[0], m[a], 4));
    }
    cr_assert_str_eq(m[0].m[2].content, "Round 1:\n\nx: X0\n\ny: Y0\n\nz: Z0");
    cr_assert_str_eq(m[0].m[3].role, "user");
    cr_assert_null(strstr(m[0].m[4].content, "X"), "x's part: %s", m[0].m[4].content);
    for (int a = 0; a < 3; a++)
        pl_prompt_messages_free(m[a].m, m[a].n);
    /* z speaks after x: x's message of this round, then z's part. */
    finals[6] = "X2";
    msgs z = render(&s, 2, 2, finals);
    cr_assert_eq(at(z.m[4].content, "Round 3:\n\nx: X2\n\nRound 3 of 3:"), 0, "%s",
                 z.m[4].content);
    cr_assert(strstr(z.m[4].content, "asked. You are z.") &&
              at(z.m[4].content, "You are z.") == (long)strlen(z.m[4].content) - 10);
    pl_prompt_messages_free(z.m, z.n);
    pl_job_spec_free(&s);
}

Test(prompt_shared, visibility_as_in_the_seed_layout)
{
    pl_job_spec s = spec();   /* a is visible to b only; mod speaks after a, b */
    const char *finals[6] = {"SECRET-A0", "OPEN-B0", "MOD-0", "SECRET-A1", "OPEN-B1", NULL};
    /* mod, round 1: it read a's replies as it spoke after a, in round 0 and
     * now, so its own turns quote them (the prefix its cache holds). */
    msgs m = render(&s, 2, 1, finals);
    bool a0 = false, a1 = false;
    for (int i = 0; i < m.n; i++) {
        a0 |= strstr(m.m[i].content, "SECRET-A0") != NULL;
        a1 |= strstr(m.m[i].content, "SECRET-A1") != NULL;
    }
    cr_assert(a0 && a1, "mod speaks after a: a's replies are quoted to it");
    pl_prompt_messages_free(m.m, m.n);
    /* b reads a (visible_to); in round 1 b does not see a's round-1 reply
     * (b does not speak after a). */
    m = render(&s, 1, 1, finals);
    a0 = a1 = false;
    for (int i = 0; i < m.n; i++) {
        a0 |= strstr(m.m[i].content, "SECRET-A0") != NULL;
        a1 |= strstr(m.m[i].content, "SECRET-A1") != NULL;
    }
    cr_assert(a0 && !a1, "b reads a's earlier rounds only");
    pl_prompt_messages_free(m.m, m.n);
    pl_job_spec_free(&s);
}

/* Who may not read a's replies never does, in any round. */
Test(prompt_shared, visible_to_still_filters_later_rounds)
{
    pl_job_spec s = spec4();  /* c neither speaks after a nor is named by it */
    const char *finals[8] = {"SECRET-A0", "OPEN-B0", "OPEN-C0", "MOD-0",
                             "SECRET-A1", "OPEN-B1", "OPEN-C1", "MOD-1"};
    msgs m = render(&s, 2, 1, finals);
    bool b0 = false;
    for (int i = 0; i < m.n; i++) {
        cr_assert_null(strstr(m.m[i].content, "SECRET"), "%s", m.m[i].content);
        b0 |= strstr(m.m[i].content, "OPEN-B0") != NULL;
    }
    cr_assert(b0);
    pl_prompt_messages_free(m.m, m.n);
    pl_job_spec_free(&s);
}

/* ---- the same, in the engine's tokens (the default model's tokenizer and
 * chat template, as the engine renders and encodes a request) ---- */

typedef struct real_text {
    pl_gguf *g;
    pl_tokenizer *tok;
    pl_chat_style style;
    char *bos, *eos;
} real_text;

static char *tok_text(const pl_tokenizer *t, int32_t id)
{
    size_t len = 0;
    const char *p = id >= 0 ? pl_tokenizer_token_bytes(t, id, &len) : NULL;
    return p ? strndup(p, len) : strdup("");
}

static void real_text_open(real_text *rt)
{
    char err[256];
    rt->g = pl_gguf_open(pl_test_model_path(), err, sizeof err);
    cr_assert_not_null(rt->g, "%s", err);
    rt->tok = pl_tokenizer_from_gguf(rt->g, err, sizeof err);
    cr_assert_not_null(rt->tok, "%s", err);
    pl_gguf_str src;
    cr_assert_eq(pl_gguf_get_str(rt->g, "tokenizer.chat_template", &src), 0);
    char *jinja = strndup(src.ptr, (size_t)src.len);
    cr_assert_eq(pl_chat_style_init(&rt->style, jinja), 0);
    free(jinja);
    cr_assert_neq(rt->style.tmpl, PL_CHAT_TMPL_UNKNOWN);
    rt->bos = tok_text(rt->tok, pl_tokenizer_bos(rt->tok));
    rt->eos = tok_text(rt->tok, pl_tokenizer_eos(rt->tok));
}

static void real_text_close(real_text *rt)
{
    free(rt->bos);
    free(rt->eos);
    pl_chat_style_free(&rt->style);
    pl_tokenizer_free(rt->tok);
    pl_gguf_free(rt->g);
}

typedef struct ids {
    int32_t *v;
    int n;
} ids;

/* What the engine prefills for these messages (generation prompt added). */
static ids encode_msgs(const real_text *rt, msgs m)
{
    char *text = NULL;
    pl_err err = {0};
    cr_assert_eq(pl_chat_style_render(&rt->style, m.m, m.n, true, rt->bos, rt->eos, &text,
                                      &err), 0);
    ids o;
    cr_assert_eq(pl_tokenizer_encode(rt->tok, text, strlen(text), false, true, &o.v, &o.n), 0);
    free(text);
    return o;
}

static ids encode_text(const real_text *rt, const char *text)
{
    ids o;
    cr_assert_eq(pl_tokenizer_encode(rt->tok, text, strlen(text), false, false, &o.v, &o.n), 0);
    return o;
}

static int common_prefix(ids a, ids b)
{
    int i = 0;
    while (i < a.n && i < b.n && a.v[i] == b.v[i])
        i++;
    return i;
}

/* Round r+1's prompts, every agent's, start with the moderator's round-r
 * prompt followed by its reply as the model produced it (the tokens its KV
 * holds); the four prompts of one round share all but the agent's own
 * part, which is short. */
Test(prompt_shared, round_prefix_extends_in_engine_tokens)
{
    PL_TEST_MODEL_OR_SKIP();
    real_text rt;
    real_text_open(&rt);
    pl_job_spec s = debate_spec("shared_prefix");
    const char *finals[12] = {
        "Water boils at 100 degrees at sea level, so the first choice fits.\nAnswer: A",
        "The obvious answer ignores pressure; still, A is right here.\nAnswer: A",
        "Simplest: boiling point of water. Answer: A",
        "All three agree on the boiling point.\nAnswer: A",
        "I keep my view: (x) matches the definition.\nAnswer: A",
        "On reflection y is wrong because it confuses units.\nAnswer: A",
        "Still A.",
        "The debate converged; the answer is A.\nAnswer: A",
    };
    for (int round = 0; round < 2; round++) {
        msgs mod = render(&s, 3, round, finals);
        ids pm = encode_msgs(&rt, mod);
        ids reply = encode_text(&rt, finals[round * 4 + 3]);
        ids next[4];
        for (int a = 0; a < 4; a++) {
            msgs m = render(&s, a, round + 1, finals);
            next[a] = encode_msgs(&rt, m);
            pl_prompt_messages_free(m.m, m.n);
            cr_assert_geq(common_prefix(next[a], pm), pm.n,
                          "round %d agent %d extends the moderator's prompt", round + 1, a);
            cr_assert_gt(next[a].n, pm.n + reply.n);
            cr_assert_eq(memcmp(next[a].v + pm.n, reply.v, (size_t)reply.n * sizeof *reply.v), 0,
                         "round %d agent %d: the moderator's reply as generated", round + 1, a);
        }
        for (int a = 0; a < 3; a++) {
            int own = next[a].n - common_prefix(next[a], next[(a + 1) % 3]);
            cr_assert_leq(own, 8, "round %d agent %d: own part %d tokens of %d", round + 1, a,
                          own, next[a].n);
        }
        for (int a = 0; a < 4; a++)
            free(next[a].v);
        free(pm.v);
        free(reply.v);
        pl_prompt_messages_free(mod.m, mod.n);
    }
    pl_job_spec_free(&s);
    real_text_close(&rt);
}

/* The turns as one text (a template-like rendering: role, content). */
static char *joined(msgs o)
{
    size_t len = 1;
    for (int i = 0; i < o.n; i++)
        len += strlen(o.m[i].role) + strlen(o.m[i].content) + 4;
    char *t = malloc(len), *p = t;
    for (int i = 0; i < o.n; i++)
        p += sprintf(p, "<%s>%s\n", o.m[i].role, o.m[i].content);
    *p = 0;
    return t;
}

/* What is sent (pl_prompt_fold): the roles alternate after the system
 * turn, as Gemma's and Mistral's templates require, and the prefixes the
 * cache serves are still shared: a round's prompts differ in the agent's
 * part alone, and the closer's prompt and reply begin the next round's. */
Test(prompt_shared, folded_turns_alternate_and_keep_the_shared_prefix)
{
    pl_job_spec s = debate_spec("shared_prefix");
    const char *finals[12] = {"A0", "B0", "C0", "M0", "A1", "B1", "C1", "M1", "A2", "B2", "C2"};
    for (int round = 0; round < 3; round++) {
        char *t[4];
        for (int a = 0; a < 4; a++) {
            msgs o = render(&s, a, round, finals);
            int before = o.n;
            cr_assert_eq(pl_prompt_fold(o.m, &o.n), 0);
            cr_assert_leq(o.n, before);
            cr_assert_str_eq(o.m[0].role, "system");
            for (int i = 1; i < o.n; i++)
                cr_assert_str_eq(o.m[i].role, i % 2 ? "user" : "assistant",
                                 "round %d agent %d turn %d", round, a, i);
            cr_assert_str_eq(o.m[o.n - 1].role, "user");
            t[a] = joined(o);
            pl_prompt_messages_free(o.m, o.n);
        }
        size_t n0 = strlen(t[0]), own = strlen("You are p0.\n");
        for (int a = 1; a < 3; a++)
            cr_assert_eq(strncmp(t[0], t[a], n0 - own), 0, "round %d: agent %d's text", round,
                         a);
        if (round < 2) {
            msgs next = render(&s, 1, round + 1, finals);
            cr_assert_eq(pl_prompt_fold(next.m, &next.n), 0);
            char *tn = joined(next);
            size_t nm = strlen(t[3]) - 1;     /* the moderator's text, its last newline off */
            cr_assert_eq(strncmp(t[3], tn, nm), 0, "round %d+1 begins with the moderator's "
                         "round-%d prompt:\n%s\n---\n%s", round, round, t[3], tn);
            free(tn);
            pl_prompt_messages_free(next.m, next.n);
        }
        for (int a = 0; a < 4; a++)
            free(t[a]);
    }
    pl_job_spec_free(&s);
}

/* test_prompt.c - what each agent reads: visible_to filters the previous
 * round's quotes and the current-round quotes speak_after_within_round adds;
 * the dependency still orders the turn. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/jobs/prompt.h"

static pl_job_spec spec(void)
{
    const char *js =
        "{\"experiment\":\"vis\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
        "\"agents\":[{\"id\":\"a\",\"visible_to\":[\"b\"]},{\"id\":\"b\"},"
        "{\"id\":\"mod\",\"speak_after_within_round\":[\"a\",\"b\"]}],"
        "\"num_rounds\":2,\"validation\":{\"enabled\":false},"
        "\"questions\":[{\"id\":\"q\",\"text\":\"T?\"}]}";
    json_t *r = json_loads(js, 0, NULL);
    pl_job_spec s;
    pl_spec_problems p = {0};
    cr_assert_eq(pl_job_spec_parse(r, NULL, &s, &p), 0);
    json_decref(r);
    return s;
}

Test(prompt, visible_to_filters_current_round_quotes)
{
    pl_job_spec s = spec();
    cr_assert_eq(s.agents[2].deps, 3u, "mod speaks after a and b");
    const char *finals[6] = {"SECRET-A0", "OPEN-B0", NULL, NULL, NULL, NULL};
    char *u = pl_prompt_round_user(&s, &s.questions[0], 2, 0, finals);
    cr_assert(strstr(u, "OPEN-B0"), "b's reply is quoted to mod: %s", u);
    cr_assert_null(strstr(u, "SECRET-A0"), "a's reply is visible only to b: %s", u);
    free(u);
    /* b does not speak after a: a's round-0 reply reaches b in round 1. */
    finals[2] = "MOD-0";
    u = pl_prompt_round_user(&s, &s.questions[0], 1, 1, finals);
    cr_assert(strstr(u, "SECRET-A0"), "%s", u);
    cr_assert(strstr(u, "MOD-0"), "%s", u);
    free(u);
    /* Round 1 for mod: a's message never, b's already seen, mod's own no. */
    finals[3] = "SECRET-A1";
    finals[4] = "OPEN-B1";
    u = pl_prompt_round_user(&s, &s.questions[0], 2, 1, finals);
    cr_assert_null(strstr(u, "SECRET-A"), "%s", u);
    cr_assert_null(strstr(u, "OPEN-B0"), "seen in round 0 already: %s", u);
    cr_assert(strstr(u, "OPEN-B1"), "%s", u);
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

Test(prompt_shared, round_prompts_share_one_prefix_and_extend_it)
{
    pl_job_spec s = debate_spec("shared_prefix");
    const char *finals[12] = {"A0", "B0", "C0", "M0", "A1", "B1", "C1", "M1", "A2", "B2", "C2"};
    for (int round = 0; round < 3; round++) {
        msgs p[4];
        for (int a = 0; a < 4; a++)
            p[a] = render(&s, a, round, finals);
        /* Shared part: preamble, question, 4 quotes per earlier round. */
        int shared = 2 + 4 * round;
        cr_assert_eq(p[0].n, shared + 1, "round %d: %d messages", round, p[0].n);
        cr_assert_str_eq(p[0].m[0].role, "system");
        cr_assert_null(strstr(p[0].m[0].content, "PERSONA"), "the preamble is common");
        cr_assert(strstr(p[0].m[1].content, "QTEXT?") && strstr(p[0].m[1].content, "B) y"));
        cr_assert(strstr(p[0].m[1].content, "Answer: B"), "the answer format is shared");
        for (int a = 1; a < 4; a++)
            cr_assert(same_prefix(p[0], p[a], shared), "round %d agent %d shares the prefix",
                      round, a);
        /* Fixed order: rounds in order, agents in spec order, own ones too. */
        for (int r = 0; r < round; r++)
            for (int j = 0; j < 4; j++)
                cr_assert(strstr(p[0].m[2 + 4 * r + j].content, finals[r * 4 + j]),
                          "round %d quote %d: %s", r, j, p[0].m[2 + 4 * r + j].content);
        /* The persona and the instruction come last, only there. */
        cr_assert(strstr(p[0].m[shared].content, "PERSONA0"));
        char rr[32];
        snprintf(rr, sizeof rr, "Round %d of 3.", round + 1);
        cr_assert(strstr(p[0].m[shared].content, rr), "%s", p[0].m[shared].content);
        cr_assert(strstr(p[1].m[shared].content, "PERSONA1"));
        /* The moderator reads this round's participants in order, right
         * where the next round's prompts quote them. */
        cr_assert_eq(p[3].n, shared + 4);
        for (int j = 0; j < 3; j++)
            cr_assert(strstr(p[3].m[shared + j].content, finals[round * 4 + j]));
        cr_assert(strstr(p[3].m[shared + 3].content, "MODP"));
        if (round < 2) {
            msgs next = render(&s, 1, round + 1, finals);
            cr_assert(same_prefix(p[3], next, shared + 3),
                      "round %d+1 extends round %d's prefix and the moderator's", round, round);
            pl_prompt_messages_free(next.m, next.n);
        }
        for (int a = 0; a < 4; a++)
            pl_prompt_messages_free(p[a].m, p[a].n);
    }
    pl_job_spec_free(&s);
}

Test(prompt_shared, visible_to_still_filters)
{
    pl_job_spec s = spec();   /* a is visible to b only */
    const char *finals[6] = {"SECRET-A0", "OPEN-B0", "MOD-0", NULL, NULL, NULL};
    msgs m = render(&s, 2, 1, finals);
    bool open = false;
    for (int i = 0; i < m.n; i++) {
        cr_assert_null(strstr(m.m[i].content, "SECRET"), "%s", m.m[i].content);
        open |= strstr(m.m[i].content, "OPEN-B0") != NULL;
    }
    cr_assert(open);
    pl_prompt_messages_free(m.m, m.n);
    m = render(&s, 1, 1, finals);
    bool secret = false;
    for (int i = 0; i < m.n; i++)
        secret |= strstr(m.m[i].content, "SECRET-A0") != NULL;
    cr_assert(secret, "b reads a");
    pl_prompt_messages_free(m.m, m.n);
    pl_job_spec_free(&s);
}

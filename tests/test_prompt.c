/* test_prompt.c - what each agent reads: visible_to filters the previous
 * round's quotes and the current-round quotes speak_after_within_round adds;
 * the dependency still orders the turn. */
#include <criterion/criterion.h>

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

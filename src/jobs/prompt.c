/* prompt.c - the user turns of each agent's append-only message list. */
#include "src/jobs/prompt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return;
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* The answer format. Every valid line is spelled out, so a reply that
 * repeats the instruction still names a choice. */
static void instruction(sbuf *b, const pl_job_spec *s, const pl_job_question *q)
{
    if (!s->validation || q->n_choices == 0)
        return;
    sb_printf(b, "\nGive your reasoning briefly, then end with exactly one of these lines:");
    for (int i = 0; i < q->n_choices; i++)
        sb_printf(b, "%s Answer: %c", i ? " |" : "", pl_job_choice_label(i));
    sb_printf(b, "\n");
}

static void question(sbuf *b, const pl_job_question *q)
{
    sb_printf(b, "Question: %s\n", q->text);
    for (int i = 0; i < q->n_choices; i++)
        sb_printf(b, "%c) %s\n", pl_job_choice_label(i), q->choices[i]);
}

static void quote(sbuf *b, const pl_job_spec *s, int agent, const char *text)
{
    const pl_job_agent *a = &s->agents[agent];
    sb_printf(b, "\n[%s%s%s]: %s\n", a->id, a->role ? ", " : "", a->role ? a->role : "",
              text);
}

char *pl_prompt_round_user(const pl_job_spec *s, const pl_job_question *q,
                           int agent, int round, const char *const *finals)
{
    sbuf b = {0};
    const pl_job_agent *me = &s->agents[agent];
    int n = s->n_agents;
    if (round == 0) {
        question(&b, q);
    } else {
        sb_printf(&b, "Round %d of %d.", round + 1, s->num_rounds);
        bool any = false;
        /* Last round's messages, except mine and those I saw then. */
        for (int j = 0; j < n; j++) {
            const char *t = finals[(round - 1) * n + j];
            if (j == agent || (me->deps >> j & 1) || !t ||
                !(s->agents[j].visible_to >> agent & 1))
                continue;
            if (!any)
                sb_printf(&b, " Messages from round %d:\n", round);
            any = true;
            quote(&b, s, j, t);
        }
        if (!any)
            sb_printf(&b, "\n");
    }
    bool first = true;
    for (int j = 0; j < n; j++) {
        const char *t = finals[round * n + j];
        /* visible_to is the speaker's word on who reads the message at all:
         * it filters this round's quotes too (the dependency still orders
         * the turn). */
        if (!(me->deps >> j & 1) || !t || !(s->agents[j].visible_to >> agent & 1))
            continue;
        if (first)
            sb_printf(&b, "\nThis round so far:\n");
        first = false;
        quote(&b, s, j, t);
    }
    instruction(&b, s, q);
    if (!b.s)
        return strdup("");
    return b.s;
}

char *pl_prompt_correction(const pl_job_spec *s, const pl_job_question *q)
{
    sbuf b = {0};
    sb_printf(&b, "Your reply did not end with a valid answer.");
    instruction(&b, s, q);
    return b.s ? b.s : strdup("");
}

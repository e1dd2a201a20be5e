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

/* ---- prompt_layout: shared_prefix ---- */

typedef struct mlist {
    pl_chat_message *m;
    int n, cap;
    bool oom;
} mlist;

static void ml_push(mlist *l, const char *role, sbuf *b)
{
    if (!l->oom && l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        pl_chat_message *m = realloc(l->m, (size_t)cap * sizeof *m);
        if (m) {
            l->m = m;
            l->cap = cap;
        }
    }
    if (l->oom || l->n == l->cap || !b->s) {
        l->oom = true;
        free(b->s);
    } else {
        l->m[l->n++] = (pl_chat_message){role, b->s};
    }
    *b = (sbuf){0};
}

/* One quoted message, alone in its user turn, so that the tokens of a
 * quote never depend on what follows it. */
static void shared_quote(mlist *l, const pl_job_spec *s, int round, int j,
                         const char *text)
{
    sbuf b = {0};
    const pl_job_agent *a = &s->agents[j];
    sb_printf(&b, "[round %d, %s%s%s]: %s", round + 1, a->id, a->role ? ", " : "",
              a->role ? a->role : "", text);
    ml_push(l, "user", &b);
}

static bool reads(const pl_job_spec *s, int agent, int j)
{
    return j == agent || (s->agents[j].visible_to >> agent & 1);
}

int pl_prompt_shared(const pl_job_spec *s, const pl_job_question *q, int agent,
                     int round, const char *const *finals, pl_chat_message **out,
                     int *n_out)
{
    mlist l = {0};
    sbuf b = {0};
    int n = s->n_agents;
    const pl_job_agent *me = &s->agents[agent];
    sb_printf(&b, "%d agents debate the question below over %d rounds. Each message "
              "is quoted as [round, agent, role].", n, s->num_rounds);
    ml_push(&l, "system", &b);
    question(&b, q);
    instruction(&b, s, q);       /* the same answer format for everyone */
    ml_push(&l, "user", &b);
    for (int r = 0; r < round; r++)
        for (int j = 0; j < n; j++)
            if (finals[r * n + j] && reads(s, agent, j))
                shared_quote(&l, s, r, j, finals[r * n + j]);
    for (int j = 0; j < n; j++)
        if ((me->deps >> j & 1) && finals[round * n + j] && reads(s, agent, j))
            shared_quote(&l, s, round, j, finals[round * n + j]);
    sb_printf(&b, "You are %s%s%s.", me->id, me->role ? ", the " : "",
              me->role ? me->role : "");
    if (me->system_prompt)
        sb_printf(&b, " %s", me->system_prompt);
    sb_printf(&b, "\nRound %d of %d.%s", round + 1, s->num_rounds,
              round ? " Weigh the messages above, then give your answer in the format asked."
                    : " Give your answer in the format asked.");
    ml_push(&l, "user", &b);
    if (l.oom) {
        pl_prompt_messages_free(l.m, l.n);
        return -1;
    }
    *out = l.m;
    *n_out = l.n;
    return 0;
}

void pl_prompt_messages_free(pl_chat_message *m, int n)
{
    for (int i = 0; m && i < n; i++)
        free((char *)m[i].content);
    free(m);
}

char *pl_prompt_correction(const pl_job_spec *s, const pl_job_question *q)
{
    sbuf b = {0};
    sb_printf(&b, "Your reply did not end with a valid answer.");
    instruction(&b, s, q);
    return b.s ? b.s : strdup("");
}

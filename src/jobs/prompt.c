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
        /* This round's replies of the agents it speaks after, whatever
         * their visible_to (seed 000: that is for later rounds only). */
        if (!(me->deps >> j & 1) || !t)
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

/* agent reads j's reply of a round: its own; one quoted to it in that
 * round (it speaks after j); or, in later rounds, one whose visible_to
 * names it. */
static bool reads(const pl_job_spec *s, int agent, int j)
{
    return j == agent || (s->agents[agent].deps >> j & 1) ||
           (s->agents[j].visible_to >> agent & 1);
}

/* At most one: two would wait on each other. */
int pl_prompt_closer(const pl_job_spec *s)
{
    uint64_t all = s->n_agents >= 64 ? ~0ull : (1ull << s->n_agents) - 1;
    for (int c = 0; c < s->n_agents; c++)
        if (s->agents[c].deps == (all & ~(1ull << c)))
            return c;
    return -1;
}

/* Common to every conversation of the job: the agents and their personas. */
static void preamble(sbuf *b, const pl_job_spec *s)
{
    sb_printf(b, "%d agents debate a question over %d rounds:", s->n_agents, s->num_rounds);
    for (int j = 0; j < s->n_agents; j++) {
        const pl_job_agent *a = &s->agents[j];
        sb_printf(b, "\n- %s%s%s%s%s", a->id, a->role ? " (" : "", a->role ? a->role : "",
                  a->role ? ")" : "", a->system_prompt ? ": " : "");
        if (a->system_prompt)
            sb_printf(b, "%s", a->system_prompt);
    }
    sb_printf(b, "\nMessages are quoted as <agent>: <message>.");
}

/* "Round K:" and the messages of round k that `agent` reads among `who`
 * (a bit set), agents in spec order. */
static void round_quotes(sbuf *b, const pl_job_spec *s, int agent, int k,
                         const char *const *finals, uint64_t who)
{
    sb_printf(b, "Round %d:", k + 1);
    for (int j = 0; j < s->n_agents; j++) {
        const char *t = finals[k * s->n_agents + j];
        if ((who >> j & 1) && t && reads(s, agent, j))
            sb_printf(b, "\n\n%s: %s", s->agents[j].id, t);
    }
    sb_printf(b, "\n\n");
}

/* The round's instruction, the same for every agent, then who the agent
 * is: the only part the agents of one round do not share. */
static void tail(sbuf *b, const pl_job_spec *s, int agent, int k)
{
    sb_printf(b, "Round %d of %d: %s You are %s.", k + 1, s->num_rounds,
              k ? "weigh the messages above, then give your answer in the format asked."
                : "give your answer in the format asked.",
              s->agents[agent].id);
}

/* A finished round k as `agent` reads it. With a closer whose message it
 * reads: the closer's own turn (the others' messages, its part) and its
 * reply as the assistant turn, the tokens that closer's KV already holds.
 * Otherwise: the messages in one user turn. */
static void past_round(mlist *l, const pl_job_spec *s, int agent, int k,
                       const char *const *finals, int c)
{
    sbuf b = {0};
    uint64_t all = ~0ull;
    const char *ct = c >= 0 ? finals[k * s->n_agents + c] : NULL;
    if (ct && reads(s, agent, c)) {
        round_quotes(&b, s, agent, k, finals, all & ~(1ull << c));
        tail(&b, s, c, k);
        ml_push(l, "user", &b);
        b.s = strdup(ct);
        ml_push(l, "assistant", &b);
        return;
    }
    round_quotes(&b, s, agent, k, finals, all);
    if (b.s && b.len >= 2)  /* no blank line at the turn's end */
        b.s[b.len -= 2] = 0;
    ml_push(l, "user", &b);
}

int pl_prompt_shared(const pl_job_spec *s, const pl_job_question *q, int agent,
                     int round, const char *const *finals, pl_chat_message **out,
                     int *n_out)
{
    mlist l = {0};
    sbuf b = {0};
    int c = pl_prompt_closer(s);
    const pl_job_agent *me = &s->agents[agent];
    preamble(&b, s);
    ml_push(&l, "system", &b);
    question(&b, q);
    instruction(&b, s, q);       /* the same answer format for everyone */
    ml_push(&l, "user", &b);
    for (int k = 0; k < round; k++)
        past_round(&l, s, agent, k, finals, c);
    /* This round: the messages of the agents it speaks after (a closer's
     * turn is the one the next round repeats), then its part. */
    if (me->deps)
        round_quotes(&b, s, agent, round, finals, me->deps);
    tail(&b, s, agent, round);
    ml_push(&l, "user", &b);
    if (l.oom) {
        pl_prompt_messages_free(l.m, l.n);
        return -1;
    }
    *out = l.m;
    *n_out = l.n;
    return 0;
}

int pl_prompt_fold(pl_chat_message *m, int *n)
{
    int k = 0, rc = 0;
    for (int i = 0; i < *n; i++) {
        if (rc == 0 && k > 0 && !strcmp(m[k - 1].role, m[i].role)) {
            size_t a = strlen(m[k - 1].content), b = strlen(m[i].content);
            char *c = realloc((char *)m[k - 1].content, a + b + 3);
            if (!c) {
                rc = -1;         /* the rest kept as it is */
                m[k++] = m[i];
                continue;
            }
            memcpy(c + a, "\n\n", 2);
            memcpy(c + a + 2, m[i].content, b + 1);
            m[k - 1].content = c;
            free((char *)m[i].content);
            continue;
        }
        m[k++] = m[i];
    }
    *n = k;
    return rc;
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

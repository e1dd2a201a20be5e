/* prompt.h - what each agent sees, built append-only across rounds.
 *
 * An agent's message list in round N+1 is its list of round N plus new
 * messages, never an edit, so the engine's prefix cache reuses the whole
 * earlier conversation:
 *
 *   system     the agent's system prompt (when it has one)
 *   user       round 0: the question and its choices, the current-round
 *              messages of the agents it speaks after, the answer format
 *   assistant  its round-0 reply (re-prompts add: user correction, reply)
 *   user       round 1: round-0 messages it may read (visible_to) and has
 *              not seen yet, current-round messages of the agents it
 *              speaks after, the answer format
 *   ...
 *
 * As seed 000 defines them: speak_after_within_round decides both when an
 * agent speaks and which replies of the current round its prompt quotes
 * (all of them, whatever their visible_to); visible_to decides who reads a
 * reply in later rounds ("distinct from visible_to").
 *
 * Pure functions over the spec and a table of final messages; no I/O.
 */
#ifndef PL_PROMPT_H
#define PL_PROMPT_H

#include "src/jobs/job_spec.h"

/**
 * The user message opening round `round` for `agent`. finals holds the
 * accepted message of each (round, agent) at finals[round * n_agents +
 * agent] (NULL when none). Returns a malloc'd string.
 */
char *pl_prompt_round_user(const pl_job_spec *s, const pl_job_question *q,
                           int agent, int round, const char *const *finals);

/**
 * prompt_layout: shared_prefix. The whole message list of `agent`'s first
 * attempt in `round`, rebuilt each round (not append-only per agent), so
 * that every agent's prompt of one round opens with the same tokens:
 *
 *   system     the roster, common to every conversation of the job: agent
 *              count, rounds, each agent's id, role and system prompt (its
 *              persona), the quote format "<agent>: <message>"
 *   user       the question, its choices and the answer format
 *   per finished round K, in order, agents in spec order (the agent's own
 *   messages too; others' when it speaks after them, or when their
 *   visible_to names it):
 *     with a closer (the agent that speaks after all others, e.g. a
 *     moderator) whose message the agent reads:
 *       user       "Round K:" the others' messages, then the closer's part
 *       assistant  the closer's message
 *     (exactly the closer's own turn and reply, so its KV serves them);
 *     otherwise one user turn "Round K:" and the round's messages
 *   user       this round: "Round R:" and the messages of the agents it
 *              speaks after (a closer's turn, repeated by the next round),
 *              then "Round R of N: <instruction>" (the same for every
 *              agent) and its part: "You are <id>."
 *
 * Round r+1's shared part extends the closer's round-r prompt and reply, so
 * one cached prefix serves a conversation's round and grows with it; an
 * agent's own part is a few tokens. Re-prompts append to this list as in
 * the seed layout. Returns 0 with *out (n_out entries; role literals,
 * content malloc'd: free with pl_prompt_messages_free), -1 on
 * OOM.
 */
int pl_prompt_shared(const pl_job_spec *s, const pl_job_question *q, int agent,
                     int round, const char *const *finals, pl_chat_message **out,
                     int *n_out);
void pl_prompt_messages_free(pl_chat_message *m, int n);

/** Consecutive turns of one role in m (n entries) joined into one, their
 *  contents separated by a blank line, in place (*n shrinks): what is
 *  sent, since the strict templates (Gemma's, Mistral's) refuse roles that
 *  do not alternate. A prompt's text up to its last turn is still the
 *  shared text before it, so the cached prefixes are the same. 0, or -1
 *  on OOM (what was joined so far stays joined; m stays valid). */
int pl_prompt_fold(pl_chat_message *m, int *n);

/** The agent that speaks after every other one in a round (a moderator:
 *  the shared_prefix layout's closer), or -1. */
int pl_prompt_closer(const pl_job_spec *s);

/** The user message sent after a reply that failed validation. */
char *pl_prompt_correction(const pl_job_spec *s, const pl_job_question *q);

#endif

/* prompt.h - what each agent sees, built append-only across rounds.
 *
 * An agent's message list in round N+1 is its list of round N plus new
 * messages, never an edit, so the engine's prefix cache reuses the whole
 * earlier conversation:
 *
 *   system     the agent's system prompt (when it has one)
 *   user       round 0: the question and its choices, the current-round
 *              messages of the agents it speaks after (those visible to
 *              it), the answer format
 *   assistant  its round-0 reply (re-prompts add: user correction, reply)
 *   user       round 1: round-0 messages it may read (visible_to) and has
 *              not seen yet, current-round messages of the agents it
 *              speaks after (those visible to it), the answer format
 *   ...
 *
 * visible_to filters every quote, of the last round and of the current one:
 * a message is read only by the agents its speaker's visible_to names.
 * speak_after_within_round orders the turn either way, so an agent may wait
 * for a message it does not read.
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

/** The user message sent after a reply that failed validation. */
char *pl_prompt_correction(const pl_job_spec *s, const pl_job_question *q);

#endif

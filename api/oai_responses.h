/* oai_responses.h - OpenAI's Responses API: POST /v1/responses (plain and
 * streamed with the Responses event types), GET and DELETE
 * /v1/responses/{id}, and previous_response_id over a bounded in-memory
 * store of recent responses.
 */
#ifndef PL_API_OAI_RESPONSES_H
#define PL_API_OAI_RESPONSES_H

#include <jansson.h>

#include "api/oai_params.h"
#include "api/server.h"

/** Responses kept for GET and previous_response_id; the oldest goes first. */
#define PL_RESPONSES_STORE_MAX 1024

typedef struct pl_responses_api pl_responses_api;

/** Register the routes. Returns NULL on out-of-memory; free with
 *  pl_responses_api_free after the server. */
pl_responses_api *pl_responses_register(pl_server *s);
void pl_responses_api_free(pl_responses_api *a);

/* api/oai_responses_req.c */

/**
 * The chat-completions body a Responses body stands for: instructions as
 * the system message, history (the earlier turns' messages, may be NULL),
 * then the input; text.format as response_format; max_output_tokens as
 * max_tokens. *input gets this turn's input messages (a new reference) for
 * the store. Returns a new object, or NULL with a 400 naming the Responses
 * field.
 */
json_t *pl_responses_chat_body(json_t *body, json_t *history, json_t **input, pl_err *e);

/** pl_oai_parse on that body, with errors renamed to Responses fields. */
int pl_responses_parse(json_t *chat, pl_oai_params *p, pl_err *e);

/** Rename the chat parameter e names to its Responses field
 *  (max_tokens -> max_output_tokens, tools[0].function.x -> tools[0].x). */
void pl_responses_rename_param(pl_err *e);

#endif

/* oai_reasoning.h - a reply's reasoning apart from its content, for the
 * OpenAI request core (api/oai_request.c), by the model's reasoning format
 * (backend.h, reasoning_format; the formats themselves, their constraint
 * wrapping and their streaming split, are backends/text/
 * reasoning_format.h's).
 *
 * Before the request goes out, a constraint (structured outputs, a
 * required tool call) is moved after the reasoning, as vLLM applies its
 * grammar once the reasoning ends: the regex becomes "an optional think
 * block (or analysis message), then the constraint", so the model thinks
 * freely (any text without the closing tag) and the content still matches.
 */
#ifndef PL_API_OAI_REASONING_H
#define PL_API_OAI_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "api/oai_params.h"
#include "backends/text/reasoning_format.h"

/** After tools are prepared: the format into p, and p's constraint moved
 *  after the reasoning (not where the format's prompt closes the
 *  reasoning with enable_thinking false). 0, or -1 with *err (500 on
 *  OOM, 400 when the constraint cannot be compiled). */
int pl_oai_reasoning_prepare(pl_oai_params *p, pl_backend *b, pl_err *err);

/** The call id of a call from a reply's split (OpenAI's "call_" + 24 hex
 *  digits) into id (>= 32 bytes). */
void pl_oai_call_id(char *id, size_t cap);

#endif

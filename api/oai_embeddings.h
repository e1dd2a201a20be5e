/* oai_embeddings.h - POST /v1/embeddings as OpenAI defines it: input as a
 * string, a list of strings, a list of token ids or a list of such lists;
 * encoding_format float or base64 (little-endian float32); dimensions
 * (only the model's own size: parley's encoders are not Matryoshka
 * models); usage.prompt_tokens; vLLM's truncate_prompt_tokens (k, or -1
 * for the model's limit) for inputs over the model's limit, which are
 * otherwise a 400 naming the input. A model that does not embed is a 400.
 * The backend tokenises and embeds off the event loop (backend.h's
 * embed); a client that goes away aborts its request. */
#ifndef PL_API_OAI_EMBEDDINGS_H
#define PL_API_OAI_EMBEDDINGS_H

#include "api/server.h"

/** Register POST /v1/embeddings. */
void pl_oai_embeddings_register(pl_server *s);

#endif

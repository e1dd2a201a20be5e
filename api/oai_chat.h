/* oai_chat.h - the OpenAI chat completions and completions endpoints (their
 * wire format over the request core, api/oai_request.h). */
#ifndef PL_API_OAI_CHAT_H
#define PL_API_OAI_CHAT_H

#include "api/server.h"

/** Register POST /v1/chat/completions and POST /v1/completions. */
void pl_oai_chat_register(pl_server *s);

#endif

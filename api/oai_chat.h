/* oai_chat.h - the OpenAI generation endpoints. */
#ifndef PL_API_OAI_CHAT_H
#define PL_API_OAI_CHAT_H

#include "api/server.h"

/** Register POST /v1/chat/completions and POST /v1/completions. */
void pl_oai_chat_register(pl_server *s);

#endif

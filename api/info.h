/* info.h - informational endpoints: /health, /v1/models, /status,
 * /tokenize, /detokenize, /tokenizer_info. */
#ifndef PL_API_INFO_H
#define PL_API_INFO_H

#include "api/server.h"

void pl_info_register(pl_server *s);

#endif

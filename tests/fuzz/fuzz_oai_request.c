/* fuzz_oai_request.c - libFuzzer target: an HTTP request body through the
 * JSON decoder and OpenAI parameter validation. */
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/oai_params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!body)
        return 0;
    for (int chat = 0; chat < 2; chat++) {
        pl_oai_params p = {0};
        pl_err e;
        if (json_is_object(body) && pl_oai_parse(body, chat, &p, &e) == 0) {
            pl_gen_request r;
            pl_oai_to_request(&p, &r);
        }
        pl_oai_params_free(&p);
    }
    json_decref(body);
    return 0;
}

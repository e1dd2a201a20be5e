/* models_init.c - backend construction from options. */
#include "src/models_init.h"

#include <stdio.h>
#include <string.h>

#include "backends/mock/mock.h"
#include "src/log.h"

static pl_backend *open_mock(struct event_base *base, const pl_opts *o, const char *name)
{
    pl_mock_opts mo = {
        .model = name ? name : (o->served_model_name[0] ? o->served_model_name : "mock"),
        .token_delay_ms = o->mock_token_delay_ms,
        .capacity = o->mock_capacity,
        .seed = (uint64_t)o->mock_seed,
        .echo = strcmp(o->mock_mode, "echo") == 0,
        .max_model_len = o->max_model_len,
    };
    return pl_mock_new(base, &mo);
}

pl_backend *pl_models_open(struct event_base *base, const pl_opts *o, const char *name,
                           char *err, size_t errlen)
{
    if (!strcmp(o->backend, "mock"))
        return open_mock(base, o, name);
    if (!strcmp(o->backend, "auto")) {
        pl_warn("no in-process engine in this build yet: serving the mock backend");
        return open_mock(base, o, name);
    }
    snprintf(err, errlen, "backend '%s' is not available in this build", o->backend);
    return NULL;
}

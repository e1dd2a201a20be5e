/* reasoning_format.c - the table of reasoning formats and what their files
 * share (reasoning_format.h). */
#include "backends/text/reasoning_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pl_reasoning_format *const formats_[] = {
    &pl_reasoning_qwen3,
    &pl_reasoning_qwen35,
    &pl_reasoning_harmony,
    &pl_reasoning_gemma4,
};

const pl_reasoning_format *pl_reasoning_format_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof formats_ / sizeof formats_[0]; i++)
        if (!strcmp(formats_[i]->name, name))
            return formats_[i];
    return NULL;
}

void pl_reply_split_init(pl_reply_split *s, const pl_reasoning_format *fmt, bool calls,
                         pl_thinking thinking)
{
    memset(s, 0, sizeof *s);
    s->fmt = fmt;
    s->calls = calls;
    fmt->init(s, thinking);
}

char *pl_reasoning_wrap_parts(const char *pre, const char *body, const char *post,
                              const char *re)
{
    size_t n = strlen(pre) + strlen(body) + strlen(post) + strlen(re) + 16;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "(?:%s%s%s)?(?:%s)", pre, body, post, re);
    return s;
}

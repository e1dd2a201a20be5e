/* evbuf.c - evbuffer helpers (evbuf.h). */
#include "src/base/evbuf.h"

#include <event2/buffer.h>
#include <stdlib.h>

char *pl_evbuffer_take(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    if (s) {
        evbuffer_remove(b, s, n);
        s[n] = '\0';
    }
    evbuffer_free(b);
    return s;
}

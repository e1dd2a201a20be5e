/* redact.c - URLs without their credentials (see redact.h). */
#include "src/base/redact.h"

#include <stdio.h>
#include <string.h>

void pl_redact_url(const char *url, char *out, size_t n)
{
    if (!n)
        return;
    const char *scheme_end = url ? strstr(url, "://") : NULL;
    const char *auth = scheme_end ? scheme_end + 3 : NULL;
    size_t auth_len = auth ? strcspn(auth, "/?#") : 0;
    const char *at = NULL;
    for (size_t i = 0; i < auth_len; i++)     /* the last '@' ends the userinfo */
        if (auth[i] == '@')
            at = auth + i;
    if (!at) {
        snprintf(out, n, "%s", url ? url : "");
        return;
    }
    snprintf(out, n, "%.*s***%s", (int)(auth - url), url, at);
}

/* redact.h - secrets kept out of what parley shows: logs, /status,
 * /metrics, error messages. */
#ifndef PL_REDACT_H
#define PL_REDACT_H

#include <stddef.h>

/**
 * Copy url into out (n bytes, truncating, always terminated) with its
 * userinfo ("user:password@" in "http://user:password@host/v1") replaced
 * by "***@". A URL without userinfo is copied as it is.
 */
void pl_redact_url(const char *url, char *out, size_t n);

#endif

/* conn_internal.h - shared by conn.c and conn_head.c only. */
#ifndef PL_API_CONN_INTERNAL_H
#define PL_API_CONN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/** What a request head says, or why it is refused. */
typedef struct pl_head_info {
    bool http10, is_head, chunked, has_length, has_host;
    long long length;            /**< Content-Length when has_length */
    int status;                  /**< refusal: HTTP status (0: accepted) */
    const char *code;            /**< refusal: OpenAI error code */
    char msg[200];               /**< refusal: message */
} pl_head_info;

/** Validate a complete head (request line, headers, blank line) of n bytes.
 *  Returns 0, or -1 with hi->status, code and msg set. */
int pl_head_parse(const char *h, size_t n, long max_upload, pl_head_info *hi);
/** Validate one header or trailer line (no line ending). */
int pl_head_header_line(const char *l, size_t n, pl_head_info *hi, bool trailer);

#endif

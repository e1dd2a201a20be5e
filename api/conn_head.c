/* conn_head.c - validation of one HTTP/1.x request head, before evhttp
 * sees it: the request line, the header lines, and the body framing.
 *
 * Stricter than evhttp on purpose: whatever passes here must parse in
 * evhttp without reaching one of its HTML error pages, and nothing may
 * leave bytes whose framing two parsers could read differently.
 */
#include "api/conn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

static int fail(pl_head_info *hi, int status, const char *code, const char *msg)
{
    hi->status = status;
    hi->code = code;
    snprintf(hi->msg, sizeof hi->msg, "%s", msg);
    return -1;
}

static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Methods evhttp parses and we route (others get 501). */
static bool known_method(const char *m, size_t n, bool *no_body)
{
    static const char *ok[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH",
                               "TRACE"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (strlen(ok[i]) == n && !memcmp(ok[i], m, n)) {
            *no_body = i == 1;
            return true;
        }
    }
    return false;
}

static int parse_request_line(const char *l, size_t n, pl_head_info *hi)
{
    const char *sp1 = memchr(l, ' ', n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(l + n - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', (size_t)(l + n - sp2 - 1)))
        return fail(hi, 400, "bad_request", "malformed request line");
    size_t ml = (size_t)(sp1 - l), tl = (size_t)(sp2 - sp1 - 1), vl = (size_t)(l + n - sp2 - 1);
    for (size_t i = 0; i < ml; i++)
        if (!is_tchar((unsigned char)l[i]))
            return fail(hi, 400, "bad_request", "malformed request method");
    if (ml == 0 || tl == 0)
        return fail(hi, 400, "bad_request", "malformed request line");
    if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) || (sp2[8] != '0' && sp2[8] != '1'))
        return fail(hi, 505, "http_version_not_supported", "only HTTP/1.0 and HTTP/1.1 are served");
    hi->http10 = sp2[8] == '0';
    /* Methods evhttp cannot carry (CONNECT, extensions such as QUERY):
     * 405 rather than 501, so no well-formed request gets a 5xx. */
    if (!known_method(l, ml, &hi->is_head))
        return fail(hi, 405, "method_not_allowed",
                    "request method not allowed (GET, HEAD, POST, DELETE, OPTIONS)");
    for (size_t i = 0; i < tl; i++) {
        unsigned char c = (unsigned char)sp1[1 + i];
        if (c <= 0x20 || c >= 0x7f)
            return fail(hi, 400, "bad_request", "the request target has a control, space or "
                                                "non-ASCII byte; percent-encode it");
    }
    char target[8192];
    if (tl >= sizeof target)
        return fail(hi, 414, "uri_too_long", "the request target is longer than 8191 bytes");
    memcpy(target, sp1 + 1, tl);
    target[tl] = '\0';
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(target, EVHTTP_URI_NONCONFORMANT);
    if (!u)
        return fail(hi, 400, "bad_request", "malformed request target");
    evhttp_uri_free(u);
    return 0;
}

/* Trim optional whitespace around a header value. */
static void trim(const char **v, size_t *n)
{
    while (*n && (**v == ' ' || **v == '\t'))
        (*v)++, (*n)--;
    while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
        (*n)--;
}

static bool name_is(const char *name, size_t nl, const char *want)
{
    return strlen(want) == nl && !strncasecmp(name, want, nl);
}

static int header_content_length(const char *v, size_t n, pl_head_info *hi)
{
    if (n == 0 || n > 18)
        return fail(hi, 400, "bad_request", n ? "Content-Length is too large"
                                              : "Content-Length is empty");
    long long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(hi, 400, "bad_request",
                        "Content-Length must be a non-negative decimal integer");
        x = x * 10 + (v[i] - '0');
    }
    if (hi->has_length && hi->length != x)
        return fail(hi, 400, "bad_request", "conflicting Content-Length headers");
    hi->has_length = true;
    hi->length = x;
    return 0;
}

/* One "name: value" line; fills hi for the framing headers. */
int pl_head_header_line(const char *l, size_t n, pl_head_info *hi, bool trailer)
{
    if (n && (l[0] == ' ' || l[0] == '\t'))
        return fail(hi, 400, "bad_request", "obsolete header line folding is not accepted");
    const char *colon = memchr(l, ':', n);
    if (!colon || colon == l)
        return fail(hi, 400, "bad_request", "malformed header line (expected 'Name: value')");
    size_t nl = (size_t)(colon - l);
    for (size_t i = 0; i < nl; i++)
        if (!is_tchar((unsigned char)l[i]))
            return fail(hi, 400, "bad_request", "malformed header name");
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    for (size_t i = 0; i < vl; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t')
            return fail(hi, 400, "bad_request", "a header value has a control byte");
    trim(&v, &vl);
    if (trailer)
        return 0;
    if (name_is(l, nl, "content-length"))
        return header_content_length(v, vl, hi);
    if (name_is(l, nl, "transfer-encoding")) {
        if (hi->chunked || vl != 7 || strncasecmp(v, "chunked", 7))
            return fail(hi, 501, "not_implemented",
                        "Transfer-Encoding other than a single 'chunked' is not supported");
        hi->chunked = true;
    } else if (name_is(l, nl, "host")) {
        if (hi->has_host)
            return fail(hi, 400, "bad_request", "more than one Host header");
        hi->has_host = true;
    } else if (name_is(l, nl, "expect")) {
        if (vl != 12 || strncasecmp(v, "100-continue", 12))
            return fail(hi, 417, "expectation_failed", "only 'Expect: 100-continue' is supported");
    }
    return 0;
}

int pl_head_parse(const char *h, size_t n, long max_upload, pl_head_info *hi)
{
    memset(hi, 0, sizeof *hi);
    size_t pos = 0;
    int line = 0;
    while (pos < n) {
        const char *lf = memchr(h + pos, '\n', n - pos);
        size_t end = lf ? (size_t)(lf - h) : n;
        size_t len = end - pos;
        if (len && h[end - 1] == '\r')
            len--;
        if (memchr(h + pos, '\0', len) || memchr(h + pos, '\r', len))
            return fail(hi, 400, "bad_request", "a NUL or bare CR in the request head");
        if (len == 0)
            break;                       /* the blank line ending the head */
        int rc = line == 0 ? parse_request_line(h + pos, len, hi)
                           : pl_head_header_line(h + pos, len, hi, false);
        if (rc < 0)
            return -1;
        line++;
        pos = end + 1;
    }
    if (hi->chunked && hi->has_length)
        return fail(hi, 400, "bad_request",
                    "Content-Length together with Transfer-Encoding is not accepted");
    if (!hi->http10 && !hi->has_host)
        return fail(hi, 400, "bad_request", "an HTTP/1.1 request needs a Host header (RFC 9112)");
    if (hi->chunked && hi->http10)
        return fail(hi, 400, "bad_request", "Transfer-Encoding needs HTTP/1.1");
    if (hi->is_head && (hi->chunked || hi->length > 0))
        return fail(hi, 400, "bad_request", "a HEAD request cannot have a body");
    if (hi->has_length && hi->length > max_upload) {
        char m[160];
        snprintf(m, sizeof m, "request body is %lld bytes; the limit is %ld", hi->length,
                 max_upload);
        return fail(hi, 413, "request_too_large", m);
    }
    return 0;
}

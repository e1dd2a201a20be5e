/* respond.c - JSON replies, OpenAI errors, request bodies, JSON escaping. */
#include "api/respond.h"

#include "api/access_log.h"
#include "api/anthropic.h"
#include "src/base/json_dump.h"
#include "src/base/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/keyvalq_struct.h>

const char *pl_http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* What goes out when the reply itself cannot be built. */
static const char oom_body[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                               "\"server_error\",\"param\":null,\"code\":null}}\n";

static int evbuffer_sink(void *out, const char *bytes, size_t n)
{
    return evbuffer_add(out, bytes, n);
}

void pl_reply_json(struct evhttp_request *req, int status, json_t *body)
{
    struct evbuffer *out = evbuffer_new();
    int rc = out && body ? pl_json_dump(body, evbuffer_sink, out) : -1;
    json_decref(body);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/json");
    if (rc < 0 || evbuffer_add(out, "\n", 1) < 0) {
        /* Out of memory: a 500 with a static body (reference, no copy). */
        status = 500;
        if (out)
            evbuffer_free(out);
        out = evbuffer_new();
        if (out)
            evbuffer_add_reference(out, oom_body, sizeof oom_body - 1, NULL, NULL);
    }
    if (out && evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* The length a GET would have, and no body: a body here would be
         * read as the start of the next pipelined response. */
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        char n[24];
        snprintf(n, sizeof n, "%zu", evbuffer_get_length(out));
        evhttp_remove_header(h, "Content-Length");
        evhttp_add_header(h, "Content-Length", n);
        evbuffer_drain(out, evbuffer_get_length(out));
    }
    pl_access_end(req, status);
    evhttp_send_reply(req, status, pl_http_reason(status), out);
    if (out)
        evbuffer_free(out);
}

void pl_reply_buffer(struct evhttp_request *req, int status, const char *content_type,
                     struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", content_type);
    pl_access_end(req, status);
    evhttp_send_reply(req, status, pl_http_reason(status), body);
}

/* Messages quote what the client sent (paths, header values): make them
 * valid UTF-8, which JSON strings must be, or the error itself fails. */
static void utf8_clean(char *dst, const char *src, size_t cap)
{
    size_t n = strlen(src), j = 0;
    for (size_t i = 0; i < n && j + 4 < cap;) {
        size_t k = pl_utf8_seq_len((const unsigned char *)src + i, n - i);
        unsigned char c = (unsigned char)src[i];
        if (k == 0 || (k == 1 && c < 0x20 && c != '\t')) {
            dst[j++] = '?';
            i++;
            continue;
        }
        memcpy(dst + j, src + i, k);
        j += k;
        i += k;
    }
    dst[j] = '\0';
}

json_t *pl_err_to_json(const pl_err *e)
{
    char msg[sizeof e->message], param[sizeof e->param];
    utf8_clean(msg, e->message, sizeof msg);
    utf8_clean(param, e->param, sizeof param);
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg,
                     "type", e->type, "param",
                     param[0] ? json_string(param) : json_null(), "code",
                     e->code[0] ? json_string(e->code) : json_null());
}

void pl_reply_error(struct evhttp_request *req, const pl_err *e)
{
    if (e->retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", e->retry_after_s);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", v);
    }
    /* Anthropic's clients read Anthropic's error shape, whoever replies
     * (the router's 401 and 429 too) */
    bool anthropic = pl_anthropic_path(evhttp_request_get_uri(req));
    pl_reply_json(req, e->status, anthropic ? pl_anthropic_error_json(e) : pl_err_to_json(e));
}

void pl_reply_errorf(struct evhttp_request *req, int status, const char *type,
                     const char *param, const char *code, const char *fmt, ...)
{
    pl_err e;
    char msg[sizeof e.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pl_err_set(&e, status, type, param, code, "%s", msg);
    pl_reply_error(req, &e);
}

json_t *pl_read_json_body(struct evhttp_request *req, long max_bytes)
{
    return pl_read_json_body_flags(req, max_bytes, 0);
}

json_t *pl_read_json_body_flags(struct evhttp_request *req, long max_bytes, size_t flags)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if ((long)len > max_bytes) {
        pl_reply_errorf(req, 413, "invalid_request_error", NULL, "request_too_large",
                        "request body is %zu bytes; the limit is %ld", len, max_bytes);
        return NULL;
    }
    if (len == 0) {
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, "invalid_json",
                        "request body is empty; expected a JSON object");
        return NULL;
    }
    const char *data = (const char *)evbuffer_pullup(in, -1);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES | flags, &jerr);
    if (!root) {
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, "invalid_json",
                        "malformed JSON at line %d column %d: %s", jerr.line,
                        jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, "invalid_json",
                        "request body must be a JSON object");
        return NULL;
    }
    return root;
}

void pl_json_escape(struct evbuffer *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0;   /* bytes copied verbatim, flushed lazily */
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run++;
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = pl_utf8_seq_len(p + i, len - i);
            if (k) {
                run += k;
                i += k;
                continue;
            }
        }
        if (run)
            evbuffer_add(b, p + i - run, run);
        run = 0;
        char esc[8];
        size_t el = 2;
        esc[0] = '\\';
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            if (c >= 0x80) {          /* invalid UTF-8 */
                evbuffer_add(b, PL_UTF8_REPLACEMENT, 3);
                i += pl_utf8_bad_len(p + i, len - i);
                continue;
            }
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            el = 6;
        }
        evbuffer_add(b, esc, el);
        i++;
    }
    if (run)
        evbuffer_add(b, p + len - run, run);
}

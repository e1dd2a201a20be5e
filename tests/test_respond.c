/* test_respond.c - JSON escaping for SSE chunks; a reply whose body could
 * not be built (out of memory) goes out as a 500 OpenAI error. */
#include <criterion/criterion.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <jansson.h>
#include <string.h>

#include "api/respond.h"
#include "src/base/utf8.h"

static char *escape(const char *s, size_t n)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, "\"", 1);
    pl_json_escape(b, s, n);
    evbuffer_add(b, "\"", 2);
    char *out = strdup((const char *)evbuffer_pullup(b, -1));
    evbuffer_free(b);
    return out;
}

Test(respond, escapes_round_trip_through_jansson)
{
    const char *cases[] = {"plain", "quote\" back\\slash", "nl\ncr\rtab\t", "\x01\x1f",
                           "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = escape(cases[i], strlen(cases[i]));
        json_error_t err;
        json_t *j = json_loads(e, JSON_DECODE_ANY, &err);
        cr_assert_not_null(j, "%s: %s", e, err.text);
        cr_expect_str_eq(json_string_value(j), cases[i]);
        json_decref(j);
        free(e);
    }
}

Test(respond, invalid_utf8_becomes_replacement)
{
    char *e = escape("a\xFF" "b\xC3", 4);
    cr_expect_str_eq(e, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\"");
    free(e);
    e = escape("\xED\xA0\x80", 3);          /* a UTF-16 surrogate */
    json_t *j = json_loads(e, JSON_DECODE_ANY, NULL);
    cr_expect_not_null(j, "%s", e);
    json_decref(j);
    free(e);
}

/* Ill-formed UTF-8 as Python's bytes.decode("utf-8", "replace") reads it
 * (one U+FFFD per maximal subpart: the longest start of a valid sequence,
 * or one byte), in the stream (pl_json_escape) and in whole replies
 * (pl_json_string_lossy, src/base/utf8.c pl_utf8_lossy underneath it):
 * expected texts made with
 *   python3 -c 'print(b"...".decode("utf-8", "replace").encode())'. */
Test(respond, ill_formed_utf8_is_replaced_as_python_decodes_it)
{
#define R "\xEF\xBF\xBD"
    static const struct { const char *in; size_t n; const char *want; } cases[] = {
        {"ok", 2, "ok"},
        {"\xD7\x96\xD7\xB4\xD7", 5, "\xD7\x96\xD7\xB4" R},  /* cut by max_tokens */
        {"a\xE2\x82", 3, "a" R},
        {"\xED\xA0\x80x", 4, R R R "x"},                     /* a surrogate */
        {"\xC0\x80", 2, R R},                                 /* overlong */
        {"\xF4\x90\x80\x80", 4, R R R R},                      /* past U+10FFFF */
        {"\xE0\x80\xAF", 3, R R R},
        {"\xF0\x9F\x98", 3, R},
        {"\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80"},
        {"\xFF\xFE", 2, R R},
        {"\x80\x80" "a", 3, R R "a"},
    };
#undef R
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        char *t = pl_utf8_lossy(cases[i].in, cases[i].n, &n);
        cr_assert_not_null(t, "case %zu", i);
        cr_expect_str_eq(t, cases[i].want, "lossy copy, case %zu", i);
        cr_expect_eq(n, strlen(cases[i].want), "case %zu", i);
        free(t);
        bool same = cases[i].n == strlen(cases[i].want) &&
                    !memcmp(cases[i].in, cases[i].want, cases[i].n);
        cr_expect_eq(pl_utf8_valid(cases[i].in, cases[i].n), same, "valid, case %zu", i);
        json_t *j = pl_json_string_lossy(cases[i].in, cases[i].n);
        cr_assert_not_null(j, "case %zu", i);
        cr_expect_str_eq(json_string_value(j), cases[i].want, "case %zu", i);
        json_decref(j);
        char *e = escape(cases[i].in, cases[i].n);
        j = json_loads(e, JSON_DECODE_ANY, NULL);
        cr_assert_not_null(j, "case %zu: %s", i, e);
        cr_expect_str_eq(json_string_value(j), cases[i].want, "stream, case %zu", i);
        json_decref(j);
        free(e);
    }
}

/* A server whose handler replies with a NULL body, as a request path does
 * when json_pack fails for lack of memory, and a client on the same loop. */
typedef struct reply_probe {
    struct event_base *base;
    int status;
    char body[512];
} reply_probe;

static void null_body_handler(struct evhttp_request *req, void *arg)
{
    pl_reply_json(req, 200, NULL);
}

static void on_response(struct evhttp_request *req, void *arg)
{
    reply_probe *p = arg;
    if (req) {
        p->status = evhttp_request_get_response_code(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        if (n >= sizeof p->body)
            n = sizeof p->body - 1;
        evbuffer_remove(in, p->body, n);
        p->body[n] = '\0';
    }
    event_base_loopexit(p->base, NULL);
}

Test(respond, unbuildable_body_is_a_500_error)
{
    reply_probe p = {.base = event_base_new()};
    struct evhttp *http = evhttp_new(p.base);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    cr_assert_not_null(sock);
    evhttp_set_gencb(http, null_body_handler, NULL);
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&sa, &len), 0);
    struct evhttp_connection *conn =
        evhttp_connection_base_new(p.base, NULL, "127.0.0.1", ntohs(sa.sin_port));
    struct evhttp_request *req = evhttp_request_new(on_response, &p);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
    cr_assert_eq(evhttp_make_request(conn, req, EVHTTP_REQ_GET, "/x"), 0);
    event_base_dispatch(p.base);
    cr_expect_eq(p.status, 500);
    json_t *j = json_loads(p.body, 0, NULL);
    cr_assert_not_null(j, "not JSON: %s", p.body);
    json_t *e = json_object_get(j, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "server_error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")), "out of memory");
    json_decref(j);
    evhttp_connection_free(conn);
    evhttp_free(http);
    event_base_free(p.base);
}

/* dashboard.c - GET /dashboard: the live page, embedded at build time from
 * api/dashboard.html. The page holds no data; it polls GET /status. */
#include "api/dashboard.h"

#include <stddef.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "api/respond.h"
#include "dashboard_html.h"

static void dashboard_get(pl_server *s, struct evhttp_request *req, const char *path,
                          void *ud)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    /* A reference: the page is static, nothing is copied. */
    evbuffer_add_reference(b, pl_dashboard_html, pl_dashboard_html_len, NULL, NULL);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'self'; script-src 'unsafe-inline'; "
                      "style-src 'unsafe-inline'; img-src 'self' data:");
    pl_reply_buffer(req, 200, "text/html; charset=utf-8", b);
    evbuffer_free(b);
}

void pl_dashboard_register(pl_server *s)
{
    pl_server_add_route(s, "/dashboard", PL_HTTP_GET, dashboard_get, NULL);
}

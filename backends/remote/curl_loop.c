/* curl_loop.c - curl multi socket events on libevent. */
#include "backends/remote/curl_loop.h"

#include <stdlib.h>

#include <event2/event.h>

struct pl_curl_loop {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    int active;
    struct curl_sock *socks;     /* every watched socket, freed at the end */
};

/* One watched socket: its event, re-created when the wanted events change. */
typedef struct curl_sock {
    pl_curl_loop *l;
    curl_socket_t fd;
    struct event *ev;
    struct curl_sock *prev, *next;
} curl_sock;

static void sock_free(pl_curl_loop *l, curl_sock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        l->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->ev)
        event_free(s->ev);
    free(s);
}

/* Hand every finished transfer to its owner. */
static void check_done(pl_curl_loop *l)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(l->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        pl_curl_xfer *x = NULL;
        CURLcode rc = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(l->multi, m->easy_handle);
        l->active--;
        if (x)
            x->in_multi = 0;
        if (x && x->done)
            x->done(x, rc);
    }
}

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    pl_curl_loop *l = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(l->multi, fd, flags, &running);
    check_done(l);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    pl_curl_loop *l = arg;
    int running;
    curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(l);
}

static int socket_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    pl_curl_loop *l = userp;
    curl_sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(l->multi, fd, NULL);
            sock_free(l, s);
        }
        return 0;
    }
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return -1;
        s->l = l;
        s->fd = fd;
        s->next = l->socks;
        if (l->socks)
            l->socks->prev = s;
        l->socks = s;
        curl_multi_assign(l->multi, fd, s);
    } else {
        event_free(s->ev);
    }
    short ev = EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) |
               (what & CURL_POLL_OUT ? EV_WRITE : 0);
    s->ev = event_new(l->base, fd, ev, on_socket_event, l);
    return s->ev && event_add(s->ev, NULL) == 0 ? 0 : -1;
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    pl_curl_loop *l = userp;
    if (timeout_ms < 0)
        return evtimer_del(l->timer);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    return evtimer_add(l->timer, &tv);
}

pl_curl_loop *pl_curl_loop_new(struct event_base *base)
{
    pl_curl_loop *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->base = base;
    l->multi = curl_multi_init();
    l->timer = evtimer_new(base, on_timer, l);
    if (!l->multi || !l->timer) {
        pl_curl_loop_free(l);
        return NULL;
    }
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
    curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, 1024L);
    return l;
}

void pl_curl_loop_free(pl_curl_loop *l)
{
    if (!l)
        return;
    if (l->multi)
        curl_multi_cleanup(l->multi);
    while (l->socks)
        sock_free(l, l->socks);
    if (l->timer)
        event_free(l->timer);
    free(l);
}

int pl_curl_loop_add(pl_curl_loop *l, pl_curl_xfer *x)
{
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, (char *)x);
    if (curl_multi_add_handle(l->multi, x->easy) != CURLM_OK)
        return -1;
    x->in_multi = 1;
    l->active++;
    return 0;
}

void pl_curl_loop_remove(pl_curl_loop *l, pl_curl_xfer *x)
{
    if (!x->in_multi)
        return;
    curl_multi_remove_handle(l->multi, x->easy);
    x->in_multi = 0;
    l->active--;
}

int pl_curl_loop_active(const pl_curl_loop *l)
{
    return l->active;
}

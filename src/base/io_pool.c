/* io_pool.c - worker threads for blocking I/O; completions return to the
 * main loop through an eventfd watched by a libevent event. */
#include "src/base/io_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

typedef struct io_item {
    pl_io_work_fn work;
    pl_io_done_fn done;
    void *ud;
    struct io_item *next;
} io_item;

typedef struct io_queue {
    io_item *head, *tail;
} io_queue;

struct pl_io_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* work queued, or stopping */
    pthread_cond_t done_cv;      /* an item finished (for drain) */
    io_queue todo, done;         /* both under mu */
    bool stopping;
    int outstanding;             /* main thread only */
    int n_threads;
    pthread_t *threads;
    int efd;
    struct event *ev;
};

static void q_push(io_queue *q, io_item *it)
{
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
}

static io_item *q_take_all(io_queue *q)
{
    io_item *h = q->head;
    q->head = q->tail = NULL;
    return h;
}

static void *io_worker(void *arg)
{
    pl_io_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo.head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        if (!p->todo.head)
            break;
        io_item *it = p->todo.head;
        p->todo.head = it->next;
        if (!p->todo.head)
            p->todo.tail = NULL;
        pthread_mutex_unlock(&p->mu);
        it->work(it->ud);
        pthread_mutex_lock(&p->mu);
        q_push(&p->done, it);
        pthread_cond_broadcast(&p->done_cv);
        uint64_t one = 1;
        ssize_t w = write(p->efd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Run the done() callbacks of finished items (main thread). */
static void run_done(pl_io_pool *p)
{
    pthread_mutex_lock(&p->mu);
    io_item *it = q_take_all(&p->done);
    pthread_mutex_unlock(&p->mu);
    while (it) {
        io_item *next = it->next;
        p->outstanding--;
        if (it->done)
            it->done(it->ud);
        free(it);
        it = next;
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
    run_done(arg);
}

pl_io_pool *pl_io_pool_new(struct event_base *base, int n_threads)
{
    pl_io_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->threads = calloc((size_t)(n_threads < 1 ? 1 : n_threads), sizeof *p->threads);
    if (p->efd < 0 || !p->threads)
        goto fail;
    p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_wake, p);
    if (!p->ev || event_add(p->ev, NULL) < 0)
        goto fail;
    for (int i = 0; i < (n_threads < 1 ? 1 : n_threads); i++) {
        if (pthread_create(&p->threads[i], NULL, io_worker, p) != 0)
            goto fail;
        p->n_threads++;
    }
    return p;
fail:
    pl_io_pool_free(p);
    return NULL;
}

int pl_io_pool_post(pl_io_pool *p, pl_io_work_fn work, pl_io_done_fn done,
                    void *ud)
{
    io_item *it = malloc(sizeof *it);
    if (!it)
        return -1;
    *it = (io_item){work, done, ud, NULL};
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(it);
        return -1;
    }
    q_push(&p->todo, it);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    p->outstanding++;
    return 0;
}

int pl_io_pool_outstanding(const pl_io_pool *p)
{
    return p->outstanding;
}

void pl_io_pool_drain(pl_io_pool *p)
{
    while (p->outstanding > 0) {
        pthread_mutex_lock(&p->mu);
        while (!p->done.head)
            pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
        run_done(p);
    }
}

void pl_io_pool_free(pl_io_pool *p)
{
    if (!p)
        return;
    if (p->n_threads > 0)
        pl_io_pool_drain(p);
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    if (p->ev)
        event_free(p->ev);
    if (p->efd >= 0)
        close(p->efd);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

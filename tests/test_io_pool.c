/* test_io_pool.c - work runs on worker threads, completions come back on
 * the main loop, drain and free wait for everything. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <event2/event.h>

#include "src/base/io_pool.h"

typedef struct item {
    pthread_t main, worker;
    atomic_int *worked;
    int *done;
    struct event_base *base;
    int total;
} item;

static void work(void *ud)
{
    item *it = ud;
    it->worker = pthread_self();
    usleep(200);
    atomic_fetch_add(it->worked, 1);
}

static void done(void *ud)
{
    item *it = ud;
    cr_assert(pthread_equal(pthread_self(), it->main), "done() runs on the main thread");
    cr_assert_not(pthread_equal(it->worker, it->main), "work() ran on a worker");
    if (++*it->done == it->total)
        event_base_loopbreak(it->base);
}

Test(io_pool, completions_return_to_the_main_loop)
{
    struct event_base *base = event_base_new();
    pl_io_pool *p = pl_io_pool_new(base, 3);
    cr_assert_not_null(p);
    enum { N = 200 };
    static item items[N];
    atomic_int worked = 0;
    int n_done = 0;
    for (int i = 0; i < N; i++) {
        items[i] = (item){pthread_self(), pthread_self(), &worked, &n_done, base, N};
        cr_assert_eq(pl_io_pool_post(p, work, done, &items[i]), 0);
    }
    cr_assert_eq(pl_io_pool_outstanding(p), N);
    event_base_dispatch(base);
    cr_assert_eq(n_done, N);
    cr_assert_eq(atomic_load(&worked), N);
    cr_assert_eq(pl_io_pool_outstanding(p), 0);
    pl_io_pool_free(p);
    event_base_free(base);
}

Test(io_pool, drain_runs_completions_without_the_loop)
{
    struct event_base *base = event_base_new();
    pl_io_pool *p = pl_io_pool_new(base, 2);
    static item items[50];
    atomic_int worked = 0;
    int n_done = 0;
    for (int i = 0; i < 50; i++) {
        items[i] = (item){pthread_self(), pthread_self(), &worked, &n_done, base, 1000};
        pl_io_pool_post(p, work, done, &items[i]);
    }
    pl_io_pool_drain(p);
    cr_assert_eq(n_done, 50);
    pl_io_pool_free(p);
    event_base_free(base);
}

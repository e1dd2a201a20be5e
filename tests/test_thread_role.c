/* test_thread_role.c - thread roles (src/base/thread_role.h), and the
 * engine's use of them: a function of the main thread called from another
 * thread, or one of the engine thread called from the main thread while
 * the engine runs, stops the process (SIGABRT from assert) instead of
 * racing. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "backends/engine/engine_chan.h"
#include "src/base/thread_role.h"
#include "tests/engine_harness.h"

static void *holds_thread_(void *arg)
{
    static bool yes = true, no = false;
    return pl_thread_role_holds(arg) ? &yes : &no;
}

/* Whether the role holds on a fresh thread. */
static bool holds_elsewhere_(pl_thread_role *r)
{
    pthread_t t;
    void *ret = NULL;
    cr_assert_eq(pthread_create(&t, NULL, holds_thread_, r), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    return *(bool *)ret;
}

Test(thread_role, unset_holds_everywhere)
{
    pl_thread_role r = {0};
    cr_assert(pl_thread_role_holds(&r));
    cr_assert(holds_elsewhere_(&r));
}

Test(thread_role, set_holds_on_its_thread_only)
{
    pl_thread_role r = {0};
    pl_thread_role_set(&r);
    cr_assert(pl_thread_role_holds(&r));
    cr_assert_not(holds_elsewhere_(&r));
    pl_thread_role_clear(&r);
    cr_assert(holds_elsewhere_(&r), "cleared: nobody holds it");
}

static void *set_role_thread_(void *arg)
{
    pl_thread_role_set(arg);
    return NULL;
}

Test(thread_role, taken_by_another_thread)
{
    pl_thread_role r = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, set_role_thread_, &r), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_not(pl_thread_role_holds(&r));
}

/* ---- the engine's roles ---- */

static void submit_one_(pl_backend *b, const int32_t *ids, int n, collect *c)
{
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = 4;
    req.prompt_tokens = ids;
    req.n_prompt_tokens = n;
    uint64_t id;
    pl_err err;
    if (pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, c}, &id, &err) < 0)
        abort();
}

typedef struct submit_arg {
    pl_backend *b;
    int32_t *ids;
    collect *c;
} submit_arg;

static void *submit_thread_(void *arg)
{
    submit_arg *a = arg;
    submit_one_(a->b, a->ids, 8, a->c);
    return NULL;
}

/* The engine works when driven from the thread that made it. */
Test(thread_role, engine_on_its_threads)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[8];
    make_prompt(p, 8, 1);
    collect c[2];
    memset(c, 0, sizeof c);
    submit_one_(b, p, 8, &c[0]);
    submit_one_(b, p, 8, &c[1]);
    run_until_done(base, c, 2);
    cr_assert_eq(c[0].res.finish, c[1].res.finish);
    cr_assert_eq(c[0].n, c[1].n);
    pl_backend_free(b);
    event_base_free(base);
}

/* A submit from a thread that is not the engine's main thread. */
Test(thread_role, engine_submit_off_main_stops, .signal = SIGABRT)
{
#ifdef NDEBUG
    cr_skip_test("built with NDEBUG: the checks are compiled out");
#endif
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[8];
    make_prompt(p, 8, 1);
    collect c = {0};
    submit_arg a = {b, p, &c};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, submit_thread_, &a), 0);
    pthread_join(t, NULL);
    cr_assert_fail("the submit from another thread returned");
}

/* The engine thread's outbox posted from the main thread while the engine
 * thread runs. */
Test(thread_role, engine_post_off_engine_thread_stops, .signal = SIGABRT)
{
#ifdef NDEBUG
    cr_skip_test("built with NDEBUG: the checks are compiled out");
#endif
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[8];
    make_prompt(p, 8, 1);
    collect c = {0};
    submit_one_(b, p, 8, &c);
    run_until_done(base, &c, 1);    /* the engine thread has started */
    pl_engine_post_((pl_engine *)b);
    cr_assert_fail("pl_engine_post_ ran on the main thread");
}

/* thread_role.h - which thread owns a piece of state, checked rather than
 * only written (STYLE.md 11; SQLite's assert()ed invariants).
 *
 * A role (the engine thread, the main thread) is a thread id set once by
 * the thread that takes it. A function that may run only in that role
 * starts with PL_ASSERT_ON_THREAD(&role): a call from any other thread
 * stops a debug build at once instead of racing quietly. A role not set
 * (before its thread starts, after it ends) holds on every thread: then
 * nothing else runs concurrently with its owner, and the state is whoever
 * holds the object. Cheap (pthread_self, one acquire load, pthread_equal):
 * parley builds with b_ndebug=false, so the checks run in release builds
 * too, on per-token paths included.
 */
#ifndef PL_THREAD_ROLE_H
#define PL_THREAD_ROLE_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/** A thread role; zero-initialised it is not set. */
typedef struct pl_thread_role {
    pthread_t id;                /* valid while set is true */
    atomic_bool set;
} pl_thread_role;

/** The calling thread takes the role. */
void pl_thread_role_set(pl_thread_role *r);
/** Nobody holds the role (its thread is ending). */
void pl_thread_role_clear(pl_thread_role *r);
/** Whether the calling thread may act in the role: it holds it, or the
 *  role is not set. Any thread. */
bool pl_thread_role_holds(pl_thread_role *r);

#ifdef NDEBUG
#define PL_ASSERT_ON_THREAD(role) ((void)0)
#else
/** Stops the process when the calling thread may not act in *role. */
#define PL_ASSERT_ON_THREAD(role) assert(pl_thread_role_holds(role))
#endif

#endif

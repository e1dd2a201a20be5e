/* thread_role.c - thread roles (thread_role.h). The id is written before
 * the flag is released, so a thread that sees the flag set reads a whole
 * id, even while the role is being taken on another thread. */
#include "src/base/thread_role.h"

void pl_thread_role_set(pl_thread_role *r)
{
    r->id = pthread_self();
    atomic_store_explicit(&r->set, true, memory_order_release);
}

void pl_thread_role_clear(pl_thread_role *r)
{
    atomic_store_explicit(&r->set, false, memory_order_release);
}

bool pl_thread_role_holds(pl_thread_role *r)
{
    return !atomic_load_explicit(&r->set, memory_order_acquire) ||
           pthread_equal(r->id, pthread_self());
}

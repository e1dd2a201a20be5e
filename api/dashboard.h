/* dashboard.h - GET /dashboard: one self-contained page (HTML, CSS, JS
 * written in api/dashboard.html, embedded in the binary at build time) that
 * polls GET /status: per-model throughput, KV usage, prefix hit rate, step
 * time and idle gap, upstream health; each job's progress, per-question
 * status counts, the three conversation pools with their first entries,
 * and failed jobs' errors. With --api-key the page asks for the key once
 * and keeps it in sessionStorage. */
#ifndef PL_API_DASHBOARD_H
#define PL_API_DASHBOARD_H

#include "api/server.h"

/** Register GET /dashboard. */
void pl_dashboard_register(pl_server *s);

#endif

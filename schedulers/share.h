/* share.h - one served model's slots shared by every job that uses it.
 *
 * A pure data structure (no threads, no I/O). The conversation scheduler of
 * each job keeps its own pools and its seed-000 order; this decides WHICH
 * JOB gets the model's next free slot:
 *
 *   - in-flight is counted against the backend's real capacity, jobs and
 *     interactive (OpenAI) requests together, so parley never submits more
 *     than the backend can run and the engine never queues behind its back;
 *   - jobs leave `reserve` slots to interactive requests, and an interactive
 *     request above the reserve still makes jobs back off as their requests
 *     finish (interactive requests take precedence);
 *   - among the jobs with a ready request and room under their own cap, the
 *     one with the least attained service per unit of weight goes first
 *     (weighted least-attained-service, in the spirit of Autellix's PLAS), so
 *     active jobs progress in proportion to their weights.
 *
 * Service is counted in tokens (completion + uncached prompt). A dispatch is
 * charged at once with the mean cost of a request on this model, and the
 * difference is settled at completion, so a burst of dispatches is already
 * fair before any of them finishes. A job that joins, or becomes ready
 * again after idling, starts from the least normalised service among the
 * active jobs: idle time is not banked as credit.
 */
#ifndef PL_SCHED_SHARE_H
#define PL_SCHED_SHARE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pl_share pl_share;

/** The default reserve for a capacity: 10% rounded up, 0 when capacity is
 *  1 (a lone slot is never withheld from jobs). */
int pl_share_default_reserve(int capacity);

/** capacity >= 1; reserve < 0: pl_share_default_reserve. The reserve is
 *  clamped so jobs keep at least one slot. NULL on OOM. */
pl_share *pl_share_new(int capacity, int reserve);
void pl_share_free(pl_share *s);
/** The backend's capacity moved (a remote upstream was probed). */
void pl_share_set_capacity(pl_share *s, int capacity, int reserve);

/** Add a client (a job on this model). weight > 0 (0 or less: 1); cap: its
 *  own in-flight bound (<= 0: none). Returns its id (>= 0), -1 on OOM. */
int pl_share_join(pl_share *s, double weight, int cap);
/** Remove a client; its in-flight requests stop counting. */
void pl_share_leave(pl_share *s, int id);

/** Is the client ready (it has a request to dispatch)? Called by pick. */
typedef bool (*pl_share_ready_fn)(void *ud, int id);

/** The client to take the next slot: room on the model (jobs under
 *  capacity - reserve, everyone under capacity), room under its own cap,
 *  ready, least attained service / weight (ties: lower id). -1 when none. */
int pl_share_pick(pl_share *s, pl_share_ready_fn ready, void *ud);

/** A request of client id was submitted: returns the service charged now
 *  (the mean cost so far), to be passed back at completion. */
double pl_share_dispatched(pl_share *s, int id);
/** It finished (cost: its tokens; 0 for an abort): the charge is settled.
 *  Every dispatched request is completed exactly once. */
void pl_share_completed(pl_share *s, int id, double cost, double charged);

/** Interactive requests on the model: +1 at submit, -1 when done. */
void pl_share_interactive(pl_share *s, int delta);

typedef struct pl_share_counts {
    int capacity, reserve;
    int jobs_inflight, interactive_inflight;
    int clients;
} pl_share_counts;

void pl_share_counts_get(const pl_share *s, pl_share_counts *c);

typedef struct pl_share_client {
    double weight;
    int cap, inflight;
    double attained;             /**< tokens, with the dispatch estimates */
    uint64_t dispatched, completed;
} pl_share_client;

/** A client's figures; false if id is not a client. */
bool pl_share_client_get(const pl_share *s, int id, pl_share_client *out);

#endif

/* run_view.h - what `parley run` draws on stderr: a one-line progress bar,
 * or (--live) a full-screen view of the scheduler's pools like seed 000's
 * live status; when stderr is not a terminal, a plain status line every
 * --progress-interval seconds. The terminal is restored on every exit path. */
#ifndef PL_RUN_VIEW_H
#define PL_RUN_VIEW_H

#include <stdbool.h>
#include <stdio.h>

#include "src/jobs/jobs.h"

/** One view's state (embed it in the command's context; no globals). */
typedef struct pl_run_view {
    FILE *f;                     /**< where it draws (borrowed) */
    bool live;                   /**< full-screen pool view (f is a terminal) */
    bool tty;                    /**< f is a terminal */
    bool active;                 /**< between begin and end */
    double interval;             /**< not a terminal: seconds between lines */
    double last, t0;             /**< last plain line; begin (monotonic s) */
} pl_run_view;

/** Enter the view on f (live: alternate screen, hidden cursor). When f is
 *  not a terminal, draw prints one status line at most every interval
 *  seconds (<= 0: never). Installs an atexit hook that restores the
 *  terminal; v must stay valid until pl_run_view_end. */
void pl_run_view_begin(pl_run_view *v, FILE *f, bool live, double interval);
/** Redraw from the job's current state. */
void pl_run_view_draw(pl_run_view *v, pl_job *j);
/** Leave the view: restore the screen and cursor, end the bar's line.
 *  Safe to call again. */
void pl_run_view_end(pl_run_view *v);

#endif

/* run_view.h - what `parley run` draws on stderr: a one-line progress bar,
 * or (--live) a full-screen view of the scheduler's pools like seed 000's
 * live status; when stderr is not a terminal, a plain status line every
 * --progress-interval seconds. The terminal is restored on every exit path. */
#ifndef PL_RUN_VIEW_H
#define PL_RUN_VIEW_H

#include <stdbool.h>
#include <stdio.h>

#include "src/jobs/jobs.h"

/** Enter the view (live: alternate screen, hidden cursor). Installs an
 *  atexit hook that restores the terminal. */
void pl_run_view_begin(FILE *f, bool live);
/** When f is not a terminal, draw prints one status line at most every
 *  seconds (default 5; <= 0: never). */
void pl_run_view_set_interval(double seconds);
/** Redraw from the job's current state. */
void pl_run_view_draw(FILE *f, pl_job *j, bool live);
/** Leave the view: restore the screen and cursor, end the bar's line. */
void pl_run_view_end(FILE *f);

#endif

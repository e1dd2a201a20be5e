/* job_constraints.h - a job's answer constraint against the models it
 * runs on: a constrained job on a model whose upstream cannot enforce the
 * constraint is refused before it starts, never run unconstrained. */
#ifndef PL_JOB_CONSTRAINTS_H
#define PL_JOB_CONSTRAINTS_H

#include "backends/backend.h"
#include "src/jobs/job_spec.h"

/**
 * Check every model that serves a validated agent (bs[m] serves
 * s->models[m]): with validation.mode: constrained, one problem per model
 * that cannot enforce the answer regex (path "validation.mode", the
 * backend's reason: the upstream and the constraint); with reprompt, one
 * warning line per such model (the job runs unconstrained, as asked).
 * Returns 0, or -1 with the problems appended to *p.
 */
int pl_job_check_constraints(const pl_job_spec *s, pl_backend *const *bs, pl_spec_problems *p);

#endif

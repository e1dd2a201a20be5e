/* job_constraints.c - a job's answer constraint against its models. */
#include "src/jobs/job_constraints.h"

#include "src/base/log.h"

/* Whether some question has choices: only those are constrained. */
static bool has_choices(const pl_job_spec *s)
{
    for (int q = 0; q < s->n_questions; q++)
        if (s->questions[q].n_choices > 0)
            return true;
    return false;
}

/* Whether a validated agent speaks through model m. */
static bool validated_on(const pl_job_spec *s, int m)
{
    for (int a = 0; a < s->n_agents; a++)
        if (s->agents[a].model == m && s->agents[a].validate)
            return true;
    return false;
}

int pl_job_check_constraints(const pl_job_spec *s, pl_backend *const *bs, pl_spec_problems *p)
{
    int bad = 0;
    if (!s->validation || !has_choices(s))
        return 0;
    for (int m = 0; m < s->n_models; m++) {
        pl_err e = {0};
        if (!bs[m] || !validated_on(s, m) ||
            pl_backend_check_constraint(bs[m], PL_CONSTRAINT_REGEX, &e) == 0)
            continue;
        if (!s->constrained) {
            pl_warn("job '%s': %s; validation.mode: reprompt runs it unconstrained (replies "
                    "without a valid answer are re-prompted)", s->experiment, e.message);
            continue;
        }
        pl_spec_problems_add(p, "validation.mode", "constrained: %s; use validation.mode: "
                             "reprompt to run this model unconstrained", e.message);
        bad = 1;
    }
    return bad ? -1 : 0;
}

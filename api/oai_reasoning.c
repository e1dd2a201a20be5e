/* oai_reasoning.c - constraints moved after the reasoning (oai_reasoning.h). */
#include "api/oai_reasoning.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/constrain/constraint.h"

int pl_oai_reasoning_prepare(pl_oai_params *p, pl_backend *b, pl_err *err)
{
    const pl_reasoning_format *f = pl_backend_reasoning_format(b);
    p->reasoning_fmt = f;
    pl_sampling *sp = &p->sampling;
    if (!p->chat || !f || sp->constraint == PL_CONSTRAINT_NONE ||
        p->constraint_after_reasoning ||
        (f->thinking_off_closes && (p->thinking == PL_THINKING_OFF ||
                                    (p->thinking == PL_THINKING_DEFAULT &&
                                     f->thinking_default_off))))
        return 0;
    char *re = pl_constraint_regex(sp->constraint, sp->constraint_text, b->json_ws, err);
    if (!re)
        return -1;
    char *wrapped = f->wrap_content(re);
    free(re);
    if (!wrapped)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    free(sp->constraint_text);
    sp->constraint = PL_CONSTRAINT_REGEX;
    sp->constraint_text = wrapped;
    p->constraint_after_reasoning = true;
    return 0;
}

void pl_oai_call_id(char *id, size_t cap)
{
    snprintf(id, cap, "call_%08x%08x%08x", (unsigned)rand(), (unsigned)rand(),
             (unsigned)rand());
}

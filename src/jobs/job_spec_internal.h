/* job_spec_internal.h - shared by the job_spec*.c files only. */
#ifndef PL_JOB_SPEC_INTERNAL_H
#define PL_JOB_SPEC_INTERNAL_H

#include "src/jobs/job_spec.h"

typedef struct spec_ctx {
    pl_job_spec *spec;
    pl_spec_problems *probs;
    const pl_job_spec_source *src;
} spec_ctx;

void spec_problem(spec_ctx *c, const char *base, const char *key,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
json_t *spec_get2(spec_ctx *c, json_t *obj, const char *path, const char *key,
                  const char *alias, const char **used);
/** strdup of a string value; reports a missing (when required) or
 *  non-string value and returns NULL. */
char *spec_string(spec_ctx *c, const char *base, const char *key, json_t *v,
                  bool required);
/** true and *out when v is an integer in lo..hi; reports otherwise. */
bool spec_int(spec_ctx *c, const char *base, const char *key, json_t *v,
              long lo, long hi, int *out);
void spec_unknown_keys(spec_ctx *c, const char *base, json_t *obj,
                       const char *const *known);

void spec_parse_agents(spec_ctx *c, json_t *root);
void spec_parse_validation(spec_ctx *c, json_t *root);
void spec_parse_questions(spec_ctx *c, json_t *root);
void spec_free_regex(pl_job_spec *s);

#endif

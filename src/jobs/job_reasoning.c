/* job_reasoning.c - a job reply's reasoning set apart from its text (see
 * jobs_internal.h, pl_job_reply_split), by its model's reasoning format. */
#include "backends/text/reasoning_format.h"
#include "src/jobs/jobs_internal.h"

int pl_job_reply_split(const pl_reasoning_format *format, char **text, size_t *len,
                       char **reasoning)
{
    *reasoning = NULL;
    if (!format || !format->split_whole || !*text)
        return 0;
    return format->split_whole(text, len, reasoning);
}

/* json_pack.c - json_pack whose failures are logged, and whose format
 * errors stop the process (json_pack.h). */
#include "src/base/json_pack.h"

#include <stdarg.h>
#include <stdlib.h>

#include "src/base/log.h"

json_t *pl_json_pack_at(const char *file, int line, const char *fmt, ...)
{
    json_error_t e;
    va_list ap;
    va_start(ap, fmt);
    json_t *v = json_vpack_ex(&e, 0, fmt, ap);
    va_end(ap);
    if (v)
        return v;
    pl_error("%s:%d: json_pack(\"%s\") failed: %s", file, line, fmt, e.text);
    if (json_error_code(&e) == json_error_invalid_format)
        abort();                 /* a wrong constant format: a bug, every time */
    return NULL;
}

/* log.c - leveled logging to stderr. */
#include "src/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pl_log_level log_level = PL_LOG_INFO;
static int log_level_from_env = 0;

static void log_init_from_env(void)
{
    static const char *names[] = {"debug", "info", "warn", "error", "quiet"};
    const char *s = getenv("PARLEY_LOG");
    log_level_from_env = 1;
    if (!s)
        return;
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0)
            log_level = (pl_log_level)i;
}

void pl_log_set_level(pl_log_level lvl)
{
    log_level = lvl;
    log_level_from_env = 1;
}

pl_log_level pl_log_get_level(void)
{
    if (!log_level_from_env)
        log_init_from_env();
    return log_level;
}

void pl_log(pl_log_level lvl, const char *fmt, ...)
{
    static const char *tags[] = {"debug", "info", "warn", "error"};
    if (lvl < pl_log_get_level() || lvl >= PL_LOG_QUIET)
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, tags[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}

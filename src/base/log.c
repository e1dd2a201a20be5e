/* log.c - leveled logging to stderr. */
#include "src/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pl_log_level log_level = PL_LOG_INFO;
static int log_level_from_env = 0;
static bool log_json = false;

void pl_log_set_json(bool json)
{
    log_json = json;
}

bool pl_log_is_json(void)
{
    return log_json;
}

void pl_log_timestamp(char *out, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    if (log_json)
        snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000);
    else
        snprintf(out, n, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000);
}

void pl_log_write(const char *line)
{
    /* One call, so lines from several threads never interleave. */
    fprintf(stderr, "%s\n", line);
}

void pl_log_json_escape(char *out, size_t n, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (; s && *s && o + 7 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (c < 0x20) {
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = hex[c >> 4];
            out[o + 5] = hex[c & 15];
            o += 6;
        } else {
            out[o++] = (char)c;
        }
    }
    out[o < n ? o : n - 1] = '\0';
}

void pl_log_text_escape(char *out, size_t n, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (; s && *s && o + 5 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != 0x7f) {
            out[o++] = (char)c;
            continue;
        }
        out[o++] = '\\';
        if (c == '\n' || c == '\r' || c == '\t') {
            out[o++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else {
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (n)
        out[o < n ? o : n - 1] = '\0';
}

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
    char ts[40], msg[2048];
    pl_log_timestamp(ts, sizeof ts);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_json) {
        char esc[4096], line[4200];
        pl_log_json_escape(esc, sizeof esc, msg);
        snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}", ts,
                 tags[lvl], esc);
        pl_log_write(line);
    } else {
        char esc[4096];
        pl_log_text_escape(esc, sizeof esc, msg);
        fprintf(stderr, "%s %-5s %s\n", ts, tags[lvl], esc);
    }
}

/* log.h - leveled logging to stderr. Thread-safe (one fprintf per line). */
#ifndef PL_LOG_H
#define PL_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pl_log_level {
    PL_LOG_DEBUG = 0,
    PL_LOG_INFO,
    PL_LOG_WARN,
    PL_LOG_ERROR,
    PL_LOG_QUIET,
} pl_log_level;

/** Messages below this level are dropped (default PL_LOG_INFO; the
 *  PARLEY_LOG environment variable, "debug".."quiet", overrides). */
void pl_log_set_level(pl_log_level lvl);
pl_log_level pl_log_get_level(void);
void pl_log(pl_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Log lines as text (default) or one JSON object per line:
 *  {"time","level","msg"} (--log-format json). */
void pl_log_set_json(bool json);
bool pl_log_is_json(void);
/** "2026-11-22T22:40:01.123Z" (JSON) or "22:40:01.123" (text) into out. */
void pl_log_timestamp(char *out, size_t n);
/** Write one finished line (no newline) to stderr at once. */
void pl_log_write(const char *line);
/** Escape s as the inside of a JSON string into out (truncates). */
void pl_log_json_escape(char *out, size_t n, const char *s);
/** Copy s into out with control bytes written as \n, \r, \t or \xNN, so
 *  that text from outside (an upstream's model id, say) cannot split or
 *  forge a log line (truncates). pl_log applies it to every message. */
void pl_log_text_escape(char *out, size_t n, const char *s);

#define pl_debug(...) pl_log(PL_LOG_DEBUG, __VA_ARGS__)
#define pl_info(...) pl_log(PL_LOG_INFO, __VA_ARGS__)
#define pl_warn(...) pl_log(PL_LOG_WARN, __VA_ARGS__)
#define pl_error(...) pl_log(PL_LOG_ERROR, __VA_ARGS__)

#endif

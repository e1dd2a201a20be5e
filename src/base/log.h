/* log.h - leveled logging to stderr. Thread-safe (one fprintf per line). */
#ifndef PL_LOG_H
#define PL_LOG_H

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

#define pl_debug(...) pl_log(PL_LOG_DEBUG, __VA_ARGS__)
#define pl_info(...) pl_log(PL_LOG_INFO, __VA_ARGS__)
#define pl_warn(...) pl_log(PL_LOG_WARN, __VA_ARGS__)
#define pl_error(...) pl_log(PL_LOG_ERROR, __VA_ARGS__)

#endif

/* run_view.c - progress bar and live pool view for `parley run`. */
#include "src/run_view.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* The terminal is the process's: the view that owns it now, for the
 * atexit hook (which takes no argument). The only state outside a view. */
static pl_run_view *owner;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void view_restore(void)
{
    if (owner)
        pl_run_view_end(owner);
}

void pl_run_view_begin(pl_run_view *v, FILE *f, bool live, double interval)
{
    static bool hooked;
    memset(v, 0, sizeof *v);
    v->f = f;
    v->tty = isatty(fileno(f));
    v->live = live && v->tty;
    v->interval = interval;
    v->active = true;
    v->t0 = v->last = now_s();
    owner = v;
    if (!hooked) {
        atexit(view_restore);
        hooked = true;
    }
    if (v->live)
        fputs("\033[?1049h\033[?25l", f);
    fflush(f);
}

void pl_run_view_end(pl_run_view *v)
{
    if (!v->active)
        return;
    v->active = false;
    if (owner == v)
        owner = NULL;
    if (v->live)
        fputs("\033[?25h\033[?1049l", v->f);
    else if (v->tty)
        fputc('\n', v->f);
    fflush(v->f);
}

static void draw_bar(const pl_run_view *v, FILE *f, pl_job *j)
{
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    json_t *pools = pl_job_pools_json(j, 0);
    int done = p.succeeded + p.failed, width = 30;
    int fill = p.total ? done * width / p.total : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[width] = '\0';
    fprintf(f, "%s[%s] %d/%d  ok %d  failed %d  | in-flight %lld  pre-dep %lld  pending %lld",
            v->tty ? "\r" : "", bar, done, p.total, p.succeeded, p.failed,
            json_integer_value(json_object_get(pools, "in_flight")),
            json_integer_value(json_object_get(pools, "pre_departure")),
            json_integer_value(json_object_get(pools, "pending")));
    fputs(v->tty ? "\033[K" : "\n", f);
    json_decref(pools);
}

/* Not a terminal (CI logs, nohup, a notebook): one plain line, with the
 * counts of the live view. */
static void draw_line(const pl_run_view *v, FILE *f, pl_job *j)
{
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    json_t *pools = pl_job_pools_json(j, 0);
    int in = 0, cap = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(pools, "models"), i, m) {
        in += (int)json_integer_value(json_object_get(m, "in_flight"));
        cap += (int)json_integer_value(json_object_get(m, "capacity"));
    }
    fprintf(f, "progress: %d/%d conversations | ok %d failed %d | in-flight %d/%d | "
            "pre-dep %lld | pending %lld | transcripts on disk %d, in manifest %d | %.1f s\n",
            p.succeeded + p.failed, p.total, p.succeeded, p.failed, in, cap,
            json_integer_value(json_object_get(pools, "pre_departure")),
            json_integer_value(json_object_get(pools, "pending")), p.saved + p.skipped,
            p.persisted, now_s() - v->t0);
    json_decref(pools);
}

static void row(FILE *f, json_t *e, int i, bool with_model, char *out, size_t n)
{
    if (!e) {
        out[0] = '\0';
        return;
    }
    snprintf(out, n, "%2d. [%s] r%lld %s%s%s%s%s", i + 1,
             json_string_value(json_object_get(e, "question_id")),
             json_integer_value(json_object_get(e, "round")),
             json_string_value(json_object_get(e, "agent_id")),
             with_model ? " (" : "",
             with_model ? json_string_value(json_object_get(e, "model")) : "",
             with_model ? ")" : "",
             json_is_true(json_object_get(e, "reprompt")) ? " retry" : "");
}

static void draw_live(FILE *f, pl_job *j)
{
    struct winsize ws = {0};
    int cols = ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
    int rows = ws.ws_row ? ws.ws_row : 24, k = rows - 9;
    if (k < 3)
        k = 3;
    if (cols > 200)
        cols = 200;
    char rule[256], thin[256];
    memset(rule, '=', (size_t)cols);
    memset(thin, '-', (size_t)cols);
    rule[cols] = thin[cols] = '\0';
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    json_t *pools = pl_job_pools_json(j, k);
    int in = 0, cap = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(pools, "models"), i, m) {
        in += (int)json_integer_value(json_object_get(m, "in_flight"));
        cap += (int)json_integer_value(json_object_get(m, "capacity"));
    }
    fprintf(f, "\033[H\033[2J%s\n", rule);
    /* Progress counts conversations done (seed 000's view): transcripts
     * reach disk, then the manifest, a little later. Both are named. */
    fprintf(f, "Progress: %d/%d conversations | In-Flight: %d/%d | Pre-Dep: %lld | Pending: %lld"
            " | failed %d | transcripts on disk %d, in manifest %d\n%s\n",
            p.succeeded + p.failed, p.total, in, cap,
            json_integer_value(json_object_get(pools, "pre_departure")),
            json_integer_value(json_object_get(pools, "pending")), p.failed,
            p.saved + p.skipped, p.persisted, thin);
    int half = (cols - 3) / 2;
    fprintf(f, "%-*.*s | %s\n%s\n", half, half, "PRE-DEPARTURE (ready to fly)",
            "PENDING (blocked on deps)", thin);
    json_t *first = json_object_get(pools, "first");
    json_t *pre = json_object_get(first, "pre_departure"), *pen = json_object_get(first, "pending");
    for (int r = 0; r < k; r++) {
        char a[256], b[256];
        row(f, json_array_get(pre, (size_t)r), r, true, a, sizeof a);
        row(f, json_array_get(pen, (size_t)r), r, false, b, sizeof b);
        if (!a[0] && !b[0])
            break;
        fprintf(f, "%-*.*s | %.*s\n", half, half, a, half, b);
    }
    fprintf(f, "%s\n", rule);
    json_decref(pools);
}

void pl_run_view_draw(pl_run_view *v, pl_job *j)
{
    FILE *f = v->f;
    if (j && pl_job_get_state(j) != PL_JOB_STARTING) {
        if (v->live)
            draw_live(f, j);
        else if (v->tty)
            draw_bar(v, f, j);
        else if (v->interval > 0 && now_s() - v->last >= v->interval) {
            v->last = now_s();
            draw_line(v, f, j);
        }
    }
    fflush(f);
}

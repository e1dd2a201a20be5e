/* bench_metrics_render.c - the server-side cost of one GET /metrics render
 * (pl_metrics_render) with N requests live in the gateway, in thread CPU
 * time, so the figure holds on a loaded machine. The requests are submitted
 * to a mock backend whose first token is an hour away: their trackers stay
 * live, as for N open streams; the scrape must not grow with them.
 *   bench_metrics_render [N=2000] [REPS=2000] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "api/jobs_api.h"
#include "api/metrics.h"
#include "api/server.h"
#include "backends/mock/mock.h"

static void on_delta(void *ud, const pl_delta *d) {}
static void on_done(void *ud, const pl_result *r) {}

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_render(pl_server *s, int reps, size_t *bytes)
{
    double *t = malloc((size_t)reps * sizeof *t);
    struct evbuffer *b = evbuffer_new();
    for (int i = 0; i < reps; i++) {
        double t0 = cpu_ms();
        pl_metrics_render(s, b);
        t[i] = cpu_ms() - t0;
        *bytes = evbuffer_get_length(b);
        evbuffer_drain(b, *bytes);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double m = t[reps / 2];
    free(t);
    evbuffer_free(b);
    return m;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000, reps = argc > 2 ? atoi(argv[2]) : 2000;
    struct event_base *base = event_base_new();
    pl_server_opts so = {.max_body_bytes = 1 << 20, .stream_buffer_bytes = 1 << 18};
    pl_server *s = pl_server_new(base, &so);
    pl_mock_opts mo = {.model = "mock", .token_delay_ms = 3600 * 1000, .capacity = n + 1,
                       .max_model_len = 4096};
    pl_backend *mb = pl_mock_new(base, &mo);
    pl_server_add_model(s, "mock", mb);
    pl_jobs_api *jobs = pl_jobs_api_register(s, "/tmp");
    pl_metrics_register(s);
    size_t bytes = 0;
    double idle = median_render(s, reps, &bytes);
    pl_chat_message msg = {"user", "one two three"};
    pl_gen_request r = {.messages = &msg, .n_messages = 1};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 16;
    for (int i = 0; i < n; i++) {
        uint64_t id;
        if (pl_backend_submit(mb, &r, (pl_sink){on_delta, on_done, NULL}, &id, NULL) < 0) {
            fprintf(stderr, "submit %d failed\n", i);
            return 1;
        }
    }
    size_t bytes_n = 0;
    double busy = median_render(s, reps, &bytes_n);
    printf("RESULT render median thread-CPU: %.4f ms with 0 live requests (%zu bytes), "
           "%.4f ms with %d live (%zu bytes)\n", idle, bytes, busy, n, bytes_n);
    pl_jobs_api_free(jobs);
    pl_server_free(s);
    event_base_free(base);
    return 0;
}

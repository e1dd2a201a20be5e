/* bench_sched.c - CPU cost of the conversation scheduler.
 *
 *  1. scheduler alone: 2,500 conversations x (3 participants + a moderator
 *     speaking after them) x 3 rounds = 10,000 requests queued at the start;
 *     slots freed in FIFO order, each model's dispatch pumped after each
 *     completion (as a job does); CPU per dispatch+completion pair. Run
 *     with one model (capacity 256) and with two (moderator on a second
 *     model, capacity 32: a full model's requests wait in its own pool).
 *  2. a whole job on the mock backend with zero delay (same shape,
 *     validation off, 16 tokens per reply): main-thread CPU per request,
 *     which adds prompt building, the mock's token production, sinks,
 *     transcripts (the writes themselves run on the I/O threads).
 *
 * Usage: bench_sched [OUTPUT_DIR]. Prints one line per figure. Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "backends/mock/mock.h"
#include "schedulers/conversation.h"
#include "src/jobs/jobs.h"

#define N_CONV 2500
#define N_AGENTS 4
#define ROUNDS 3

static double cpu_now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The ring of admitted requests, completed in FIFO order. */
enum { RING = 1024 };
typedef struct ring {
    pl_conv_req *v[RING];
    long head, tail;
} ring;

static void ring_submit(void *ud, pl_conv_req *r)
{
    ring *q = ud;
    q->v[q->tail++ % RING] = r;
}

static double bench_sched_only(int two_models, long *pairs_out)
{
    int model[N_AGENTS] = {0, 0, 0, two_models ? 1 : 0};
    uint64_t deps[N_AGENTS] = {0, 0, 0, 7};
    pl_dispatch *d[2] = {pl_dispatch_new(&(pl_dispatch_opts){.capacity = 256}),
                         pl_dispatch_new(&(pl_dispatch_opts){.capacity = 32})};
    static ring q;
    q.head = q.tail = 0;
    pl_convs_config cfg = {N_AGENTS, two_models ? 2 : 1, ROUNDS, 0, N_CONV, model, deps,
                           .dispatch = d, .submit = ring_submit, .ud = &q};
    pl_convs *s = pl_convs_new(&cfg);
    for (int c = 0; c < N_CONV; c++)
        pl_convs_start(s, c);
    pl_conv_counts k;
    pl_convs_counts(s, &k);
    if (k.pending + k.ready != N_CONV * N_AGENTS)
        abort();
    long pairs = 0;
    double t0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    for (;;) {
        pl_convs_pump(s);        /* each model's dispatch, as a job pumps */
        if (q.head == q.tail)
            break;
        pl_convs_complete(s, q.v[q.head++ % RING], PL_CONV_OK, 1);
        pairs++;
    }
    double dt = cpu_now(CLOCK_PROCESS_CPUTIME_ID) - t0;
    pl_convs_counts(s, &k);
    if (k.succeeded != N_CONV)
        abort();
    pl_convs_free(s);
    pl_dispatch_free(d[0]);
    pl_dispatch_free(d[1]);
    *pairs_out = pairs;
    return dt;
}

static void on_finished(void *ud, pl_job *j)
{
    event_base_loopbreak(ud);
}

static char *job_json(void)
{
    size_t cap = (size_t)N_CONV * 100 + 1024, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n,
        "{\"experiment\":\"bench\",\"models\":{\"m\":{}},\"validation\":false,"
        "\"sampling\":{\"max_tokens\":16},\"num_rounds\":%d,\"agents\":[{\"id\":\"a\"},"
        "{\"id\":\"b\"},{\"id\":\"c\"},{\"id\":\"mod\",\"speak_after_within_round\":"
        "[\"a\",\"b\",\"c\"]}],\"questions\":[", ROUNDS);
    for (int i = 0; i < N_CONV; i++)
        n += (size_t)snprintf(b + n, cap - n, "%s{\"id\":\"q%d\",\"text\":\"Question %d\"}",
                              i ? "," : "", i, i);
    snprintf(b + n, cap - n, "]}");
    return b;
}

static double bench_job(const char *out, long *requests)
{
    char *js = job_json();
    json_t *root = json_loads(js, 0, NULL);
    free(js);
    pl_job_spec spec;
    pl_spec_problems p = {0};
    if (!root || pl_job_spec_parse(root, NULL, &spec, &p) < 0)
        abort();
    json_decref(root);
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 2);
    pl_mock_opts mo = {.model = "m", .capacity = 256, .seed = 1, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_backend *bs[1] = {b};
    pl_job_opts o = {.base = base, .io = io, .id = "bench", .output_root = out,
                     .backends = bs, .on_finished = on_finished, .ud = base};
    char err[256];
    pl_job *j = pl_job_new(&spec, &o, err, sizeof err);
    double t0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    pl_job_start(j);
    event_base_dispatch(base);
    double dt = cpu_now(CLOCK_THREAD_CPUTIME_ID) - t0;
    pl_job_progress pr;
    pl_job_get_progress(j, &pr);
    if (pr.succeeded != N_CONV)
        fprintf(stderr, "bench_sched: only %d/%d succeeded\n", pr.succeeded, N_CONV);
    *requests = (long)pl_mock_get_counts(b).completed;
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
    return dt;
}

int main(int argc, char **argv)
{
    const char *out = argc > 1 ? argv[1] : "build/bench_sched_out";
    for (int two = 0; two < 2; two++) {
        double best = 1e9;
        long pairs = 0;
        for (int rep = 0; rep < 5; rep++) {
            double dt = bench_sched_only(two, &pairs);
            if (dt < best)
                best = dt;
        }
        printf("RESULT sched_only models=%d queued=%d pairs=%ld us_per_dispatch_completion=%.3f\n",
               two ? 2 : 1, N_CONV * N_AGENTS, pairs, best * 1e6 / (double)pairs);
    }
    long reqs = 0;
    double dt = bench_job(out, &reqs);
    printf("RESULT job_on_mock requests=%ld main_thread_cpu_s=%.3f us_per_request=%.2f\n",
           reqs, dt, dt * 1e6 / (double)(reqs ? reqs : 1));
    return 0;
}

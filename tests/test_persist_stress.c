/* test_persist_stress.c - several processes write one experiment's manifest
 * and index at once, some killed at random: every acknowledged update must
 * survive, and manifest and index must agree.
 *
 * Each round starts a fresh experiment and forks WRITERS processes. A writer
 * registers the questions, then writes random batches (a question succeeded
 * or failed) and, before and after each pl_persist_write, tells the parent
 * on a pipe what it is about to write and what is now written. In some rounds
 * the parent SIGKILLs writers at random moments. Afterwards:
 *   - a question acknowledged as succeeded is succeeded, indexed once;
 *   - a question acknowledged only as failed is failed (succeeded only if a
 *     success was in flight when a writer died);
 *   - no acknowledged question is "pending";
 *   - with no kill, the files as written (before any repair) already agree:
 *     the manifest's succeeded set is the index's, with no duplicate line;
 *     with kills, the same after a reopen (repair).
 * Rounds: PARLEY_STRESS_ROUNDS (default 12). Seed: PARLEY_STRESS_SEED
 * (default: the time), printed, to replay a failure. */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/jobs/persist.h"

#define WRITERS 4
#define QUESTIONS 24
#define OPS 40

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/pl_stress_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

static void qid(int q, char *out, size_t n)
{
    snprintf(out, n, "q%02d", q);
}

/* A writer: random batches of 1-3 records; "s"/"f" lines before the write
 * (intent), "S"/"F" after it returned 0 (acknowledged). */
static void writer(const char *dir, int fd, unsigned seed)
{
    char err[256], ids[QUESTIONS][8];
    const char *idp[QUESTIONS];
    for (int q = 0; q < QUESTIONS; q++) {
        qid(q, ids[q], sizeof ids[q]);
        idp[q] = ids[q];
    }
    pl_persist *p = pl_persist_open(dir, "stress", err, sizeof err);
    if (!p || pl_persist_register(p, idp, QUESTIONS, NULL, err, sizeof err) < 0)
        _exit(3);
    for (int op = 0; op < OPS; op++) {
        pl_persist_record r[3];
        json_t *t[3];
        int n = 1 + (int)(rand_r(&seed) % 3);
        char line[64];
        for (int i = 0; i < n; i++) {
            int q = (int)(rand_r(&seed) % QUESTIONS);
            bool ok = rand_r(&seed) % 5 < 2;
            t[i] = json_pack("{s:s, s:s, s:{s:s}}", "question_id", ids[q], "status",
                             ok ? "succeeded" : "failed", "summary", "final_answer", "A");
            r[i] = (pl_persist_record){ids[q], ok, ok ? NULL : "no answer", t[i]};
            int len = snprintf(line, sizeof line, "%c %d\n", ok ? 's' : 'f', q);
            if (write(fd, line, (size_t)len) != len)
                _exit(4);
        }
        int rc = pl_persist_write(p, r, n);
        for (int i = 0; i < n; i++) {
            int len = snprintf(line, sizeof line, "%c %s\n", r[i].succeeded ? 'S' : 'F',
                               r[i].question_id + 1);
            if (rc == 0 && write(fd, line, (size_t)len) != len)
                _exit(4);
            json_decref(t[i]);
        }
        if (rc < 0)
            _exit(5);
        if (rand_r(&seed) % 4 == 0)
            usleep(rand_r(&seed) % 2000);
    }
    pl_persist_close(p);
    _exit(0);
}

typedef struct expect {
    bool s_intent, s_ack, f_ack;
} expect;

static void read_acks(int fd, expect *e)
{
    FILE *f = fdopen(fd, "r");
    cr_assert_not_null(f);
    char kind;
    int q;
    while (fscanf(f, " %c %d", &kind, &q) == 2) {
        cr_assert(q >= 0 && q < QUESTIONS);
        if (kind == 's')
            e[q].s_intent = true;
        else if (kind == 'S')
            e[q].s_ack = true;
        else if (kind == 'F')
            e[q].f_ack = true;
    }
    fclose(f);
}

/* The index as a set; asserts no duplicate or torn line. */
static json_t *index_set(const char *dir, bool killed)
{
    char path[256], line[4096];
    snprintf(path, sizeof path, "%s/stress/stress_index.jsonl", dir);
    json_t *set = json_object();
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n') && killed)
            break;
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o, "index line parses: %s", line);
        const char *id = json_string_value(json_object_get(o, "question_id"));
        cr_assert_null(json_object_get(set, id), "%s indexed twice", id);
        json_object_set_new(set, id, json_true());
        json_decref(o);
    }
    if (f)
        fclose(f);
    return set;
}

/* Check the manifest against the index and the acknowledgements. */
static void check(const char *dir, const expect *e, unsigned seed, int round)
{
    char path[256];
    snprintf(path, sizeof path, "%s/stress/task_manifest.json", dir);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_not_null(m, "manifest parses (seed %u round %d)", seed, round);
    json_t *idx = index_set(dir, false), *qs = json_object_get(m, "questions");
    int n_succ = 0;
    for (int q = 0; q < QUESTIONS; q++) {
        char id[8];
        qid(q, id, sizeof id);
        const char *st = json_string_value(json_object_get(json_object_get(qs, id), "status"));
        cr_assert_not_null(st, "%s in the manifest (seed %u round %d)", id, seed, round);
        bool succ = !strcmp(st, "succeeded");
        n_succ += succ;
        cr_assert_eq(succ, json_object_get(idx, id) != NULL,
                     "%s: manifest says %s, index %s (seed %u round %d)", id, st,
                     json_object_get(idx, id) ? "has it" : "has not", seed, round);
        if (e[q].s_ack)
            cr_assert(succ, "%s: acknowledged success lost: %s (seed %u round %d)", id, st,
                      seed, round);
        else if (e[q].f_ack)
            cr_assert(!strcmp(st, "failed") || (succ && e[q].s_intent),
                      "%s: acknowledged failure lost: %s (seed %u round %d)", id, st, seed,
                      round);
    }
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counts"), "succeeded")),
                 n_succ, "manifest counts agree (seed %u round %d)", seed, round);
    json_decref(idx);
    json_decref(m);
}

static int run_round(const char *dir, unsigned *seed, bool kills, expect *e)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        unsigned ws = rand_r(seed);
        pids[w] = fork();
        cr_assert_geq(pids[w], 0);
        if (pids[w] == 0) {
            close(fds[0]);
            writer(dir, fds[1], ws);
        }
    }
    close(fds[1]);
    int killed = 0;
    if (kills) {
        for (int w = 0; w < WRITERS; w++) {
            if (rand_r(seed) % 2)
                continue;
            usleep(1000 + rand_r(seed) % 30000);
            if (kill(pids[w], SIGKILL) == 0)
                killed++;
        }
    }
    read_acks(fds[0], e);
    for (int w = 0; w < WRITERS; w++) {
        int st;
        cr_assert_eq(waitpid(pids[w], &st, 0), pids[w]);
        cr_assert(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
                  "writer %d exited %d", w, WEXITSTATUS(st));
    }
    return killed;
}

Test(persist_stress, writers_and_kills, .init = setup, .fini = teardown, .timeout = 280)
{
    const char *es = getenv("PARLEY_STRESS_SEED"), *er = getenv("PARLEY_STRESS_ROUNDS");
    unsigned seed = es && *es ? (unsigned)strtoul(es, NULL, 10) : (unsigned)time(NULL);
    int rounds = er && *er ? atoi(er) : 12;
    fprintf(stderr, "persist stress: PARLEY_STRESS_SEED=%u PARLEY_STRESS_ROUNDS=%d\n", seed,
            rounds);
    unsigned s = seed;
    for (int round = 0; round < rounds; round++) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/r%d", root, round);
        expect e[QUESTIONS] = {0};
        bool kills = round % 2 == 1;
        int killed = run_round(dir, &s, kills, e);
        if (killed) {
            char err[256];
            pl_persist *p = pl_persist_open(dir, "stress", err, sizeof err);
            cr_assert_not_null(p, "%s", err);
            pl_persist_close(p);
        }
        check(dir, e, seed, round);
    }
}

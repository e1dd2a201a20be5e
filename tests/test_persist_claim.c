/* test_persist_claim.c - src/jobs/persist_claim.c: processes sharing an
 * experiment claim disjoint questions under its lock; a claim whose
 * process is gone is taken over; temp and staged files of a writer that is
 * gone are swept on open, a live writer's are kept; a staged transcript
 * whose claim was taken over never replaces the new holder's. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/jobs/persist.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/pl_claim_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

#define NQ 10
static const char *ids[NQ] = {"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"};

static pl_persist *open_reg(void)
{
    char err[512];
    pl_persist *p = pl_persist_open(root, "e", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_assert_eq(pl_persist_register(p, ids, NQ, NULL, err, sizeof err), 0, "%s", err);
    return p;
}

static int claim(pl_persist *p, int want, uint8_t *states)
{
    pl_persist_step s = {.ids = ids, .n_ids = NQ, .want = want, .states = states};
    cr_assert_eq(pl_persist_step_run(p, &s, true), 0, "%s", s.error);
    return s.claimed;
}

static int count(const uint8_t *st, int v)
{
    int n = 0;
    for (int i = 0; i < NQ; i++)
        n += st[i] == v;
    return n;
}

Test(persist_claim, disjoint_claims_and_takeover, .init = setup, .fini = teardown)
{
    pl_persist *a = open_reg(), *b = open_reg();
    cr_assert_str_neq(pl_persist_claimer(a), pl_persist_claimer(b));
    uint8_t sa[NQ], sb[NQ];
    cr_assert_eq(claim(a, 4, sa), 4);
    cr_assert_eq(claim(b, 100, sb), 6, "b gets only what a has not claimed");
    cr_assert_eq(count(sb, PL_CLAIM_ELSEWHERE), 4);
    for (int i = 0; i < NQ; i++)
        cr_assert(sa[i] != PL_CLAIM_MINE || sb[i] == PL_CLAIM_ELSEWHERE, "q%d claimed twice", i);
    /* a goes away without finishing: its claims are b's to take. */
    pl_persist_close(a);
    cr_assert_eq(claim(b, 100, sb), 4);
    cr_assert_eq(count(sb, PL_CLAIM_MINE), NQ);
    pl_persist_close(b);
}

/* A child claims, then dies by SIGKILL (no clean close: its claimer file
 * stays, its pid is gone): the parent takes its claims over at once. */
Test(persist_claim, a_killed_claimer_is_taken_over, .init = setup, .fini = teardown)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        pl_persist *c = open_reg();
        uint8_t st[NQ];
        pl_persist_step s = {.ids = ids, .n_ids = NQ, .want = NQ, .states = st};
        int rc = pl_persist_step_run(c, &s, true);
        char ok = rc == 0 && s.claimed == NQ ? 'y' : 'n';
        if (write(fds[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(fds[1]);
    char ok = 0;
    cr_assert_eq(read(fds[0], &ok, 1), 1);
    cr_assert_eq(ok, 'y');
    pl_persist *p = open_reg();
    uint8_t st[NQ];
    cr_assert_eq(claim(p, NQ, st), 0, "a live claimer keeps its claims");
    cr_assert_eq(count(st, PL_CLAIM_ELSEWHERE), NQ);
    kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    cr_assert_eq(claim(p, NQ, st), NQ, "a killed claimer's claims are taken over");
    pl_persist_close(p);
    close(fds[0]);
}

static json_t *transcript(const char *run)
{
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:b}}", "question_id", "q0", "status",
                     "succeeded", "run_id", run, "summary", "final_answer", "A", "correct", 1);
}

/* A result whose claim was taken over meanwhile (its process looked gone)
 * is dropped: the file and the index line stay the new holder's. */
Test(persist_claim, a_lost_claim_never_replaces_the_holders_result, .init = setup,
     .fini = teardown)
{
    pl_persist *a = open_reg(), *b = open_reg();
    uint8_t st[NQ];
    cr_assert_eq(claim(a, 1, st), 1);
    cr_assert_eq(st[0], PL_CLAIM_MINE);
    /* b takes q0 over as if a were gone: a's claimer file disappears. */
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/e/.claims/%s.json", root, pl_persist_claimer(a));
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(claim(b, 1, st), 1);
    cr_assert_eq(st[0], PL_CLAIM_MINE);
    json_t *tb = transcript("B"), *ta = transcript("A");
    pl_persist_record rb = {"q0", true, NULL, tb, NULL}, ra = {"q0", true, NULL, ta, NULL};
    rb.staged = pl_persist_stage(b, &rb, err, sizeof err);
    ra.staged = pl_persist_stage(a, &ra, err, sizeof err);
    cr_assert(rb.staged && ra.staged);
    cr_assert_eq(pl_persist_commit(b, &rb, 1, true), 0);
    pl_persist_step s = {.recs = &ra, .n_recs = 1};
    cr_assert_eq(pl_persist_step_run(a, &s, true), 0);
    cr_assert_eq(s.lost, 1, "a's result is dropped");
    cr_assert_eq(access(ra.staged, F_OK), -1, "and its staged file removed");
    snprintf(path, sizeof path, "%s/e", root);
    json_t *t = pl_persist_read_transcript(path, "q0");
    cr_assert_str_eq(json_string_value(json_object_get(t, "run_id")), "B");
    json_decref(t);
    snprintf(path, sizeof path, "%s/e/e_index.jsonl", root);
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        cr_assert(strstr(line, "\"run_id\":\"B\""), "%s", line);
    }
    fclose(f);
    cr_assert_eq(n, 1);
    free((char *)ra.staged);
    free((char *)rb.staged);
    json_decref(ta);
    json_decref(tb);
    pl_persist_close(a);
    pl_persist_close(b);
}

static void touch(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    cr_assert_geq(fd, 0, "%s", path);
    close(fd);
}

static bool exists(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* issue 36.2: temp files of a killed writer survived a complete resume.
 * Opening sweeps them under the lock; a live writer's stay. */
Test(persist_claim, temp_files_of_dead_writers_swept_on_open, .init = setup, .fini = teardown)
{
    pl_persist *live = open_reg();
    char d[128], t[160], mine[256];
    snprintf(d, sizeof d, "%s/e", root);
    snprintf(t, sizeof t, "%s/e/transcripts", root);
    touch(t, "q1.json.tmp.4242.7f12ab");                     /* an older parley's */
    touch(d, "task_manifest.json.tmp.4242.7f12ab");
    touch(d, "e_index.jsonl.tmp.host-4242-deadbeef.3");
    touch(t, "q2.json.staged.host-4242-deadbeef.9");
    snprintf(mine, sizeof mine, "q3.json.staged.%s.1", pl_persist_claimer(live));
    touch(t, mine);                                          /* a live writer's */
    touch(t, "q4.json");                                     /* a transcript */
    pl_persist *p = open_reg();
    cr_assert_not(exists(t, "q1.json.tmp.4242.7f12ab"));
    cr_assert_not(exists(d, "task_manifest.json.tmp.4242.7f12ab"));
    cr_assert_not(exists(d, "e_index.jsonl.tmp.host-4242-deadbeef.3"));
    cr_assert_not(exists(t, "q2.json.staged.host-4242-deadbeef.9"));
    cr_assert(exists(t, mine), "a live writer's staged file stays");
    cr_assert(exists(t, "q4.json"));
    pl_persist_close(p);
    pl_persist_close(live);
    p = open_reg();                  /* live is gone now: its file goes too */
    cr_assert_not(exists(t, mine));
    pl_persist_close(p);
}

/* persist_claim.c - this process as a claimer of an experiment's
 * questions: its file and heartbeat, whether another claimer lives, the
 * sweep of files left by writers that are gone, and the claim step
 * (persist.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/base/json_pack.h"
#include "src/jobs/persist_internal.h"

/* The start time of pid in clock ticks since boot (/proc/PID/stat field
 * 22), 0 when unknown; *state gets its state letter. */
static unsigned long long proc_start_of(long pid, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *s = strrchr(buf, ')');          /* the command may hold spaces */
    if (!s)
        return 0;
    unsigned long long start = 0;
    char st = '?';
    /* state, then fields 4..21, then the start time */
    if (sscanf(s + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                      "%*s %*s %*s %llu", &st, &start) != 2)
        return 0;
    if (state)
        *state = st;
    return start;
}

static void identity(pl_persist *p)
{
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    size_t i = 0;
    for (; host[i] && i < sizeof p->host - 1 && i < 40; i++) {
        char c = host[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        p->host[i] = ok || c == '-' ? c : '_';
    }
    p->host[i] = '\0';
    ssize_t n = readlink("/proc/self/ns/pid", p->pidns, sizeof p->pidns - 1);
    p->pidns[n > 0 ? n : 0] = '\0';
    p->proc_start = proc_start_of((long)getpid(), NULL);
    unsigned int r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (unsigned int)time(NULL) ^ (unsigned int)(uintptr_t)p;
    snprintf(p->claimer, sizeof p->claimer, "%s-%d-%08x", p->host, (int)getpid(), r);
}

static void *heartbeat(void *ud)
{
    pl_persist *p = ud;
    pthread_mutex_lock(&p->hb_mu);
    while (!p->hb_stop) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += PERSIST_HEARTBEAT_MS / 1000;
        pthread_cond_timedwait(&p->hb_cv, &p->hb_mu, &t);
        if (!p->hb_stop)
            utimensat(AT_FDCWD, p->claimer_path, NULL, 0);
    }
    pthread_mutex_unlock(&p->hb_mu);
    return NULL;
}

/* Under the lock (no other opener can sweep it before it exists). */
int persist_claimer_init(pl_persist *p, char *err, size_t errlen)
{
    identity(p);
    char name[128];
    snprintf(name, sizeof name, "%s.json", p->claimer);
    p->claimer_path = persist_path_join(p->cdir, name);
    json_t *c = pl_json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:s}", "claimer", p->claimer,
                          "pid", (int)getpid(), "host", p->host, "pidns", p->pidns,
                          "proc_start", (json_int_t)p->proc_start, "started",
                          (json_int_t)time(NULL), "experiment", p->experiment);
    if (!p->claimer_path || !c || persist_write_json(p, p->claimer_path, c) < 0) {
        snprintf(err, errlen, "cannot write %s/%s: %s", p->cdir, name, strerror(errno));
        json_decref(c);
        return -1;
    }
    json_decref(c);
    pthread_mutex_init(&p->hb_mu, NULL);
    pthread_cond_init(&p->hb_cv, NULL);
    if (pthread_create(&p->hb, NULL, heartbeat, p) != 0) {
        snprintf(err, errlen, "cannot start the claim heartbeat");
        unlink(p->claimer_path);
        return -1;
    }
    p->hb_running = true;
    return 0;
}

void persist_claimer_end(pl_persist *p)
{
    if (p->hb_running) {
        pthread_mutex_lock(&p->hb_mu);
        p->hb_stop = true;
        pthread_cond_signal(&p->hb_cv);
        pthread_mutex_unlock(&p->hb_mu);
        pthread_join(p->hb, NULL);
        pthread_cond_destroy(&p->hb_cv);
        pthread_mutex_destroy(&p->hb_mu);
        p->hb_running = false;
        /* Our claims on unfinished questions become free at once. */
        unlink(p->claimer_path);
    }
    free(p->claimer_path);
    p->claimer_path = NULL;
}

void persist_alive_reset(pl_persist *p)
{
    json_object_clear(p->alive);
}

static bool alive_uncached(pl_persist *p, const char *id)
{
    char name[200];
    snprintf(name, sizeof name, "%s/%s.json", p->cdir, id);
    struct stat st;
    if (strchr(id, '/') || stat(name, &st) < 0)
        return false;                        /* ended cleanly, or never was */
    if (time(NULL) - st.st_mtime > PERSIST_STALE_S)
        return false;                        /* no heartbeat */
    json_t *c = json_load_file(name, 0, NULL);
    const char *host = json_string_value(json_object_get(c, "host"));
    const char *ns = json_string_value(json_object_get(c, "pidns"));
    long pid = (long)json_integer_value(json_object_get(c, "pid"));
    unsigned long long start = (unsigned long long)json_integer_value(
        json_object_get(c, "proc_start"));
    bool here = host && ns && ns[0] && !strcmp(host, p->host) && !strcmp(ns, p->pidns);
    json_decref(c);
    if (!here)
        return true;                         /* another host: the heartbeat says */
    char state = '?';
    unsigned long long now = proc_start_of(pid, &state);
    return now != 0 && now == start && state != 'Z' && state != 'X';
}

bool persist_alive(pl_persist *p, const char *id)
{
    if (!strcmp(id, p->claimer))
        return true;
    json_t *v = json_object_get(p->alive, id);
    if (v)
        return json_is_true(v);
    bool a = alive_uncached(p, id);
    json_object_set_new(p->alive, id, json_boolean(a));
    return a;
}

/* The writer of a temp or staged file: the claimer named after its
 * ".tmp." or ".staged.", up to the next dot. NULL when it has none. */
static bool writer_of(const char *name, char *out, size_t n)
{
    const char *s = strstr(name, ".tmp.");
    s = s ? s + 5 : (s = strstr(name, ".staged.")) ? s + 8 : NULL;
    if (!s)
        return false;
    size_t len = strcspn(s, ".");
    snprintf(out, n, "%.*s", (int)len, s);
    return true;
}

static void sweep_dir(pl_persist *p, const char *dir, bool claimers)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char who[128], path[4400];
        size_t len = strlen(e->d_name);
        bool tmp = writer_of(e->d_name, who, sizeof who);
        bool claimer = claimers && !tmp && len > 5 && !strcmp(e->d_name + len - 5, ".json");
        if (claimer)
            snprintf(who, sizeof who, "%.*s", (int)(len - 5), e->d_name);
        if ((!tmp && !claimer) || persist_alive(p, who))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
}

void persist_sweep_locked(pl_persist *p)
{
    sweep_dir(p, p->dir, false);
    sweep_dir(p, p->tdir, false);
    sweep_dir(p, p->cdir, true);
}

/* One question's state; claims it when free and want allows. */
static uint8_t claim_one(pl_persist *p, pl_persist_step *s, const char *id, bool *dirty)
{
    json_t *qs = persist_questions(p), *e = json_object_get(qs, id);
    const char *st = json_string_value(json_object_get(e, "status"));
    const char *by = json_string_value(json_object_get(e, "by"));
    const char *claim = json_string_value(json_object_get(e, "claim"));
    if ((st && !strcmp(st, "succeeded")) || json_object_get(p->indexed, id))
        return PL_CLAIM_SUCCEEDED;
    if (st && !strcmp(st, "failed") && by) {
        if (!strcmp(by, p->claimer))
            return PL_CLAIM_MINE;
        if (json_integer_value(json_object_get(e, "gen")) > p->gen0 || persist_alive(p, by))
            return PL_CLAIM_FAILED_ELSEWHERE;
    }
    if (claim && !strcmp(claim, p->claimer))
        return PL_CLAIM_MINE;
    if (claim && persist_alive(p, claim))
        return PL_CLAIM_ELSEWHERE;
    if (s->claimed >= s->want)
        return PL_CLAIM_OPEN;
    if (!json_is_object(e)) {
        e = json_object();
        json_object_set_new(qs, id, e);
    }
    /* A retry of an earlier failure, or a takeover: pending again, ours. */
    json_object_set_new(e, "status", json_string("pending"));
    json_object_del(e, "error");
    json_object_del(e, "by");
    json_object_del(e, "gen");
    json_object_set_new(e, "claim", json_string(p->claimer));
    s->claimed++;
    *dirty = true;
    return PL_CLAIM_MINE;
}

bool persist_claim_locked(pl_persist *p, pl_persist_step *s)
{
    bool dirty = false;
    for (int i = 0; i < s->n_ids; i++) {
        uint8_t st = claim_one(p, s, s->ids[i], &dirty);
        if (s->states)
            s->states[i] = st;
    }
    return dirty;
}

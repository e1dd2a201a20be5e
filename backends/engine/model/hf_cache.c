/* hf_cache.c - --model as a file, a checkpoint folder or a name in the
 * local Hugging Face cache (hf_cache.h). */
#include "backends/engine/model/hf_cache.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CACHES 5
#define PATHLEN 4096

/* snprintf into a path buffer; false when it does not fit. */
static bool path_(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool path_(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, PATHLEN, fmt, ap);
    va_end(ap);
    return k >= 0 && k < PATHLEN;
}

static bool is_dir_(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ORG/NAME or NAME, as the Hub names repositories. */
static bool hub_name_(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!s[0] || s[0] == '.' || s[0] == '/' || s[0] == '~' || strlen(s) > 200)
        return false;
    if (slash && (slash[1] == '\0' || slash[1] == '.' || strchr(slash + 1, '/')))
        return false;
    for (const char *p = s; *p; p++)
        if (!(*p == '/' || *p == '-' || *p == '_' || *p == '.' ||
              (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return false;
    return true;
}

/* The cache folders to search, without repeats. */
static int cache_dirs_(char dirs[MAX_CACHES][PATHLEN])
{
    int n = 0;
    const char *hub = getenv("HF_HUB_CACHE"), *legacy = getenv("HUGGINGFACE_HUB_CACHE");
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char cand[MAX_CACHES][PATHLEN];
    int k = 0;
    if (hub && *hub && path_(cand[k], "%s", hub))
        k++;
    if (legacy && *legacy && path_(cand[k], "%s", legacy))
        k++;
    if (home && *home && path_(cand[k], "%s/hub", home))
        k++;
    if (xdg && *xdg && path_(cand[k], "%s/huggingface/hub", xdg))
        k++;
    if (path_(cand[k], "%s/.cache/huggingface/hub", h && *h ? h : "."))
        k++;
    for (int i = 0; i < k; i++) {
        bool seen = false;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(dirs[j], cand[i]);
        if (!seen)
            memcpy(dirs[n++], cand[i], PATHLEN);
    }
    return n;
}

/* A ref file's commit hash, trimmed; -1 when unreadable. */
static int read_ref_(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t k = fread(out, 1, n - 1, f);
    fclose(f);
    out[k] = '\0';
    while (k && (out[k - 1] == '\n' || out[k - 1] == '\r' || out[k - 1] == ' '))
        out[--k] = '\0';
    return k && !strchr(out, '/') && strcmp(out, "..") ? 0 : -1;
}

/* The only folder under snapshots/, or -1 (none, or several: *several). */
static int only_snapshot_(const char *snaps, char *out, size_t n, int *count)
{
    DIR *d = opendir(snaps);
    struct dirent *e;
    *count = 0;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if ((*count)++ == 0)
            snprintf(out, n, "%s", e->d_name);
    }
    closedir(d);
    return *count == 1 ? 0 : -1;
}

/* repo = CACHE/models--ORG--NAME: its snapshot into out; 1 when the repo is
 * absent, -1 with err when present but unusable. The revision is a ref
 * under refs/ (default main), or a snapshot's name; without refs/main the
 * only snapshot is taken. */
static int snapshot_(const char *repo, const char *rev, char *out, size_t n, char *err,
                     size_t errlen)
{
    char path[PATHLEN], hash[256];
    int count = 0;
    bool given = rev && *rev && strcmp(rev, "main");
    const char *want = given ? rev : "main";
    if (!is_dir_(repo))
        return 1;
    if (strchr(want, '/') || want[0] == '.')
        return snprintf(err, errlen, "revision '%s': not a ref or snapshot name", want), -1;
    if (strlen(want) >= sizeof hash || !path_(path, "%s/refs/%s", repo, want))
        return snprintf(err, errlen, "revision '%.64s': too long", want), -1;
    if (read_ref_(path, hash, sizeof hash) < 0) {
        memcpy(hash, want, strlen(want) + 1);
        if (!path_(path, "%s/snapshots/%s", repo, want) || (!is_dir_(path) && given))
            return snprintf(err, errlen, "%s: no ref or snapshot '%s'", repo, want), -1;
        if (!given && (!path_(path, "%s/snapshots", repo) ||
                       only_snapshot_(path, hash, sizeof hash, &count) < 0))
            return snprintf(err, errlen, "%s: no refs/main and %d snapshots (give the "
                            "revision)", repo, count), -1;
    }
    if (!path_(out, "%s/snapshots/%s", repo, hash) || !path_(path, "%s/config.json", out))
        return snprintf(err, errlen, "%s: path too long", repo), -1;
    if (access(path, R_OK) != 0)
        return snprintf(err, errlen, "%s: no config.json in the snapshot (an incomplete "
                        "download?)", out), -1;
    return 0;
}

static int from_cache_(const char *spec, const char *rev, char *out, size_t n, char *err,
                       size_t errlen)
{
    char dirs[MAX_CACHES][PATHLEN], repo_name[512], searched[3000] = "";
    int nd = cache_dirs_(dirs);
    snprintf(repo_name, sizeof repo_name, "models--%s", spec);
    for (char *p = repo_name; (p = strchr(p, '/'));)
        memmove(p + 2, p + 1, strlen(p + 1) + 1), p[0] = '-', p[1] = '-';
    for (int i = 0; i < nd; i++) {
        char repo[PATHLEN];
        if (!path_(repo, "%s/%s", dirs[i], repo_name))
            continue;
        int rc = snapshot_(repo, rev, out, n, err, errlen);
        if (rc <= 0)
            return rc == 0 ? PL_MODEL_KIND_HF : -1;
        size_t len = strlen(searched);
        if (len + strlen(repo) + 3 < sizeof searched)
            snprintf(searched + len, sizeof searched - len, "%s%s", len ? ", " : "", repo);
    }
    snprintf(err, errlen, "model '%s': no such file or folder, and not in the local Hugging "
             "Face cache (searched %s). parley does not download models: fetch it with "
             "`huggingface-cli download %s`, or give a GGUF file or checkpoint folder", spec,
             searched, spec);
    return -1;
}

int pl_hf_resolve(const char *spec, const char *revision, char *out, size_t n, char *err,
                  size_t errlen)
{
    struct stat st;
    if (stat(spec, &st) == 0) {
        snprintf(out, n, "%s", spec);
        if (S_ISREG(st.st_mode))
            return PL_MODEL_KIND_GGUF;
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/config.json", spec);
        if (S_ISDIR(st.st_mode) && access(cfg, R_OK) == 0)
            return PL_MODEL_KIND_HF;
        snprintf(err, errlen, "%s: %s", spec, S_ISDIR(st.st_mode)
                 ? "a folder without config.json (not a Hugging Face checkpoint)"
                 : "not a file or folder");
        return -1;
    }
    if (!hub_name_(spec)) {
        snprintf(err, errlen, "%s: no such file or folder", spec);
        return -1;
    }
    return from_cache_(spec, revision, out, n, err, errlen);
}

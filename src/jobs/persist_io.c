/* persist_io.c - the file primitives of persist.c: paths, directories,
 * writes that reach the disk (fsync) and appear atomically (rename). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/jobs/persist_internal.h"

char *persist_path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", a, b);
    return s;
}

int persist_mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

int persist_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int persist_write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Write and fsync tmp; on failure it is removed and errno kept. */
static int write_tmp(const char *tmp, const char *data, size_t len)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int rc = persist_write_all(fd, data, len);
    if (rc == 0)
        rc = fsync(fd);
    int e = errno;
    if (close(fd) < 0 && rc == 0) {   /* NFS reports a full disk here */
        rc = -1;
        e = errno;
    }
    if (rc < 0) {
        unlink(tmp);
        errno = e;
    }
    return rc;
}

int persist_write_via(const char *tmp, const char *path, const char *data, size_t len,
                      bool no_dir_sync)
{
    if (write_tmp(tmp, data, len) < 0)
        return -1;
    if (!path)
        return 0;
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    if (no_dir_sync)
        return 0;
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", path);
    return persist_fsync_dir(dirname(buf));
}

void persist_tmp_name(pl_persist *p, const char *path, const char *kind, char *out,
                      size_t n)
{
    unsigned long k = __atomic_fetch_add(&p->seq, 1, __ATOMIC_RELAXED);
    snprintf(out, n, "%s.%s.%s.%lu", path, kind, p->claimer, k);
}

int persist_write_json(pl_persist *p, const char *path, json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!s) {
        errno = ENOMEM;
        return -1;
    }
    char tmp[4300];
    persist_tmp_name(p, path, "tmp", tmp, sizeof tmp);
    int rc = persist_write_via(tmp, path, s, strlen(s), false);
    free(s);
    return rc;
}

int pl_persist_atomic_write(const char *path, const char *data, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%lx", path, (int)getpid(),
             (unsigned long)pthread_self());
    return persist_write_via(tmp, path, data, len, false);
}

char *persist_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        r = fread(buf + n, 1, 65536, f);
        n += r;
    } while (r > 0);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

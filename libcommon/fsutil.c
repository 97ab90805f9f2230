#include "fsutil.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *ds_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) ds_die("out of memory (%zu bytes)", n);
    return p;
}

void *ds_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) ds_die("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

void *ds_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) ds_die("out of memory (%zu bytes)", n);
    return p;
}

char *ds_xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p) ds_die("out of memory");
    return p;
}

char *ds_path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/') la--;
    char *p = ds_xmalloc(la + lb + 2);
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

char *ds_realpath(const char *path)
{
    char *r = realpath(path, NULL);
    if (!r) ds_err("%s: %s", path, strerror(errno));
    return r;
}

int ds_mkdirs(const char *dir)
{
    char *p = ds_xstrdup(dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) {
            int e = errno;
            ds_err("cannot create directory %s: %s", p, strerror(e));
            free(p);
            return -1;
        }
        *s = '/';
    }
    struct stat st;
    if (mkdir(p, 0777) && errno != EEXIST) {
        ds_err("cannot create directory %s: %s", p, strerror(errno));
        free(p);
        return -1;
    }
    if (stat(p, &st) || !S_ISDIR(st.st_mode)) {
        ds_err("%s: not a directory", p);
        free(p);
        return -1;
    }
    free(p);
    return 0;
}

int ds_fsync_dir_of(const char *path)
{
    char *copy = ds_xstrdup(path);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        int e = errno;
        free(copy);
        return ds_err("cannot open directory of %s: %s", path, strerror(e));
    }
    /* Some file systems refuse fsync on a directory (EINVAL); the rename still happened. */
    if (fsync(fd) && errno != EINVAL && errno != EROFS) {
        int e = errno;
        close(fd);
        free(copy);
        return ds_err("fsync of directory of %s: %s", path, strerror(e));
    }
    close(fd);
    free(copy);
    return 0;
}

int ds_commit_file(const char *tmp, const char *path)
{
    int fd = open(tmp, O_RDONLY);
    if (fd < 0) return ds_err("%s: %s", tmp, strerror(errno));
    if (fsync(fd)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return ds_err("%s: fsync: %s", path, strerror(e));
    }
    close(fd);
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return ds_err("%s: rename: %s", path, strerror(e));
    }
    return ds_fsync_dir_of(path);
}

char *ds_tmp_name(const char *path)
{
    size_t n = strlen(path);
    char *tmp = ds_xmalloc(n + 5);
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    return tmp;
}

int ds_atomic_open(ds_atomic *a, const char *path)
{
    a->path = ds_xstrdup(path);
    a->tmp = ds_tmp_name(path);
    a->f = fopen(a->tmp, "w");
    if (!a->f) {
        int e = errno;
        ds_err("cannot write %s: %s", a->tmp, strerror(e));
        free(a->path);
        free(a->tmp);
        a->path = a->tmp = NULL;
        return -1;
    }
    return 0;
}

static void atomic_free(ds_atomic *a)
{
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->f = NULL;
}

int ds_atomic_commit(ds_atomic *a)
{
    int rc = 0;
    if (fflush(a->f) || ferror(a->f)) {
        rc = ds_err("cannot write %s: %s", a->path, strerror(errno));
    } else if (fsync(fileno(a->f))) {
        rc = ds_err("cannot write %s: fsync: %s", a->path, strerror(errno));
    }
    if (fclose(a->f) && rc == 0) rc = ds_err("cannot write %s: %s", a->path, strerror(errno));
    if (rc == 0 && rename(a->tmp, a->path))
        rc = ds_err("cannot write %s: rename: %s", a->path, strerror(errno));
    if (rc) unlink(a->tmp);
    else rc = ds_fsync_dir_of(a->path);
    atomic_free(a);
    return rc;
}

void ds_atomic_abort(ds_atomic *a)
{
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    atomic_free(a);
}

char *ds_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ds_err("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = ds_xmalloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        buf = ds_xrealloc(buf, cap + 1);
    }
    if (ferror(f)) {
        ds_err("cannot read %s: %s", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

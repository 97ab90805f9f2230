#include "materialize.h"
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <omp.h>

static const char *how_names[] = {"symlink", "hardlink", "copy", "move"};

int ds_materialize_how_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, how_names[i])) return i;
    return -1;
}

const char *ds_materialize_how_name(ds_materialize_how how) { return how_names[how]; }

/* dir/.name.dsplit-tmp: hidden, so a scan of a half-built tree never takes it for an image. */
static char *tmp_name_for(const char *dst)
{
    const char *slash = strrchr(dst, '/');
    size_t d = slash ? (size_t)(slash - dst + 1) : 0;
    const char *base = dst + d;
    size_t bl = strlen(base);
    char *t = ds_xmalloc(d + bl + sizeof ".dsplit-tmp" + 1);
    memcpy(t, dst, d);
    t[d] = '.';
    memcpy(t + d + 1, base, bl);
    memcpy(t + d + 1 + bl, ".dsplit-tmp", sizeof ".dsplit-tmp");
    return t;
}

/* Copies src to dst through a temporary name; with `durable` the data is fsynced before
 * the rename (a move unlinks the source afterwards, so the copy must survive a crash). */
static int copy_file(const char *src, const char *dst, int durable)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return ds_err("cannot read %s: %s", src, strerror(errno));
    struct stat st;
    if (fstat(in, &st)) {
        int e = errno;
        close(in);
        return ds_err("%s: %s", src, strerror(e));
    }
    char *tmp = tmp_name_for(dst);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
    if (out < 0) {
        int e = errno;
        close(in);
        ds_err("cannot write %s: %s", tmp, strerror(e));
        free(tmp);
        return -1;
    }
    int rc = 0;
    int use_cfr = 1;
    char buf[1 << 16];
    for (;;) {
        ssize_t got;
        if (use_cfr) {
            got = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
            /* Not offered between these file systems or by this kernel: plain read/write. */
            if (got < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                use_cfr = 0;
                continue;
            }
            if (got < 0) { rc = ds_err("cannot copy %s to %s: %s", src, tmp, strerror(errno)); break; }
            if (got == 0) break;
            continue;
        }
        got = read(in, buf, sizeof buf);
        if (got < 0) {
            if (errno == EINTR) continue;
            rc = ds_err("cannot read %s: %s", src, strerror(errno));
            break;
        }
        if (got == 0) break;
        for (ssize_t off = 0; off < got;) {
            ssize_t w = write(out, buf + off, got - off);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) { rc = ds_err("cannot write %s: %s", tmp, strerror(errno)); break; }
            off += w;
        }
        if (rc) break;
    }
    close(in);
    if (rc == 0) {
        struct timespec times[2] = {st.st_atim, st.st_mtim};
        futimens(out, times);  /* timestamps are a courtesy; the data is what matters */
        if (durable && fsync(out)) rc = ds_err("cannot write %s: fsync: %s", tmp, strerror(errno));
    }
    if (close(out) && rc == 0) rc = ds_err("cannot write %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, dst)) rc = ds_err("cannot write %s: rename: %s", dst, strerror(errno));
    if (rc) unlink(tmp);
    else if (durable) rc = ds_fsync_dir_of(dst);
    free(tmp);
    return rc;
}

static int exists_differs(const char *dst, const char *src)
{
    return ds_err("%s already exists and is not %s (remove it, or materialize into a new directory)", dst, src);
}

/* ds_materialize_file; with `dry`, only its checks: nothing is created, moved or removed,
 * and 0 means "would be placed". */
static int place(const char *src, const char *dst, const char *other, ds_materialize_how how, int dry)
{
    struct stat ss, ds;
    int have_dst = lstat(dst, &ds) == 0;
    if (!have_dst && errno != ENOENT) return ds_err("%s: %s", dst, strerror(errno));
    /* The file already sits in the other split: an earlier run split differently, and
     * going on would leave it in both. */
    struct stat os;
    if (!have_dst && other && lstat(other, &os) == 0)
        return ds_err("%s is in %s from an earlier run with other --seed or --val; rerun with those "
                      "options or materialize into a new directory", src, other);

    if (how == DS_MATERIALIZE_MOVE) {
        if (lstat(src, &ss)) {
            if (errno != ENOENT) return ds_err("%s: %s", src, strerror(errno));
            if (have_dst) return 1;  /* moved by an earlier, interrupted run */
            return ds_err("%s: %s", src, strerror(ENOENT));
        }
        if (have_dst) {
            if (ss.st_dev == ds.st_dev && ss.st_ino == ds.st_ino) {
                /* Two names of one file: rename(2) would do nothing, so drop the source name. */
                if (!dry && unlink(src)) return ds_err("cannot remove %s: %s", src, strerror(errno));
                return 1;
            }
            /* A whole copy left by a move across file systems that stopped before the
             * unlink: replacing it with the source finishes that move. */
            if (!S_ISREG(ds.st_mode) || ds.st_size != ss.st_size) return exists_differs(dst, src);
        }
        if (dry || rename(src, dst) == 0) return 0;
        if (errno != EXDEV) return ds_err("cannot move %s to %s: %s", src, dst, strerror(errno));
        if (copy_file(src, dst, 1)) return -1;
        if (unlink(src)) return ds_err("cannot remove %s after copying it: %s", src, strerror(errno));
        return 0;
    }

    if (stat(src, &ss)) return ds_err("%s: %s", src, strerror(errno));
    switch (how) {
    case DS_MATERIALIZE_SYMLINK:
        if (have_dst) {
            char target[PATH_MAX + 1];
            ssize_t l = S_ISLNK(ds.st_mode) ? readlink(dst, target, PATH_MAX) : -1;
            if (l < 0) return exists_differs(dst, src);
            target[l] = 0;
            return strcmp(target, src) ? exists_differs(dst, src) : 1;
        }
        if (dry) return 0;
        if (symlink(src, dst)) return ds_err("cannot link %s to %s: %s", dst, src, strerror(errno));
        return 0;
    case DS_MATERIALIZE_HARDLINK:
        if (have_dst) {
            if (stat(dst, &ds) == 0 && ds.st_dev == ss.st_dev && ds.st_ino == ss.st_ino) return 1;
            return exists_differs(dst, src);
        }
        if (dry) return 0;
        if (link(src, dst)) {
            if (errno == EXDEV)
                return ds_err("cannot hard-link %s to %s: they are on different file systems "
                              "(use --how copy or symlink)", dst, src);
            return ds_err("cannot hard-link %s to %s: %s", dst, src, strerror(errno));
        }
        return 0;
    case DS_MATERIALIZE_COPY:
        if (have_dst) {
            if (S_ISREG(ds.st_mode) && ds.st_size == ss.st_size) return 1;
            return exists_differs(dst, src);
        }
        return dry ? 0 : copy_file(src, dst, 0) ? -1 : 0;
    default:
        return ds_err("unknown materialize mode %d", (int)how);
    }
}

int ds_materialize_file(const char *src, const char *dst, const char *other, ds_materialize_how how)
{
    return place(src, dst, other, how, 0);
}

int ds_materialize_check(const char *dir, const char *split, const char *other_split, const char *root,
                         const ds_manifest_entry *e, size_t n, ds_materialize_how how)
{
    struct stat dir_st;
    if (stat(dir, &dir_st)) return ds_err("%s: %s", dir, strerror(errno));
    char *base = ds_path_join(dir, split);
    char *obase = other_split ? ds_path_join(dir, other_split) : NULL;
    atomic_int failed = 0;
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&failed)) continue;
        char *src = ds_path_join(root, e[i].path);
        char *dst = ds_path_join(base, e[i].path);
        char *other = obase ? ds_path_join(obase, e[i].path) : NULL;
        int rc = place(src, dst, other, how, 1);
        struct stat ss;
        /* link(2) fails across file systems: found here, before anything is written. */
        if (rc == 0 && how == DS_MATERIALIZE_HARDLINK && stat(src, &ss) == 0 && ss.st_dev != dir_st.st_dev)
            rc = ds_err("cannot hard-link %s to %s: they are on different file systems (use --how copy or symlink)",
                        dst, src);
        if (rc < 0) atomic_store(&failed, 1);
        free(src);
        free(dst);
        free(other);
    }
    free(base);
    free(obase);
    return failed ? -1 : 0;
}

int ds_materialize(const char *dir, const char *split, const char *other_split, const char *root,
                   char *const *classes, int nclasses, const ds_manifest_entry *e, size_t n,
                   ds_materialize_how how, ds_progress *p, size_t *placed, size_t *present)
{
    char *base = ds_path_join(dir, split);
    char *obase = other_split ? ds_path_join(dir, other_split) : NULL;
    for (int c = 0; c < nclasses; c++) {
        char *cd = ds_path_join(base, classes[c]);
        int rc = ds_mkdirs(cd);
        free(cd);
        if (rc) {
            free(base);
            free(obase);
            return -1;
        }
    }
    int64_t p_base = p ? p->done : 0;
    atomic_int failed = 0;
    atomic_size_t n_placed = 0, n_present = 0;
    /* Each entry is a few system calls on its own files: dynamic chunks keep threads busy
     * when some files are copies and others are already done. */
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&failed)) continue;
        char *src = ds_path_join(root, e[i].path);
        char *dst = ds_path_join(base, e[i].path);
        char *other = obase ? ds_path_join(obase, e[i].path) : NULL;
        int rc = ds_materialize_file(src, dst, other, how);
        if (rc < 0) atomic_store(&failed, 1);
        else if (rc == 0) atomic_fetch_add(&n_placed, 1);
        else atomic_fetch_add(&n_present, 1);
        free(src);
        free(dst);
        free(other);
        /* ds_progress is not thread-safe; one thread draws what all have done. */
        if (p && omp_get_thread_num() == 0)
            ds_progress_update(p, p_base + (int64_t)(atomic_load(&n_placed) + atomic_load(&n_present)));
    }
    if (p) ds_progress_update(p, p_base + (int64_t)(n_placed + n_present));
    free(base);
    free(obase);
    *placed += n_placed;
    *present += n_present;
    return failed ? -1 : 0;
}

int ds_materialize_moved(const char *out_dir, const char *dir, const char *root,
                         char ***paths_out, size_t *n_out)
{
    static const char *splits[2] = {"train", "val"};
    char **paths = NULL;
    size_t n = 0, cap = 0;
    for (int s = 0; s < 2; s++) {
        char *name = ds_xmalloc(strlen(splits[s]) + 5);
        sprintf(name, "%s.txt", splits[s]);
        char *mf = ds_path_join(out_dir, name);
        free(name);
        if (access(mf, F_OK)) {
            free(mf);
            continue;  /* no earlier run */
        }
        ds_manifest m;
        int rc = ds_manifest_read(&m, mf);
        free(mf);
        if (rc) {
            for (size_t i = 0; i < n; i++) free(paths[i]);
            free(paths);
            return -1;
        }
        char *base = ds_path_join(dir, splits[s]);
        for (size_t i = 0; i < m.n; i++) {
            char *src = ds_path_join(root, m.items[i].path);
            char *dst = ds_path_join(base, m.items[i].path);
            struct stat st;
            int gone = lstat(src, &st) && errno == ENOENT;
            int there = gone && lstat(dst, &st) == 0;
            free(src);
            free(dst);
            if (!there) continue;
            if (n == cap) paths = ds_xrealloc(paths, (cap = cap * 2 + 64) * sizeof *paths);
            paths[n++] = ds_xstrdup(m.items[i].path);
        }
        free(base);
        ds_manifest_free(&m);
    }
    *paths_out = paths;
    *n_out = n;
    return 0;
}

#include "split.h"
#include "fsutil.h"
#include "log.h"
#include "rng.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ds_split_skip_name(int kind)
{
    static const char *names[DS_SKIP_KINDS] = {
        [DS_SKIP_HIDDEN] = "hidden",
        [DS_SKIP_BAD_NAME] = "name with TAB or newline or not UTF-8",
        [DS_SKIP_NOT_IMAGE] = "not an image file",
        [DS_SKIP_DIR] = "nested directory",
        [DS_SKIP_ROOT_FILE] = "file outside a class directory",
    };
    return kind >= 0 && kind < DS_SKIP_KINDS ? names[kind] : "?";
}

int ds_split_is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    dot++;
    return !strcasecmp(dot, "jpg") || !strcasecmp(dot, "jpeg") || !strcasecmp(dot, "png");
}

size_t ds_split_val_count(size_t n, double fraction)
{
    if (n <= 1 || fraction <= 0) return 0;
    double x = (double)n * fraction;
    /* The product carries a relative error of about 2^-53; forgive a little more than that,
     * so an exact integer never rounds up to the next one. */
    double v = ceil(x - 1e-9 * (x > 1 ? x : 1));
    size_t val = v < 0 ? 0 : (size_t)v;
    return val > n - 1 ? n - 1 : val;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- the scan ---------------------------------------------------------------------- */

/* A growable pool of NUL-terminated names addressed by offset (the pool moves as it grows). */
typedef struct {
    char *buf;
    size_t len, cap;
    size_t *off;
    size_t n, ncap;
} name_pool;

static void pool_add(name_pool *p, const char *s)
{
    size_t l = strlen(s) + 1;
    if (p->len + l > p->cap) {
        p->cap = (p->len + l) * 2 + 4096;
        p->buf = ds_xrealloc(p->buf, p->cap);
    }
    if (p->n == p->ncap) {
        p->ncap = p->ncap * 2 + 256;
        p->off = ds_xrealloc(p->off, p->ncap * sizeof *p->off);
    }
    memcpy(p->buf + p->len, s, l);
    p->off[p->n++] = p->len;
    p->len += l;
}

/* Turns the pool into a sorted pointer array that owns nothing (the class keeps buf). */
static void pool_finish(name_pool *p, ds_split_class *c)
{
    c->buf = p->buf;
    c->n = p->n;
    c->files = ds_xmalloc((p->n ? p->n : 1) * sizeof *c->files);
    for (size_t i = 0; i < p->n; i++) c->files[i] = p->buf + p->off[i];
    qsort(c->files, c->n, sizeof *c->files, cmp_str);
    free(p->off);
    memset(p, 0, sizeof *p);
}

typedef struct {
    char **paths;
    int *kind;
    size_t n, cap;
    size_t count[DS_SKIP_KINDS];
} skip_list;

static void skip_add(skip_list *s, const char *dir, const char *name, int kind)
{
    if (s->n == s->cap) {
        s->cap = s->cap * 2 + 16;
        s->paths = ds_xrealloc(s->paths, s->cap * sizeof *s->paths);
        s->kind = ds_xrealloc(s->kind, s->cap * sizeof *s->kind);
    }
    s->paths[s->n] = dir ? ds_path_join(dir, name) : ds_xstrdup(name);
    s->kind[s->n++] = kind;
    s->count[kind]++;
}

/* A TAB or newline cannot be written as a manifest line; bytes that are not UTF-8 cannot be
 * stored in a shard's /paths or /classes, which are UTF-8 strings. */
static int bad_name(const char *name) { return strpbrk(name, "\t\n") != NULL || !ds_utf8_valid(name); }

/* The file type of an entry: d_type when the file system gives it, else one stat (which
 * follows a symlink, so a link to an image counts as that image). 0 when it cannot be
 * known (a dangling link). */
static mode_t entry_type(int dirfd, const struct dirent *e)
{
    switch (e->d_type) {
    case DT_REG: return S_IFREG;
    case DT_DIR: return S_IFDIR;
    case DT_UNKNOWN:
    case DT_LNK: {
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, 0)) return 0;
        return st.st_mode & S_IFMT;
    }
    default: return S_IFIFO;  /* sockets, devices, fifos: never images */
    }
}

/* Reads one class directory into c; skipped entries go to s. */
static int scan_class(int rootfd, const char *root, ds_split_class *c, skip_list *s)
{
    int fd = openat(rootfd, c->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ds_err("cannot read class directory %s/%s: %s", root, c->name, strerror(e));
    }
    name_pool pool = {0};
    struct dirent *e;
    for (errno = 0; (e = readdir(d)); errno = 0) {
        const char *nm = e->d_name;
        if (nm[0] == '.') {
            if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
            skip_add(s, c->name, nm, DS_SKIP_HIDDEN);
            continue;
        }
        if (bad_name(nm)) {
            skip_add(s, c->name, nm, DS_SKIP_BAD_NAME);
            continue;
        }
        mode_t type = entry_type(fd, e);
        if (type == S_IFDIR)
            skip_add(s, c->name, nm, DS_SKIP_DIR);
        else if (type == S_IFREG && ds_split_is_image_name(nm))
            pool_add(&pool, nm);
        else
            skip_add(s, c->name, nm, DS_SKIP_NOT_IMAGE);
    }
    int rerr = errno;
    closedir(d);
    if (rerr) {
        free(pool.buf);
        free(pool.off);
        return ds_err("cannot read class directory %s/%s: %s", root, c->name, strerror(rerr));
    }
    pool_finish(&pool, c);
    return 0;
}

static int cmp_class(const void *a, const void *b)
{
    return strcmp(((const ds_split_class *)a)->name, ((const ds_split_class *)b)->name);
}

typedef struct {
    char *path;
    int kind;
} skip_item;

static int cmp_skip(const void *a, const void *b)
{
    return strcmp(((const skip_item *)a)->path, ((const skip_item *)b)->path);
}

/* Merges per-class skip lists into the tree, sorted by path so output is reproducible. */
static void collect_skips(ds_split_tree *t, skip_list *lists, int nlists)
{
    size_t total = 0;
    for (int i = 0; i < nlists; i++) total += lists[i].n;
    skip_item *all = ds_xmalloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < nlists; i++) {
        for (size_t j = 0; j < lists[i].n; j++) all[k++] = (skip_item){lists[i].paths[j], lists[i].kind[j]};
        for (int kind = 0; kind < DS_SKIP_KINDS; kind++) t->skipped[kind] += lists[i].count[kind];
        free(lists[i].paths);
        free(lists[i].kind);
    }
    qsort(all, total, sizeof *all, cmp_skip);
    t->skipped_paths = ds_xmalloc((total ? total : 1) * sizeof *t->skipped_paths);
    t->skipped_kind = ds_xmalloc((total ? total : 1) * sizeof *t->skipped_kind);
    for (size_t i = 0; i < total; i++) {
        t->skipped_paths[i] = all[i].path;
        t->skipped_kind[i] = all[i].kind;
    }
    t->nskipped = total;
    free(all);
}

int ds_split_scan(ds_split_tree *t, const char *root_arg)
{
    memset(t, 0, sizeof *t);
    struct stat st;
    if (stat(root_arg, &st)) return ds_err("%s: %s", root_arg, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return ds_err("%s: not a directory", root_arg);
    char *root = ds_realpath(root_arg);
    if (!root) return -1;
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = rootfd < 0 ? NULL : fdopendir(rootfd);
    if (!d) {
        int e = errno;
        if (rootfd >= 0) close(rootfd);
        free(root);
        return ds_err("cannot read %s: %s", root_arg, strerror(e));
    }
    /* Skips found at the root go in list 0; class i's in list i + 1. */
    skip_list root_skips = {0};
    int cap = 0;
    struct dirent *e;
    for (errno = 0; (e = readdir(d)); errno = 0) {
        const char *nm = e->d_name;
        if (nm[0] == '.') {
            if (strcmp(nm, ".") && strcmp(nm, "..")) skip_add(&root_skips, NULL, nm, DS_SKIP_HIDDEN);
            continue;
        }
        if (bad_name(nm)) {
            skip_add(&root_skips, NULL, nm, DS_SKIP_BAD_NAME);
            continue;
        }
        if (entry_type(rootfd, e) != S_IFDIR) {
            skip_add(&root_skips, NULL, nm, DS_SKIP_ROOT_FILE);
            continue;
        }
        if (t->nclasses == cap) {
            cap = cap * 2 + 64;
            t->classes = ds_xrealloc(t->classes, cap * sizeof *t->classes);
        }
        memset(&t->classes[t->nclasses], 0, sizeof *t->classes);
        t->classes[t->nclasses++].name = ds_xstrdup(nm);
    }
    int rerr = errno;
    t->root = root;
    if (rerr) {
        closedir(d);
        collect_skips(t, &root_skips, 1);
        ds_split_tree_free(t);
        return ds_err("cannot read %s: %s", root_arg, strerror(rerr));
    }
    if (t->nclasses == 0) {
        closedir(d);
        collect_skips(t, &root_skips, 1);
        ds_split_tree_free(t);
        return ds_err("%s: no class directories (expected ROOT/<class>/<image>)", root_arg);
    }
    qsort(t->classes, t->nclasses, sizeof *t->classes, cmp_class);

    skip_list *lists = ds_xcalloc(t->nclasses + 1, sizeof *lists);
    lists[0] = root_skips;
    int failed = 0;
    /* Directories are independent; readdir of one class costs a few system calls, so
     * many small tasks balance well. Each class writes only its own slot. */
#pragma omp parallel for schedule(dynamic, 4) reduction(| : failed)
    for (int i = 0; i < t->nclasses; i++)
        failed |= scan_class(rootfd, root, &t->classes[i], &lists[i + 1]) != 0;
    closedir(d);
    collect_skips(t, lists, t->nclasses + 1);
    free(lists);
    if (failed) {
        ds_split_tree_free(t);
        return -1;
    }
    for (int i = 0; i < t->nclasses; i++) t->nimages += t->classes[i].n;
    return 0;
}

void ds_split_tree_free(ds_split_tree *t)
{
    for (int i = 0; i < t->nclasses; i++) {
        free(t->classes[i].name);
        free(t->classes[i].files);
        free(t->classes[i].buf);
    }
    free(t->classes);
    for (size_t i = 0; i < t->nskipped; i++) free(t->skipped_paths[i]);
    free(t->skipped_paths);
    free(t->skipped_kind);
    free(t->root);
    memset(t, 0, sizeof *t);
}

static int find_class(const ds_split_tree *t, const char *name, size_t len)
{
    int lo = 0, hi = t->nclasses;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const char *m = t->classes[mid].name;
        int c = strncmp(m, name, len);
        if (c == 0) c = m[len] ? 1 : 0;
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1 - lo;
}

void ds_split_tree_add(ds_split_tree *t, char *const *paths, size_t n)
{
    /* Sorted, the paths of one class ("class/...") sit together: one rebuild per class. */
    char **sorted = ds_xmalloc((n ? n : 1) * sizeof *sorted);
    if (n) memcpy(sorted, paths, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    for (size_t k = 0, j; k < n; k = j) {
        const char *slash = strchr(sorted[k], '/');
        j = k + 1;
        if (!slash || slash == sorted[k]) continue;
        size_t clen = slash - sorted[k];
        while (j < n && !strncmp(sorted[j], sorted[k], clen + 1)) j++;
        int ci = find_class(t, sorted[k], clen);
        if (ci < 0) {
            ci = -1 - ci;
            t->classes = ds_xrealloc(t->classes, (t->nclasses + 1) * sizeof *t->classes);
            memmove(&t->classes[ci + 1], &t->classes[ci], (t->nclasses - ci) * sizeof *t->classes);
            memset(&t->classes[ci], 0, sizeof *t->classes);
            char *name = ds_xmalloc(clen + 1);
            memcpy(name, sorted[k], clen);
            name[clen] = 0;
            t->classes[ci].name = name;
            t->nclasses++;
        }
        ds_split_class *c = &t->classes[ci];
        name_pool pool = {0};
        for (size_t i = 0; i < c->n; i++) pool_add(&pool, c->files[i]);
        size_t added = 0;
        for (size_t m = k; m < j; m++) {
            const char *file = sorted[m] + clen + 1;
            if (!*file || strchr(file, '/') || (m > k && !strcmp(sorted[m], sorted[m - 1]))) continue;
            if (c->n && bsearch(&file, c->files, c->n, sizeof *c->files, cmp_str)) continue;
            pool_add(&pool, file);
            added++;
        }
        free(c->files);
        free(c->buf);
        pool_finish(&pool, c);
        t->nimages += added;
    }
    free(sorted);
}

/* ---- the rule ---------------------------------------------------------------------- */

void ds_split_class_assign(unsigned char *is_val, const char *class_name, size_t n,
                           double fraction, uint64_t seed)
{
    memset(is_val, 0, n);
    size_t nval = ds_split_val_count(n, fraction);
    if (nval == 0) return;
    uint32_t *idx = ds_xmalloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
    ds_rng r;
    ds_rng_init(&r, seed, DS_RNG_SPLIT, ds_hash64(class_name));
    ds_rng_shuffle_u32(&r, idx, n);
    for (size_t i = 0; i < nval; i++) is_val[idx[i]] = 1;
    free(idx);
}

void ds_split_assign(const ds_split_tree *t, double fraction, uint64_t seed,
                     ds_manifest_entry **train, size_t *ntrain,
                     ds_manifest_entry **val, size_t *nval)
{
    ds_manifest_entry *tr = ds_xmalloc((t->nimages ? t->nimages : 1) * sizeof *tr);
    ds_manifest_entry *va = ds_xmalloc((t->nimages ? t->nimages : 1) * sizeof *va);
    size_t nt = 0, nv = 0;
    for (int c = 0; c < t->nclasses; c++) {
        const ds_split_class *cl = &t->classes[c];
        unsigned char *is_val = ds_xmalloc(cl->n ? cl->n : 1);
        ds_split_class_assign(is_val, cl->name, cl->n, fraction, seed);
        /* files[] is sorted, and every path shares the "class/" prefix, so walking it in
         * order yields each manifest already sorted by (label, path). */
        for (size_t i = 0; i < cl->n; i++) {
            ds_manifest_entry e = {c, ds_path_join(cl->name, cl->files[i])};
            if (is_val[i]) va[nv++] = e;
            else tr[nt++] = e;
        }
        free(is_val);
    }
    *train = tr;
    *ntrain = nt;
    *val = va;
    *nval = nv;
}

void ds_split_entries_free(ds_manifest_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) free(e[i].path);
    free(e);
}

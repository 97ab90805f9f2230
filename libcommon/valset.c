/* valset: ILSVRC2012 validation ground truth to manifest entries (see valset.h). */
#include "valset.h"
#include "fsutil.h"
#include "log.h"
#include "matfile.h"
#include "split.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SYNSET_ID 1000000   /* ILSVRC IDs are 1..1860; anything far past is not an ID */

typedef struct {
    char *image;   /* file name in the images folder */
    char *wnid;
    size_t line;   /* in the ground-truth file, 1-based */
} truth;

typedef struct {
    const char *name;
    int label;
} class_ref;

/* Splits a NUL-terminated text into lines in place (a last line without '\n' counts; a
 * trailing '\r' is dropped, as Windows and Kaggle files end their lines with it). */
static size_t text_lines(char *text, size_t len, char ***out)
{
    size_t n = 0, cap = 1024;
    char **lines = ds_xmalloc(cap * sizeof *lines);
    for (char *p = text, *end = text + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (n == cap) lines = ds_xrealloc(lines, (cap *= 2) * sizeof *lines);
        lines[n++] = p;
        char *stop = nl ? nl : end;
        if (stop > p && stop[-1] == '\r') stop[-1] = 0;
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    *out = lines;
    return n;
}

static char *read_text(const char *file, size_t *len, const char *what)
{
    char *text = ds_read_file(file, len);
    if (text && memchr(text, 0, *len)) {
        free(text);
        ds_err("%s: not a %s (contains a NUL byte)", file, what);
        return NULL;
    }
    return text;
}

/* The first whitespace-separated token of s, copied; NULL when there is none. */
static char *first_token(const char *s)
{
    s += strspn(s, " \t");
    size_t l = strcspn(s, " \t");
    if (!l) return NULL;
    char *t = ds_xmalloc(l + 1);
    memcpy(t, s, l);
    t[l] = 0;
    return t;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_ptr_str(const void *a, const void *b)
{
    return strcmp(**(char **const *)a, **(char **const *)b);
}

/* A WNID listed for two IDs would make one of them unreachable: refused, naming both. */
static int check_synset_duplicates(char **by_id, size_t nids, const char *file, const char *unit)
{
    char ***order = ds_xmalloc((nids ? nids : 1) * sizeof *order);
    size_t n = 0;
    for (size_t i = 0; i < nids; i++)
        if (by_id[i]) order[n++] = &by_id[i];
    qsort(order, n, sizeof *order, cmp_ptr_str);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(*order[i - 1], *order[i])) {
            size_t a = (size_t)(order[i - 1] - by_id) + 1, b = (size_t)(order[i] - by_id) + 1;
            rc = ds_err("%s: WNID %s is given to two %ss, %zu and %zu", file, *order[i], unit, a < b ? a : b,
                        a < b ? b : a);
        }
    free(order);
    return rc;
}

/* by_id[i] = the WNID of ILSVRC2012_ID i + 1 (NULL where none), from meta.mat or a list. */
static int read_synsets(const char *file, char ***by_id_out, size_t *nids_out)
{
    size_t len, nids = 0;
    char *text = ds_read_file(file, &len);
    if (!text) return -1;
    char **by_id = NULL;
    int rc = 0;
    /* Any "MATLAB" header goes to the MAT-file reader, whose refusal of other versions says why. */
    if (len >= 6 && !memcmp(text, "MATLAB", 6)) {
        ds_mat_row *rows;
        size_t n;
        rc = ds_mat_parse_struct((const unsigned char *)text, len, file, "synsets", "ILSVRC2012_ID", "WNID", &rows, &n);
        for (size_t i = 0; i < n && !rc; i++) {
            if (rows[i].num < 1 || rows[i].num > MAX_SYNSET_ID)
                rc = ds_err("%s: synsets(%zu).ILSVRC2012_ID is %lld, not in 1..%d", file, i + 1,
                            (long long)rows[i].num, MAX_SYNSET_ID);
            else if (!rows[i].str[0] || strpbrk(rows[i].str, " \t"))
                rc = ds_err("%s: synsets(%zu).WNID '%s' is not a WNID", file, i + 1, rows[i].str);
            else if ((size_t)rows[i].num > nids)
                nids = (size_t)rows[i].num;
        }
        if (!rc) by_id = ds_xcalloc(nids ? nids : 1, sizeof *by_id);
        for (size_t i = 0; i < n && !rc; i++) {
            size_t id = (size_t)rows[i].num;
            if (by_id[id - 1])
                rc = ds_err("%s: ILSVRC2012_ID %zu is given twice (synsets(%zu) again)", file, id, i + 1);
            else
                by_id[id - 1] = ds_xstrdup(rows[i].str);
        }
        ds_mat_rows_free(rows, n);
        if (!rc) rc = check_synset_duplicates(by_id, nids, file, "ILSVRC2012_ID");
    } else if (memchr(text, 0, len)) {
        rc = ds_err("%s: neither a MAT-file nor a synset list (contains a NUL byte)", file);
    } else {
        char **lines;
        nids = text_lines(text, len, &lines);
        by_id = ds_xcalloc(nids ? nids : 1, sizeof *by_id);
        for (size_t i = 0; i < nids && !rc; i++)
            if (!(by_id[i] = first_token(lines[i])))
                rc = ds_err("%s:%zu: empty line (line i must hold the WNID of ILSVRC2012_ID i)", file, i + 1);
        free(lines);
        if (!rc && nids == 0) rc = ds_err("%s: an empty synset list", file);
        if (!rc) rc = check_synset_duplicates(by_id, nids, file, "line");
    }
    free(text);
    if (rc) {
        for (size_t i = 0; by_id && i < nids; i++) free(by_id[i]);
        free(by_id);
        return -1;
    }
    *by_id_out = by_id;
    *nids_out = nids;
    return 0;
}

static void truths_free(truth *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        free(t[i].image);
        free(t[i].wnid);
    }
    free(t);
}

/* Kaggle's LOC_val_solution.csv: "ImageId,PredictionString", then one image per line. */
static int read_csv(char **lines, size_t nl, const char *file, truth *t, size_t *n)
{
    if (strcmp(lines[0], "ImageId,PredictionString"))
        return ds_err("%s:1: expected the header 'ImageId,PredictionString'", file);
    for (size_t i = 1; i < nl; i++) {
        char *line = lines[i], *comma = strchr(line, ',');
        if (!line[0] && i == nl - 1) break;
        if (!comma || comma == line) return ds_err("%s:%zu: expected 'ImageId,WNID ...'", file, i + 1);
        *comma = 0;
        if (strchr(line, '/') || line[0] == '.' || strpbrk(line, " \t"))
            return ds_err("%s:%zu: '%s' is not an image id", file, i + 1, line);
        char *wnid = first_token(comma + 1);
        if (!wnid) return ds_err("%s:%zu: no WNID in the prediction string of %s", file, i + 1, line);
        t[*n].image = ds_xmalloc(strlen(line) + sizeof ".JPEG");
        sprintf(t[*n].image, "%s.JPEG", line);
        t[*n].wnid = wnid;
        t[*n].line = i + 1;
        (*n)++;
    }
    return 0;
}

/* The devkit's ground truth: line i holds the ILSVRC2012_ID of ILSVRC2012_val_<i, 8 digits>.JPEG. */
static int read_id_list(char **lines, size_t nl, const char *file, const char *synsets, truth *t, size_t *n)
{
    if (!synsets)
        return ds_err("%s is a list of ILSVRC2012_IDs: it needs the synset table (the devkit's meta.mat, "
                      "or a WNID-per-line list) to name their classes", file);
    char **by_id;
    size_t nids;
    if (read_synsets(synsets, &by_id, &nids)) return -1;
    int rc = 0;
    for (size_t i = 0; i < nl && !rc; i++) {
        char *s = lines[i] + strspn(lines[i], " \t"), *end;
        if (!*s && i == nl - 1) break;
        errno = 0;
        long long id = strtoll(s, &end, 10);
        end += strspn(end, " \t");
        if (s[0] < '0' || s[0] > '9' || errno || *end)
            rc = ds_err("%s:%zu: '%s' is not an ILSVRC2012_ID (one integer per line)", file, i + 1, lines[i]);
        else if (id < 1 || (unsigned long long)id > nids || !by_id[id - 1])
            rc = ds_err("%s:%zu: ILSVRC2012_ID %lld has no synset in %s", file, i + 1, id, synsets);
        else {
            t[*n].image = ds_xmalloc(48);
            snprintf(t[*n].image, 48, "ILSVRC2012_val_%08zu.JPEG", i + 1);
            t[*n].wnid = ds_xstrdup(by_id[id - 1]);
            t[*n].line = i + 1;
            (*n)++;
        }
    }
    for (size_t i = 0; i < nids; i++) free(by_id[i]);
    free(by_id);
    return rc;
}

static int read_truth(const char *file, const char *synsets, truth **out, size_t *n)
{
    size_t len;
    char *text = read_text(file, &len, "ground-truth file");
    if (!text) return -1;
    char **lines;
    size_t nl = text_lines(text, len, &lines);
    truth *t = ds_xmalloc((nl ? nl : 1) * sizeof *t);
    *n = 0;
    int rc = nl == 0 ? ds_err("%s: empty ground-truth file", file)
             : !strncmp(lines[0], "ImageId,", 8) ? read_csv(lines, nl, file, t, n)
                                                 : read_id_list(lines, nl, file, synsets, t, n);
    if (rc == 0 && *n == 0) rc = ds_err("%s: lists no image", file);
    free(lines);
    free(text);
    if (rc) {
        truths_free(t, *n);
        return -1;
    }
    *out = t;
    return 0;
}

static int cmp_truth_image(const void *a, const void *b)
{
    return strcmp(((const truth *)a)->image, ((const truth *)b)->image);
}

static int cmp_class_ref(const void *a, const void *b)
{
    return strcmp(((const class_ref *)a)->name, ((const class_ref *)b)->name);
}

static int cmp_entry(const void *a, const void *b)
{
    const ds_manifest_entry *x = a, *y = b;
    return x->label != y->label ? (x->label < y->label ? -1 : 1) : strcmp(x->path, y->path);
}

/* The image files of the folder (regular files, or links to them, named as dsplit's images
 * are), sorted bytewise. */
static int scan_images(const char *dir, char ***out, size_t *n, size_t *ndirs)
{
    DIR *d = opendir(dir);
    if (!d) return ds_err("%s: %s", dir, strerror(errno));
    size_t cap = 1024;
    char **names = ds_xmalloc(cap * sizeof *names);
    *n = *ndirs = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *path = ds_path_join(dir, de->d_name);
        struct stat st;
        int ok = stat(path, &st) == 0;
        free(path);
        *ndirs += ok && S_ISDIR(st.st_mode);
        if (!ok || !S_ISREG(st.st_mode) || !ds_split_is_image_name(de->d_name)) continue;
        if (*n == cap) names = ds_xrealloc(names, (cap *= 2) * sizeof *names);
        names[(*n)++] = ds_xstrdup(de->d_name);
        errno = 0;
    }
    int err = errno;
    closedir(d);
    if (err) {
        for (size_t i = 0; i < *n; i++) free(names[i]);
        free(names);
        return ds_err("%s: %s", dir, strerror(err));
    }
    qsort(names, *n, sizeof *names, cmp_str);
    *out = names;
    return 0;
}

/* Every listed image in the folder and every image of the folder listed: the first of each
 * kind of difference is named, with the counts. */
static int match_images(const truth *t, size_t nt, char **names, size_t nn, const char *labels, const char *dir)
{
    size_t missing = 0, unlisted = 0, i = 0, j = 0;
    const truth *first_missing = NULL;
    const char *first_unlisted = NULL;
    while (i < nt || j < nn) {
        int c = i == nt ? 1 : j == nn ? -1 : strcmp(t[i].image, names[j]);
        if (c < 0) {
            if (!missing++) first_missing = &t[i];
            i++;
        } else if (c > 0) {
            if (!unlisted++) first_unlisted = names[j];
            j++;
        } else {
            i++;
            j++;
        }
    }
    if (missing)
        ds_err("%s:%zu: image %s is not in %s (%zu of the %zu listed images are missing)", labels,
               first_missing->line, first_missing->image, dir, missing, nt);
    if (unlisted)
        ds_err("%s holds %zu images that %s does not list (the first: %s); the folder holds %zu, the "
               "ground truth lists %zu", dir, unlisted, labels, first_unlisted, nn, nt);
    return missing || unlisted ? -1 : 0;
}

int ds_valset_build(ds_valset *v, const ds_valset_options *o)
{
    memset(v, 0, sizeof *v);
    class_ref *cls = ds_xmalloc((o->nclasses ? o->nclasses : 1) * sizeof *cls);
    for (int c = 0; c < o->nclasses; c++) cls[c] = (class_ref){o->classes[c], c};
    qsort(cls, (size_t)o->nclasses, sizeof *cls, cmp_class_ref);
    for (int c = 1; c < o->nclasses; c++)
        if (!strcmp(cls[c - 1].name, cls[c].name)) {
            ds_err("class %s is listed twice in the classes", cls[c].name);
            free(cls);
            return -1;
        }

    truth *t = NULL;
    char **names = NULL;
    size_t nt = 0, nn = 0;
    int rc = read_truth(o->labels, o->synsets, &t, &nt);
    if (rc == 0) {
        qsort(t, nt, sizeof *t, cmp_truth_image);
        for (size_t i = 1; i < nt && !rc; i++)
            if (!strcmp(t[i - 1].image, t[i].image))
                rc = ds_err("%s:%zu: image %s is listed again (first on line %zu)", o->labels,
                            t[i - 1].line > t[i].line ? t[i - 1].line : t[i].line, t[i].image,
                            t[i - 1].line < t[i].line ? t[i - 1].line : t[i].line);
    }
    size_t ndirs = 0;
    if (rc == 0) rc = scan_images(o->images, &names, &nn, &ndirs);
    /* The layout some scripts make of the validation set: already one folder per class. */
    if (rc == 0 && nn == 0 && ndirs)
        rc = ds_err("%s holds no images but %zu folders: a validation set already sorted into class folders "
                    "is a class-folder tree (dsplit --val 0 -o DIR %s)", o->images, ndirs, o->images);
    if (rc == 0) rc = match_images(t, nt, names, nn, o->labels, o->images);
    if (rc == 0 && !(v->root = ds_realpath(o->images))) rc = -1;

    if (rc == 0) {
        v->items = ds_xmalloc(nt * sizeof *v->items);
        unsigned char *used = ds_xcalloc((size_t)o->nclasses + 1, 1);
        size_t unknown = 0;
        const truth *first_unknown = NULL;
        for (size_t i = 0; i < nt; i++) {
            class_ref key = {t[i].wnid, 0};
            const class_ref *c = bsearch(&key, cls, (size_t)o->nclasses, sizeof *cls, cmp_class_ref);
            if (!c) {
                if (!unknown++ || t[i].line < first_unknown->line) first_unknown = &t[i];
                continue;
            }
            used[c->label] = 1;
            v->items[v->n].label = c->label;
            v->items[v->n].path = ds_xstrdup(t[i].image);
            v->n++;
        }
        if (unknown && !o->subset)
            rc = ds_err("%s:%zu: %s (image %s) is not one of the %d training classes (%zu images have "
                        "classes outside them)", o->labels, first_unknown->line, first_unknown->wnid,
                        first_unknown->image, o->nclasses, unknown);
        else if (v->n == 0)
            rc = ds_err("%s: no image belongs to one of the %d training classes", o->labels, o->nclasses);
        v->left_out = unknown;
        for (int c = 0; c < o->nclasses; c++) v->unused_classes += !used[c];
        free(used);
        qsort(v->items, v->n, sizeof *v->items, cmp_entry);
    }
    truths_free(t, nt);
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    free(cls);
    if (rc) ds_valset_free(v);
    return rc;
}

void ds_valset_free(ds_valset *v)
{
    for (size_t i = 0; v->items && i < v->n; i++) free(v->items[i].path);
    free(v->items);
    free(v->root);
    memset(v, 0, sizeof *v);
}

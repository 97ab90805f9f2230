#include "manifest.h"
#include "fsutil.h"
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Splits text (NUL-terminated, owned by the caller) into lines in place; returns the count.
 * A final line without '\n' counts; an empty text has no lines. */
static size_t split_lines(char *text, size_t len, char ***lines_out)
{
    size_t n = 0, cap = 1024;
    char **lines = ds_xmalloc(cap * sizeof *lines);
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', end - p);
        if (n == cap) lines = ds_xrealloc(lines, (cap *= 2) * sizeof *lines);
        lines[n++] = p;
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    *lines_out = lines;
    return n;
}

int ds_manifest_parse(ds_manifest *m, const char *text, size_t len, const char *name)
{
    memset(m, 0, sizeof *m);
    if (memchr(text, 0, len)) return ds_err("%s: not a manifest (contains a NUL byte)", name);
    m->text = ds_xmalloc(len + 1);
    memcpy(m->text, text, len);
    m->text[len] = 0;
    char **lines;
    size_t nl = split_lines(m->text, len, &lines);
    size_t hl = strlen(DS_MANIFEST_HEADER);
    if (nl == 0 || strncmp(lines[0], DS_MANIFEST_HEADER, hl) != 0 || lines[0][hl] == 0) {
        free(lines);
        ds_manifest_free(m);
        return ds_err("%s: not a ds manifest (expected a first line '%s<root>')", name, DS_MANIFEST_HEADER);
    }
    m->root = lines[0] + hl;
    m->items = ds_xmalloc((nl ? nl : 1) * sizeof *m->items);
    for (size_t i = 1; i < nl; i++) {
        char *line = lines[i], *tab = strchr(line, '\t'), *endp;
        if (!tab || tab == line) goto bad;
        *tab = 0;
        errno = 0;
        long v = strtol(line, &endp, 10);
        if (errno || *endp || v < 0 || v > INT32_MAX || line[0] == '-' || line[0] == '+' || line[0] == ' ')
            goto bad;
        if (tab[1] == 0) goto bad;
        m->items[m->n].label = (int32_t)v;
        m->items[m->n].path = tab + 1;
        m->n++;
        continue;
    bad:
        free(lines);
        ds_manifest_free(m);
        return ds_err("%s:%zu: malformed line (expected 'label<TAB>path')", name, i + 1);
    }
    free(lines);
    return 0;
}

int ds_manifest_read(ds_manifest *m, const char *file)
{
    size_t len;
    char *text = ds_read_file(file, &len);
    if (!text) {
        memset(m, 0, sizeof *m);
        return -1;
    }
    int rc = ds_manifest_parse(m, text, len, file);
    free(text);
    return rc;
}

void ds_manifest_free(ds_manifest *m)
{
    free(m->items);
    free(m->text);
    memset(m, 0, sizeof *m);
}

int ds_manifest_write(const char *file, const char *root, const ds_manifest_entry *items, size_t n)
{
    ds_atomic a;
    if (ds_atomic_open(&a, file)) return -1;
    fprintf(a.f, "%s%s\n", DS_MANIFEST_HEADER, root);
    for (size_t i = 0; i < n; i++) fprintf(a.f, "%d\t%s\n", items[i].label, items[i].path);
    return ds_atomic_commit(&a);
}

int ds_classes_parse(const char *text, size_t len, const char *name, char ***names_out, int *n_out)
{
    if (memchr(text, 0, len)) return ds_err("%s: not a class list (contains a NUL byte)", name);
    char *copy = ds_xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    char **lines;
    size_t n = split_lines(copy, len, &lines);
    if (n > INT32_MAX) {
        free(lines);
        free(copy);
        return ds_err("%s: too many classes", name);
    }
    char **names = ds_xmalloc((n ? n : 1) * sizeof *names);
    for (size_t i = 0; i < n; i++) {
        if (lines[i][0] == 0) {
            for (size_t j = 0; j < i; j++) free(names[j]);
            free(names);
            free(lines);
            free(copy);
            return ds_err("%s:%zu: empty class name", name, i + 1);
        }
        names[i] = ds_xstrdup(lines[i]);
    }
    free(lines);
    free(copy);
    *names_out = names;
    *n_out = (int)n;
    return 0;
}

int ds_classes_read(const char *file, char ***names, int *n)
{
    size_t len;
    char *text = ds_read_file(file, &len);
    if (!text) return -1;
    int rc = ds_classes_parse(text, len, file, names, n);
    free(text);
    return rc;
}

int ds_classes_write(const char *file, char *const *names, int n)
{
    ds_atomic a;
    if (ds_atomic_open(&a, file)) return -1;
    for (int i = 0; i < n; i++) fprintf(a.f, "%s\n", names[i]);
    return ds_atomic_commit(&a);
}

void ds_classes_free(char **names, int n)
{
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

char *ds_classes_path_for(const char *manifest_file)
{
    const char *slash = strrchr(manifest_file, '/');
    if (!slash) return ds_xstrdup("classes.txt");
    size_t d = slash - manifest_file + 1;
    char *p = ds_xmalloc(d + sizeof "classes.txt");
    memcpy(p, manifest_file, d);
    memcpy(p + d, "classes.txt", sizeof "classes.txt");
    return p;
}

int ds_utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        int more;
        uint32_t cp, min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            more = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            more = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            more = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        s++;
        for (int k = 0; k < more; k++, s++) {
            if ((*s & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
            cp = cp << 6 | (*s & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    }
    return 1;
}

/* json: see json.h. */
#include "json.h"

#include "fsutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ds_json_init(ds_json *j, ds_json_style style)
{
    memset(j, 0, sizeof *j);
    j->style = style;
    j->cap = 256;
    j->buf = ds_xmalloc(j->cap);
    j->buf[0] = 0;
    j->levels = DS_JSON_DEPTH;
    j->count = ds_xmalloc((size_t)j->levels * sizeof *j->count);
}

void ds_json_free(ds_json *j)
{
    free(j->buf);
    free(j->count);
    memset(j, 0, sizeof *j);
}

const char *ds_json_text(const ds_json *j) { return j->buf; }

char *ds_json_release(ds_json *j)
{
    char *s = j->buf;
    j->buf = NULL;
    ds_json_free(j);
    return s;
}

int ds_json_print(ds_json *j, FILE *f)
{
    int rc = fprintf(f, "%s\n", j->buf) < 0 ? -1 : 0;
    ds_json_free(j);
    return rc;
}

static void put(ds_json *j, const char *s, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        while (j->len + n + 1 > j->cap) j->cap *= 2;
        j->buf = ds_xrealloc(j->buf, j->cap);
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = 0;
}

static void puts_(ds_json *j, const char *s) { put(j, s, strlen(s)); }

static void putf(ds_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(ds_json *j, const char *fmt, ...)
{
    char small[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        put(j, small, (size_t)n);
        return;
    }
    char *big = ds_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    put(j, big, (size_t)n);
    free(big);
}

static void quoted(ds_json *j, const char *s)
{
    puts_(j, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': puts_(j, "\\\""); break;
        case '\\': puts_(j, "\\\\"); break;
        case '\n': puts_(j, "\\n"); break;
        case '\t': puts_(j, "\\t"); break;
        case '\r': puts_(j, "\\r"); break;
        default:
            if (*p < 0x20) putf(j, "\\u%04x", *p);
            else put(j, (const char *)p, 1);
        }
    }
    puts_(j, "\"");
}

/* The separator and "key": before a member of the open object (none at the top level). */
static void member(ds_json *j, const char *key)
{
    if (j->depth == 0) return;
    if (j->count[j->depth - 1]++) puts_(j, j->style == DS_JSON_SPACED ? ", " : ",");
    if (key) {
        quoted(j, key);
        puts_(j, j->style == DS_JSON_SPACED ? ": " : ":");
    }
}

void ds_json_begin(ds_json *j, const char *key)
{
    member(j, key);
    puts_(j, "{");
    if (j->depth == j->levels) {   /* one more level than the counts hold */
        j->levels *= 2;
        j->count = ds_xrealloc(j->count, (size_t)j->levels * sizeof *j->count);
    }
    j->count[j->depth++] = 0;
}

void ds_json_end(ds_json *j)
{
    if (j->depth > 0) j->depth--;
    puts_(j, "}");
}

void ds_json_string(ds_json *j, const char *key, const char *value)
{
    member(j, key);
    if (value) quoted(j, value);
    else puts_(j, "null");
}

void ds_json_int(ds_json *j, const char *key, long long value)
{
    member(j, key);
    putf(j, "%lld", value);
}

void ds_json_uint(ds_json *j, const char *key, unsigned long long value)
{
    member(j, key);
    putf(j, "%llu", value);
}

void ds_json_double(ds_json *j, const char *key, double value, const char *fmt)
{
    member(j, key);
    if (!isfinite(value)) puts_(j, "null");
    else putf(j, fmt, value);
}

void ds_json_bool(ds_json *j, const char *key, int value)
{
    member(j, key);
    puts_(j, value ? "true" : "false");
}

void ds_json_null(ds_json *j, const char *key)
{
    member(j, key);
    puts_(j, "null");
}

/* The reader: a flat object of the writer's own making (strings, numbers, true, false,
 * null; nested values are skipped whole). */

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static void put_utf8(ds_json *out, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) b[0] = (char)cp, n = 1;
    else if (cp < 0x800) b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3f)), b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    put(out, b, n);
}

/* A string at p (its opening quote) into out; returns the character after its closing
 * quote, NULL when malformed. */
static const char *read_string(const char *p, ds_json *out)
{
    out->len = 0;
    out->buf[0] = 0;
    for (p++; *p != '"'; p++) {
        if (!*p || (unsigned char)*p < 0x20) return NULL;
        if (*p != '\\') {
            put(out, p, 1);
            continue;
        }
        p++;
        const char *plain = strchr("\"\\/bfnrt", *p);
        if (!*p) return NULL;
        if (plain) {
            static const char real[] = "\"\\/\b\f\n\r\t";
            put(out, &real[plain - "\"\\/bfnrt"], 1);
        } else if (*p == 'u') {
            unsigned cp = 0;
            for (int k = 1; k <= 4; k++) {
                char c = p[k];
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0) return NULL;
                cp = cp * 16 + (unsigned)d;
            }
            put_utf8(out, cp);
            p += 4;
        } else {
            return NULL;
        }
    }
    return p + 1;
}

/* Past one value of any kind at p; NULL when malformed. */
static const char *skip_value(const char *p, ds_json *scratch)
{
    p = skip_space(p);
    if (*p == '"') return read_string(p, scratch);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_space(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"' || !(p = read_string(p, scratch))) return NULL;
                p = skip_space(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = skip_value(p, scratch))) return NULL;
            p = skip_space(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
            p = skip_space(p);
        }
    }
    const char *start = p;
    while (*p && !strchr(",}] \t\r\n", *p)) p++;
    return p > start ? p : NULL;
}

static int literal(const ds_json_value *v, const char *word)
{
    return v->raw_len == strlen(word) && !strncmp(v->raw, word, v->raw_len);
}

int ds_json_read_members(const char *text, ds_json_member_fn fn, void *ctx)
{
    ds_json key, str;
    ds_json_init(&key, DS_JSON_COMPACT);
    ds_json_init(&str, DS_JSON_COMPACT);
    int rc = -1;
    const char *p = skip_space(text);
    if (*p++ != '{') goto done;
    p = skip_space(p);
    if (*p == '}') {
        rc = 0;
        goto done;
    }
    for (;;) {
        if (*p != '"' || !(p = read_string(p, &key))) goto done;
        p = skip_space(p);
        if (*p++ != ':') goto done;
        p = skip_space(p);
        ds_json_value v = {.raw = p};
        const char *end = skip_value(p, &str);
        if (!end) goto done;
        v.raw_len = (size_t)(end - p);
        v.kind = *p == '"' ? DS_JSON_STRING : *p == '{' || *p == '[' ? DS_JSON_NESTED
                 : literal(&v, "true") || literal(&v, "false") ? DS_JSON_BOOL
                 : literal(&v, "null") ? DS_JSON_NULL : DS_JSON_NUMBER;
        if (v.kind == DS_JSON_STRING) v.string = str.buf;
        if (v.kind == DS_JSON_NUMBER) {
            char num[64], *e;
            if (v.raw_len >= sizeof num) goto done;
            memcpy(num, p, v.raw_len);
            num[v.raw_len] = 0;
            v.number = strtod(num, &e);
            if (*e) goto done;
        }
        if (v.kind == DS_JSON_BOOL) v.number = *p == 't';
        int r = fn(ctx, key.buf, &v);
        if (r) {
            rc = r;
            goto done;
        }
        p = skip_space(end);
        if (*p == '}') break;
        if (*p++ != ',') goto done;
        p = skip_space(p);
    }
    rc = *skip_space(p + 1) ? -1 : 0;
done:
    ds_json_free(&key);
    ds_json_free(&str);
    return rc;
}

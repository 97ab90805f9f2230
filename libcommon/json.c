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

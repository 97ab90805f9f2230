/* matfile: a struct array's fields from a level 5 MAT-file (see matfile.h for the format). */
#include "matfile.h"
#include "fsutil.h"
#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Data types of elements (miXXX) and array classes (mxXXX), as MATLAB numbers them. */
enum {
    MI_INT8 = 1, MI_UINT8, MI_INT16, MI_UINT16, MI_INT32, MI_UINT32, MI_SINGLE, MI_DOUBLE = 9,
    MI_INT64 = 12, MI_UINT64, MI_MATRIX, MI_COMPRESSED, MI_UTF8, MI_UTF16, MI_UTF32,
};
enum { MX_STRUCT = 2, MX_CHAR = 4, MX_DOUBLE = 6, MX_UINT64 = 15 };
#define MAT_COMPLEX 0x0800u               /* array flags: has an imaginary part */
#define MAT_HEADER 128
#define MAT_MAX_INFLATED (256u << 20)     /* a compressed variable past this is refused */

typedef struct {
    uint32_t type, size;
    const unsigned char *data;
} element;

typedef struct {
    const unsigned char *p, *end;
    const char *file;
} cursor;

/* A miMATRIX's header: what follows it is left in `rest`. */
typedef struct {
    unsigned cls;
    uint32_t flags;
    size_t numel;
    int32_t dims[2];
    int ndims;
    const unsigned char *name;
    size_t name_len;
    cursor rest;
} matrix;

static uint32_t rd32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t mi_size(uint32_t type)
{
    switch (type) {
    case MI_INT8: case MI_UINT8: case MI_UTF8: return 1;
    case MI_INT16: case MI_UINT16: case MI_UTF16: return 2;
    case MI_INT32: case MI_UINT32: case MI_SINGLE: case MI_UTF32: return 4;
    case MI_DOUBLE: case MI_INT64: case MI_UINT64: return 8;
    default: return 0;
    }
}

/* Element i of numeric data as a double (i is in range: the caller checked the size). */
static double mi_value(const element *e, size_t i)
{
    const unsigned char *p = e->data + i * mi_size(e->type);
    uint64_t u = 0;
    for (size_t b = mi_size(e->type); b-- > 0;) u = u << 8 | p[b];
    switch (e->type) {
    case MI_INT8: return (int8_t)u;
    case MI_UINT8: return (uint8_t)u;
    case MI_INT16: return (int16_t)u;
    case MI_UINT16: return (uint16_t)u;
    case MI_INT32: return (int32_t)u;
    case MI_UINT32: return (uint32_t)u;
    case MI_INT64: return (double)(int64_t)u;
    case MI_UINT64: return (double)u;
    case MI_SINGLE: { uint32_t w = (uint32_t)u; float f; memcpy(&f, &w, 4); return f; }
    default: { double d; memcpy(&d, &u, 8); return d; }
    }
}

/* The element at c->p, moved past with its padding. The small form holds up to 4 bytes in
 * the tag's second word; a compressed element is not padded. */
static int next_element(cursor *c, element *e, const char *what)
{
    size_t left = (size_t)(c->end - c->p);
    if (left < 8) return ds_err("%s: truncated %s (%zu bytes left, a tag needs 8)", c->file, what, left);
    uint32_t w = rd32(c->p);
    if (w >> 16) {
        e->type = w & 0xffff;
        e->size = w >> 16;
        if (e->size > 4) return ds_err("%s: malformed %s (a small element of %u bytes)", c->file, what, e->size);
        e->data = c->p + 4;
        c->p += 8;
        return 0;
    }
    e->type = w;
    e->size = rd32(c->p + 4);
    e->data = c->p + 8;
    if (e->size > left - 8)
        return ds_err("%s: truncated %s (%u bytes announced, %zu left)", c->file, what, e->size, left - 8);
    size_t step = 8 + (size_t)e->size;
    if (e->type != MI_COMPRESSED) step = (step + 7) & ~(size_t)7;
    c->p += step < left ? step : left;
    return 0;
}

static int parse_matrix(const element *e, const char *file, const char *what, matrix *m)
{
    memset(m, 0, sizeof *m);
    cursor c = {e->data, e->data + e->size, file};
    element flags, dims, name;
    if (next_element(&c, &flags, what)) return -1;
    if (flags.type != MI_UINT32 || flags.size != 8)
        return ds_err("%s: malformed %s (array flags of type %u, %u bytes)", file, what, flags.type, flags.size);
    m->flags = rd32(flags.data);
    m->cls = m->flags & 0xff;
    if (next_element(&c, &dims, what)) return -1;
    if (dims.type != MI_INT32 || dims.size < 8 || dims.size % 4)
        return ds_err("%s: malformed %s (dimensions of type %u, %u bytes)", file, what, dims.type, dims.size);
    m->ndims = (int)(dims.size / 4);
    m->numel = 1;
    for (int d = 0; d < m->ndims; d++) {
        int32_t v = (int32_t)rd32(dims.data + 4 * d);
        if (v < 0) return ds_err("%s: malformed %s (dimension %d is %d)", file, what, d + 1, v);
        if (d < 2) m->dims[d] = v;
        if (v && m->numel > ((size_t)1 << 40) / (size_t)v)
            return ds_err("%s: malformed %s (too many elements)", file, what);
        m->numel *= (size_t)v;
    }
    if (next_element(&c, &name, what)) return -1;
    if (name.type != MI_INT8 && name.type != MI_UINT8)
        return ds_err("%s: malformed %s (array name of type %u)", file, what, name.type);
    m->name = name.data;
    m->name_len = name.size;
    m->rest = c;
    return 0;
}

/* The next element of a struct, which must be an array; an empty one (no bytes) is allowed. */
static int next_field(cursor *c, element *e, const char *what)
{
    if (next_element(c, e, what)) return -1;
    if (e->type != MI_MATRIX)
        return ds_err("%s: malformed %s (element of type %u, not an array)", c->file, what, e->type);
    return 0;
}

static int read_number(const element *e, const char *file, const char *what, int64_t *out)
{
    matrix m;
    element re;
    if (e->size == 0) return ds_err("%s: %s is empty, not a number", file, what);
    if (parse_matrix(e, file, what, &m)) return -1;
    if (m.cls < MX_DOUBLE || m.cls > MX_UINT64 || (m.flags & MAT_COMPLEX))
        return ds_err("%s: %s is not a real number (array class %u)", file, what, m.cls);
    if (m.numel != 1) return ds_err("%s: %s holds %zu values, not one", file, what, m.numel);
    if (next_element(&m.rest, &re, what)) return -1;
    if (!mi_size(re.type) || re.type >= MI_UTF8 || re.size != mi_size(re.type))
        return ds_err("%s: malformed %s (data of type %u, %u bytes)", file, what, re.type, re.size);
    double v = mi_value(&re, 0);
    if (!(fabs(v) <= 9007199254740992.0) || v != floor(v)) return ds_err("%s: %s is %g, not an integer", file, what, v);
    *out = (int64_t)v;
    return 0;
}

static int read_string(const element *e, const char *file, const char *what, char **out)
{
    matrix m;
    element d;
    if (e->size == 0) {   /* an empty field written without a header */
        *out = ds_xstrdup("");
        return 0;
    }
    if (parse_matrix(e, file, what, &m)) return -1;
    if (m.cls != MX_CHAR) return ds_err("%s: %s is not a string (array class %u)", file, what, m.cls);
    if (m.numel && (m.ndims != 2 || m.dims[0] != 1))
        return ds_err("%s: %s is not a one-row string (%d x %d)", file, what, m.dims[0], m.dims[1]);
    if (next_element(&m.rest, &d, what)) return -1;
    size_t w = d.type == MI_UTF8 || d.type == MI_INT8 || d.type == MI_UINT8 ? 1
               : d.type == MI_UTF16 || d.type == MI_UINT16                   ? 2 : 0;
    if (!w || d.size != m.numel * w)
        return ds_err("%s: malformed %s (%zu characters in %u bytes of type %u)", file, what, m.numel, d.size, d.type);
    char *s = ds_xmalloc(m.numel + 1);
    for (size_t i = 0; i < m.numel; i++) {
        unsigned ch = w == 1 ? d.data[i] : d.data[2 * i] | (unsigned)d.data[2 * i + 1] << 8;
        if (ch == 0 || ch > 127) {
            free(s);
            return ds_err("%s: %s has a character %u that is not ASCII", file, what, ch);
        }
        s[i] = (char)ch;
    }
    s[m.numel] = 0;
    *out = s;
    return 0;
}

typedef struct {
    const char *var, *num_field, *str_field;
    ds_mat_row *rows;
    size_t n;
    int found;
} query;

static int read_struct(const matrix *m, const char *file, query *q)
{
    char what[160];
    cursor c = m->rest;
    element len_e, names;
    snprintf(what, sizeof what, "variable '%s'", q->var);
    if (next_element(&c, &len_e, what)) return -1;
    if (len_e.type != MI_INT32 || len_e.size != 4) return ds_err("%s: malformed %s (field name length)", file, what);
    uint32_t flen = rd32(len_e.data);
    if (next_element(&c, &names, what)) return -1;
    if (flen == 0 || flen > 4096 || names.type != MI_INT8 || names.size % flen)
        return ds_err("%s: malformed %s (field names of %u bytes, %u each)", file, what, names.size, flen);
    size_t nfields = names.size / flen;
    long inum = -1, istr = -1;
    for (size_t f = 0; f < nfields; f++) {
        const char *fn = (const char *)names.data + f * flen;
        size_t l = strnlen(fn, flen);
        if (l == strlen(q->num_field) && !memcmp(fn, q->num_field, l)) inum = (long)f;
        if (l == strlen(q->str_field) && !memcmp(fn, q->str_field, l)) istr = (long)f;
    }
    if (inum < 0 || istr < 0)
        return ds_err("%s: %s has no field '%s'", file, what, inum < 0 ? q->num_field : q->str_field);
    /* Every field of every element takes at least a tag: a count the bytes cannot hold is a lie. */
    if (nfields && m->numel > (size_t)(c.end - c.p) / 8 / nfields)
        return ds_err("%s: truncated %s (%zu elements announced)", file, what, m->numel);
    q->rows = ds_xmalloc((m->numel ? m->numel : 1) * sizeof *q->rows);
    for (size_t i = 0; i < m->numel; i++) {
        q->rows[i].str = NULL;
        for (size_t f = 0; f < nfields; f++) {
            element e;
            char fwhat[256];
            snprintf(fwhat, sizeof fwhat, "%s(%zu).%s", q->var, i + 1, (long)f == inum ? q->num_field
                                                                     : (long)f == istr ? q->str_field : "(field)");
            int rc = next_field(&c, &e, fwhat);
            if (!rc && (long)f == inum) rc = read_number(&e, file, fwhat, &q->rows[i].num);
            if (!rc && (long)f == istr) rc = read_string(&e, file, fwhat, &q->rows[i].str);
            if (rc) {
                ds_mat_rows_free(q->rows, i + 1);
                q->rows = NULL;
                return -1;
            }
        }
    }
    q->n = m->numel;
    q->found = 1;
    return 0;
}

static int visit_variable(const element *e, const char *file, query *q)
{
    matrix m;
    if (parse_matrix(e, file, "variable", &m)) return -1;
    if (m.name_len != strlen(q->var) || memcmp(m.name, q->var, m.name_len)) return 0;
    if (m.cls != MX_STRUCT) return ds_err("%s: variable '%s' is not a struct array (class %u)", file, q->var, m.cls);
    return read_struct(&m, file, q);
}

/* A miCOMPRESSED element holds one zlib stream that inflates to further elements. */
static int visit_compressed(const element *e, const char *file, query *q)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) return ds_err("%s: zlib: cannot start inflating", file);
    size_t cap = (size_t)e->size * 4 + 1024, len = 0;
    unsigned char *out = ds_xmalloc(cap);
    z.next_in = (unsigned char *)e->data;
    z.avail_in = e->size;
    int zr = Z_OK;
    while (zr == Z_OK) {
        if (len == cap) {
            if (cap >= MAT_MAX_INFLATED) break;
            cap = cap * 2 < MAT_MAX_INFLATED ? cap * 2 : MAT_MAX_INFLATED;
            out = ds_xrealloc(out, cap);
        }
        z.next_out = out + len;
        z.avail_out = (uInt)(cap - len);
        zr = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
    }
    inflateEnd(&z);
    int rc = 0;
    if (zr != Z_STREAM_END) {
        rc = zr == Z_OK ? ds_err("%s: a compressed variable inflates past %u MiB", file, MAT_MAX_INFLATED >> 20)
                        : ds_err("%s: corrupt or truncated compressed variable (zlib: %s)", file,
                                 z.msg ? z.msg : zr == Z_BUF_ERROR ? "unexpected end of data" : "error");
    }
    cursor c = {out, out + len, file};
    while (rc == 0 && c.p < c.end && !q->found) {
        element inner;
        rc = next_element(&c, &inner, "compressed variable");
        if (rc == 0 && inner.type == MI_MATRIX) rc = visit_variable(&inner, file, q);
    }
    free(out);
    return rc;
}

int ds_mat_is_matfile(const unsigned char *buf, size_t len)
{
    static const char magic[] = "MATLAB 5.0 MAT-file";
    return len >= sizeof magic - 1 && !memcmp(buf, magic, sizeof magic - 1);
}

int ds_mat_parse_struct(const unsigned char *buf, size_t len, const char *name, const char *var,
                        const char *num_field, const char *str_field, ds_mat_row **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    if (!ds_mat_is_matfile(buf, len))
        return ds_err("%s: not a MATLAB level 5 MAT-file (no 'MATLAB 5.0 MAT-file' header; "
                      "a v7.3 file is HDF5: save it again with -v7)", name);
    if (len < MAT_HEADER) return ds_err("%s: truncated MAT-file header (%zu bytes)", name, len);
    if (buf[126] == 'M' && buf[127] == 'I') return ds_err("%s: a big-endian MAT-file is not supported", name);
    if (buf[126] != 'I' || buf[127] != 'M' || buf[124] != 0 || buf[125] != 1)
        return ds_err("%s: not a level 5 MAT-file (version or endian mark wrong)", name);
    query q = {.var = var, .num_field = num_field, .str_field = str_field};
    cursor c = {buf + MAT_HEADER, buf + len, name};
    int rc = 0;
    while (rc == 0 && c.p < c.end && !q.found) {
        element e;
        rc = next_element(&c, &e, "variable");
        if (rc == 0 && e.type == MI_MATRIX) rc = visit_variable(&e, name, &q);
        if (rc == 0 && e.type == MI_COMPRESSED) rc = visit_compressed(&e, name, &q);
    }
    if (rc == 0 && !q.found) rc = ds_err("%s: no variable '%s'", name, var);
    if (rc) return -1;
    *rows = q.rows;
    *n = q.n;
    return 0;
}

int ds_mat_read_struct(const char *file, const char *var, const char *num_field, const char *str_field,
                       ds_mat_row **rows, size_t *n)
{
    size_t len;
    *rows = NULL;
    *n = 0;
    char *buf = ds_read_file(file, &len);
    if (!buf) return -1;
    int rc = ds_mat_parse_struct((const unsigned char *)buf, len, file, var, num_field, str_field, rows, n);
    free(buf);
    return rc;
}

void ds_mat_rows_free(ds_mat_row *rows, size_t n)
{
    if (!rows) return;
    for (size_t i = 0; i < n; i++) free(rows[i].str);
    free(rows);
}

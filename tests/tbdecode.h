/* tbdecode.h: a reader of TensorBoard event files for the tests (test_tbevents,
 * drivers/tbevents_dump), written from the formats alone and sharing no code with
 * libcommon/tbevents.c: its CRC-32C is the bit-at-a-time loop, not the writer's table.
 *
 * A file is a TFRecord stream (uint64 length, uint32 masked CRC32C of the length's 8 bytes,
 * data, uint32 masked CRC32C of the data; little-endian); each record's data is a
 * tensorflow.Event: wall_time (1, double), step (2, int64), file_version (3, string), summary
 * (5: Summary { repeated Value value = 1 { string tag = 1; float simple_value = 2; } }),
 * session_log (7: SessionLog { status = 1 }; 6 is the deprecated log_message). Fields the reader does not know are skipped by
 * their wire type, as protobuf does; a known field of the wrong wire type is an error. */
#ifndef DS_TBDECODE_H
#define DS_TBDECODE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TBD_MAX_VALUES 32

typedef struct {
    char tag[256];
    float value;
} tbd_value;

typedef struct {
    int has_wall_time;
    double wall_time;
    int64_t step;                 /* 0 when absent, as proto3 */
    char file_version[64];        /* "" when absent */
    int session_status;           /* -1: no session_log; else its status (1: START) */
    int nvalues;
    tbd_value values[TBD_MAX_VALUES];
} tbd_event;

typedef struct {
    FILE *f;
    long offset;      /* of the next record */
    int index;        /* of the next record, from 0 */
    char err[256];    /* the reason of the last -1 */
} tbd_reader;

static inline uint32_t tbd_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static inline uint32_t tbd_masked_crc(const uint8_t *p, size_t n)
{
    uint32_t c = tbd_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static inline uint64_t tbd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A protobuf message being read: [p, end). */
typedef struct {
    const uint8_t *p, *end;
} tbd_buf;

static inline int tbd_varint(tbd_buf *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* The next field: its number, wire type, and for wire type 2 its bytes in *sub, for 0 its
 * value in *v, for 1 and 5 its bits in *v. */
static inline int tbd_field(tbd_buf *b, int *field, int *wire, uint64_t *v, tbd_buf *sub)
{
    uint64_t key;
    if (tbd_varint(b, &key)) return -1;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return tbd_varint(b, v);
    case 1:
    case 5: {
        int n = *wire == 1 ? 8 : 4;
        if (b->end - b->p < n) return -1;
        *v = tbd_le(b->p, n);
        b->p += n;
        return 0;
    }
    case 2:
        if (tbd_varint(b, v) || *v > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return 0;
    default: return -1;
    }
}

static inline int tbd_fail(tbd_reader *r, const char *what)
{
    snprintf(r->err, sizeof r->err, "record %d (byte %ld): %s", r->index, r->offset, what);
    return -1;
}

static inline int tbd_value_parse(tbd_reader *r, tbd_buf b, tbd_value *out)
{
    out->tag[0] = 0;
    out->value = 0;
    while (b.p < b.end) {
        int field, wire;
        uint64_t v;
        tbd_buf sub;
        if (tbd_field(&b, &field, &wire, &v, &sub)) return tbd_fail(r, "a Summary.Value that does not parse");
        if (field == 1) {
            if (wire != 2 || v >= sizeof out->tag) return tbd_fail(r, "a bad Summary.Value.tag");
            memcpy(out->tag, sub.p, v);
            out->tag[v] = 0;
        } else if (field == 2) {
            if (wire != 5) return tbd_fail(r, "Summary.Value.simple_value is not a fixed32");
            uint32_t bits = (uint32_t)v;
            memcpy(&out->value, &bits, sizeof bits);
        }
    }
    return 0;
}

static inline int tbd_event_parse(tbd_reader *r, tbd_buf b, tbd_event *e)
{
    memset(e, 0, sizeof *e);
    e->session_status = -1;
    while (b.p < b.end) {
        int field, wire;
        uint64_t v;
        tbd_buf sub;
        if (tbd_field(&b, &field, &wire, &v, &sub)) return tbd_fail(r, "an Event that does not parse");
        if (field == 1) {
            if (wire != 1) return tbd_fail(r, "Event.wall_time is not a fixed64");
            memcpy(&e->wall_time, &v, sizeof v);
            e->has_wall_time = 1;
        } else if (field == 2) {
            if (wire != 0) return tbd_fail(r, "Event.step is not a varint");
            e->step = (int64_t)v;
        } else if (field == 3) {
            if (wire != 2 || v >= sizeof e->file_version) return tbd_fail(r, "a bad Event.file_version");
            memcpy(e->file_version, sub.p, v);
            e->file_version[v] = 0;
        } else if (field == 5) {
            if (wire != 2) return tbd_fail(r, "Event.summary is not a message");
            while (sub.p < sub.end) {
                int f2, w2;
                uint64_t v2;
                tbd_buf val;
                if (tbd_field(&sub, &f2, &w2, &v2, &val)) return tbd_fail(r, "a Summary that does not parse");
                if (f2 != 1) continue;
                if (w2 != 2) return tbd_fail(r, "Summary.value is not a message");
                if (e->nvalues == TBD_MAX_VALUES) return tbd_fail(r, "more values than this reader holds");
                if (tbd_value_parse(r, val, &e->values[e->nvalues++])) return -1;
            }
        } else if (field == 7) {
            if (wire != 2) return tbd_fail(r, "Event.session_log is not a message");
            e->session_status = 0;
            while (sub.p < sub.end) {
                int f2, w2;
                uint64_t v2;
                tbd_buf s2;
                if (tbd_field(&sub, &f2, &w2, &v2, &s2)) return tbd_fail(r, "a SessionLog that does not parse");
                if (f2 == 1 && w2 == 0) e->session_status = (int)v2;
            }
        }
    }
    return 0;
}

static inline void tbd_open(tbd_reader *r, FILE *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
}

/* The next record: 1 with *e, 0 at the end of the file, -1 with r->err (a CRC that does not
 * match, a record cut short, data that does not parse). */
static inline int tbd_next(tbd_reader *r, tbd_event *e)
{
    uint8_t head[12], tail[4];
    size_t got = fread(head, 1, sizeof head, r->f);
    if (got == 0) return 0;
    if (got != sizeof head) return tbd_fail(r, "the file ends inside a record's header");
    if ((uint32_t)tbd_le(head + 8, 4) != tbd_masked_crc(head, 8)) return tbd_fail(r, "the length's CRC does not match");
    uint64_t n = tbd_le(head, 8);
    if (n > (1u << 26)) return tbd_fail(r, "a record longer than 64 MiB");
    uint8_t *data = malloc(n ? n : 1);
    if (!data) return tbd_fail(r, "out of memory");
    if (fread(data, 1, n, r->f) != n || fread(tail, 1, 4, r->f) != 4) {
        free(data);
        return tbd_fail(r, "the file ends inside a record");
    }
    int rc = 0;
    if ((uint32_t)tbd_le(tail, 4) != tbd_masked_crc(data, n)) rc = tbd_fail(r, "the data's CRC does not match");
    else rc = tbd_event_parse(r, (tbd_buf){data, data + n}, e);
    free(data);
    if (rc) return -1;
    r->offset += 16 + (long)n;
    r->index++;
    return 1;
}

#endif

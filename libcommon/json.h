/* json: one writer for every JSON text ds prints or writes (git's json-writer): --json
 * results, the `config` attributes of shards and checkpoints, metrics.jsonl rows.
 *
 * A text is built in a growing buffer, object by object, key by key; strings are escaped
 * (quote, backslash, control characters), a non-finite number is written as null (JSON
 * has no NaN), and the separators follow the text's style: ", " and ": " for what people
 * read (--json, config), "," and ":" for metrics.jsonl rows. Numbers are written with the
 * precision the caller names, so a field keeps its format wherever it is written.
 *
 *     ds_json j;
 *     ds_json_init(&j, DS_JSON_SPACED);
 *     ds_json_begin(&j, NULL);
 *     ds_json_double(&j, "top1", 0.75, "%.6f");
 *     ds_json_string(&j, "protocol", name);
 *     ds_json_end(&j);
 *     puts(ds_json_text(&j));
 *     ds_json_free(&j); */
#ifndef DS_JSON_H
#define DS_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { DS_JSON_SPACED, DS_JSON_COMPACT } ds_json_style;

/* Levels the counts hold at first; they grow with deeper nesting. */
#define DS_JSON_DEPTH 8

typedef struct {
    char *buf;
    size_t len, cap;
    ds_json_style style;
    int depth;                  /* objects open */
    int levels;                 /* entries in count */
    int *count;                 /* members written so far at each open level */
} ds_json;

void ds_json_init(ds_json *j, ds_json_style style);
void ds_json_free(ds_json *j);
/* The text so far (NUL-terminated; owned by j). */
const char *ds_json_text(const ds_json *j);
/* The text, handed to the caller (free it); j is left empty. */
char *ds_json_release(ds_json *j);
/* Prints the text and a newline to f (a --json result), then frees j; -1 when f fails. */
int ds_json_print(ds_json *j, FILE *f);

/* An object: at the top level (key NULL) or as the value of key in the open object. */
void ds_json_begin(ds_json *j, const char *key);
void ds_json_end(ds_json *j);
/* Members of the open object. */
void ds_json_string(ds_json *j, const char *key, const char *value);   /* NULL: null */
void ds_json_int(ds_json *j, const char *key, long long value);
void ds_json_uint(ds_json *j, const char *key, unsigned long long value);
/* fmt: one printf conversion of a double ("%.6f", "%.6g", "%.17g"); non-finite: null. */
void ds_json_double(ds_json *j, const char *key, double value, const char *fmt);
void ds_json_bool(ds_json *j, const char *key, int value);
void ds_json_null(ds_json *j, const char *key);

/* Reading a JSON object back (a `config` attribute, a metrics row): fn is called for each
 * member in order with its key and value; a nested object or array is passed whole, as
 * DS_JSON_NESTED, its text in raw. The pointers are valid during the call only. Returns 0,
 * -1 when the text is not one JSON object, or fn's first non-zero return. */
typedef enum { DS_JSON_STRING, DS_JSON_NUMBER, DS_JSON_BOOL, DS_JSON_NULL, DS_JSON_NESTED } ds_json_kind;
typedef struct {
    ds_json_kind kind;
    const char *raw;       /* the value's text as written, raw_len bytes (a string with its quotes) */
    size_t raw_len;
    const char *string;    /* DS_JSON_STRING: the unescaped value */
    double number;         /* DS_JSON_NUMBER: its value; DS_JSON_BOOL: 1 or 0 */
} ds_json_value;
typedef int (*ds_json_member_fn)(void *ctx, const char *key, const ds_json_value *v);
int ds_json_read_members(const char *text, ds_json_member_fn fn, void *ctx);

#endif

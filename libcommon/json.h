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

#endif

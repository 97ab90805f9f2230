/* json: the one writer of every JSON text (json.h): separators per style, nesting, string
 * escaping, numbers at the precision asked, non-finite numbers as null, texts that
 * outgrow the first buffer, and nesting deeper than the first counts hold; and the reader
 * of an object's members, which gives back what the writer wrote and refuses what is not
 * one JSON object. */
#include "../check.h"
#include "json.h"

#include <math.h>
#include <string.h>

/* The members a read gave, as "key=kind:value;" (strings unescaped, numbers as %.17g,
 * nested values as their text). */
static int collect(void *ctx, const char *key, const ds_json_value *v)
{
    char *out = ctx;
    size_t n = strlen(out);
    switch (v->kind) {
    case DS_JSON_STRING: snprintf(out + n, 4096 - n, "%s=s:%s;", key, v->string); break;
    case DS_JSON_NUMBER: snprintf(out + n, 4096 - n, "%s=n:%.17g;", key, v->number); break;
    case DS_JSON_BOOL: snprintf(out + n, 4096 - n, "%s=b:%g;", key, v->number); break;
    case DS_JSON_NULL: snprintf(out + n, 4096 - n, "%s=null;", key); break;
    case DS_JSON_NESTED: snprintf(out + n, 4096 - n, "%s=o:%.*s;", key, (int)v->raw_len, v->raw); break;
    }
    return 0;
}

static int stop_at_b(void *ctx, const char *key, const ds_json_value *v)
{
    (void)v;
    (*(int *)ctx)++;
    return strcmp(key, "b") ? 0 : 7;
}

static void test_reader(void)
{
    /* what the writer wrote comes back, member by member */
    ds_json j;
    ds_json_init(&j, DS_JSON_SPACED);
    ds_json_begin(&j, NULL);
    ds_json_string(&j, "path", "a\"b\\c\nd\te\x01/é");
    ds_json_double(&j, "lr", 0.1, "%.17g");
    ds_json_int(&j, "seed", -42);
    ds_json_bool(&j, "on", 1);
    ds_json_bool(&j, "off", 0);
    ds_json_string(&j, "none", NULL);
    ds_json_begin(&j, "inner");
    ds_json_string(&j, "x", "}],");
    ds_json_end(&j);
    ds_json_int(&j, "after", 3);
    ds_json_end(&j);
    char got[4096] = "";
    int rc = ds_json_read_members(ds_json_text(&j), collect, got);
    check_begin("json_reader_reads_the_writer");
    CHECK(rc == 0, "rc %d", rc);
    CHECK(!strcmp(got, "path=s:a\"b\\c\nd\te\x01/é;lr=n:0.10000000000000001;seed=n:-42;on=b:1;off=b:0;none=null;"
                       "inner=o:{\"x\": \"}],\"};after=n:3;"),
          "got %s", got);
    check_end();
    ds_json_free(&j);

    check_begin("json_reader_refuses_what_is_no_object");
    const char *bad[] = {"", "[]", "{", "{\"a\"}", "{\"a\": }", "{\"a\": 1,}", "{\"a\": 1} x", "{\"a\": \"b}",
                         "{\"a\": \"\\q\"}", "{a: 1}", "{\"a\": 1 \"b\": 2}", "{\"a\": {\"b\": 1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ignored[4096] = "";
        CHECK(ds_json_read_members(bad[i], collect, ignored) == -1, "'%s' read as %s", bad[i], ignored);
    }
    char empty[4096] = "";
    CHECK(ds_json_read_members(" { } ", collect, empty) == 0 && !empty[0], "the empty object: %s", empty);
    check_end();

    check_begin("json_reader_stops_where_told");
    int seen = 0;
    CHECK(ds_json_read_members("{\"a\": 1, \"b\": 2, \"c\": 3}", stop_at_b, &seen) == 7 && seen == 2,
          "seen %d", seen);
    check_end();
}

static void expect(const char *name, const char *got, const char *want)
{
    check_begin(name);
    CHECK(!strcmp(got, want), "got  %s\n  want %s", got, want);
    check_end();
}

int main(void)
{
    ds_json j;
    ds_json_init(&j, DS_JSON_SPACED);
    ds_json_begin(&j, NULL);
    ds_json_string(&j, "path", "a\"b\\c\nd\te\x01");
    ds_json_int(&j, "n", -3);
    ds_json_uint(&j, "u", 18446744073709551615ull);
    ds_json_double(&j, "x", 0.25, "%.6f");
    ds_json_double(&j, "nan", NAN, "%.6f");
    ds_json_double(&j, "inf", -INFINITY, "%.6g");
    ds_json_bool(&j, "yes", 1);
    ds_json_string(&j, "none", NULL);
    ds_json_begin(&j, "inner");
    ds_json_begin(&j, "deeper");
    ds_json_end(&j);
    ds_json_null(&j, "z");
    ds_json_end(&j);
    ds_json_end(&j);
    expect("json_spaced_escaped_nested", ds_json_text(&j),
           "{\"path\": \"a\\\"b\\\\c\\nd\\te\\u0001\", \"n\": -3, \"u\": 18446744073709551615, \"x\": 0.250000, "
           "\"nan\": null, \"inf\": null, \"yes\": true, \"none\": null, \"inner\": {\"deeper\": {}, \"z\": null}}");
    ds_json_free(&j);

    ds_json_init(&j, DS_JSON_COMPACT);
    ds_json_begin(&j, NULL);
    ds_json_int(&j, "step", 12);
    ds_json_double(&j, "epoch", 1.5, "%.4f");
    ds_json_begin(&j, "standard");
    ds_json_double(&j, "top1", 0.5, "%.6f");
    ds_json_end(&j);
    ds_json_end(&j);
    expect("json_compact_rows", ds_json_text(&j), "{\"step\":12,\"epoch\":1.5000,\"standard\":{\"top1\":0.500000}}");
    ds_json_free(&j);

    /* past the first buffer (256 bytes) and past the 64-byte number buffer */
    ds_json_init(&j, DS_JSON_COMPACT);
    ds_json_begin(&j, NULL);
    char key[16], want[8192] = "{";
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ds_json_int(&j, key, i);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s\"k%d\":%d", i ? "," : "", i, i);
    }
    ds_json_double(&j, "big", 1e300, "%.0f");
    ds_json_end(&j);
    char *text = ds_json_release(&j);
    check_begin("json_grows");
    CHECK(!strncmp(text, want, strlen(want)) && strlen(text) > 300 + strlen(want) && text[strlen(text) - 1] == '}',
          "%.80s...", text);
    check_end();
    free(text);

    /* deeper than DS_JSON_DEPTH levels: the writer keeps its own bookkeeping; a guard laid
     * right after the writer catches a write past it */
    struct {
        ds_json j;
        unsigned char guard[256];
    } g;
    memset(g.guard, 0xa5, sizeof g.guard);
    ds_json_init(&g.j, DS_JSON_COMPACT);
    ds_json_begin(&g.j, NULL);
    char deep_want[1024] = "{";
    enum { LEVELS = 3 * DS_JSON_DEPTH };
    for (int i = 0; i < LEVELS; i++) {
        ds_json_int(&g.j, "a", i);
        ds_json_begin(&g.j, "o");
        snprintf(deep_want + strlen(deep_want), sizeof deep_want - strlen(deep_want), "\"a\":%d,\"o\":{", i);
    }
    ds_json_int(&g.j, "b", 1);
    strcat(deep_want, "\"b\":1");
    for (int i = 0; i < LEVELS; i++) {
        ds_json_end(&g.j);
        ds_json_int(&g.j, "c", i);
        strcat(deep_want, "},\"c\":");
        snprintf(deep_want + strlen(deep_want), sizeof deep_want - strlen(deep_want), "%d", i);
    }
    ds_json_end(&g.j);
    strcat(deep_want, "}");
    int guard_ok = 1;
    for (size_t i = 0; i < sizeof g.guard; i++) guard_ok &= g.guard[i] == 0xa5;
    check_begin("json_nests_past_depth");
    CHECK(guard_ok, "a write past the writer's struct (nesting %d levels)", LEVELS);
    CHECK(!strcmp(ds_json_text(&g.j), deep_want), "got  %s\n  want %s", ds_json_text(&g.j), deep_want);
    check_end();
    ds_json_free(&g.j);
    test_reader();
    return check_exit();
}

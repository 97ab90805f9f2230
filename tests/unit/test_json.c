/* json: the one writer of every JSON text (json.h): separators per style, nesting, string
 * escaping, numbers at the precision asked, non-finite numbers as null, texts that
 * outgrow the first buffer, and nesting deeper than the first counts hold. */
#include "../check.h"
#include "json.h"

#include <math.h>
#include <string.h>

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
    return check_exit();
}

/* json: the one writer of every JSON text (json.h): separators per style, nesting, string
 * escaping, numbers at the precision asked, non-finite numbers as null, and texts that
 * outgrow the first buffer. */
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
    return check_exit();
}

/* libFuzzer entry point over the split-file parsers: the same bytes as a manifest
 * (ds_manifest_parse) and as a class list (ds_classes_parse). What a parser accepts must
 * hold its promises: a non-empty root, labels >= 0, non-empty paths and class names, none
 * holding a newline; what it refuses it must free (LeakSanitizer watches). The refusal
 * messages go to stderr, which scripts/fuzz.sh closes for this harness. */
#include "manifest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    ds_manifest m;
    if (ds_manifest_parse(&m, text, size, "fuzz") == 0) {
        if (!m.root || !m.root[0] || strchr(m.root, '\n')) abort();
        if (m.n > size) abort();
        for (size_t i = 0; i < m.n; i++)
            if (m.items[i].label < 0 || !m.items[i].path || !m.items[i].path[0] || strchr(m.items[i].path, '\n'))
                abort();
        ds_manifest_free(&m);
    }
    char **names;
    int n;
    if (ds_classes_parse(text, size, "fuzz", &names, &n) == 0) {
        if (n < 0 || (size_t)n > size) abort();
        for (int i = 0; i < n; i++)
            if (!names[i] || !names[i][0] || strchr(names[i], '\n')) abort();
        ds_classes_free(names, n);
    }
    return 0;
}

/* The manifest and class-list parsers: round trip, refusal of malformed input with a
 * message naming the file and line, and a replay of the fuzzing corpus. */
#include "../check.h"
#include "../fuzz/fuzz_manifest.c" /* LLVMFuzzerTestOneInput: the fuzzer's own checks */
#include "fsutil.h"
#include "manifest.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

/* Every input the fuzzer kept goes through both parsers with the harness's checks (which
 * abort on a broken promise); the SAN build of this test checks memory and leaks too. */
static void test_fuzz_corpus(void)
{
    check_begin("fuzz_corpus_replay");
    const char *root = getenv("DS_ROOT") ? getenv("DS_ROOT") : ".";
    char *dir = ds_path_join(root, "tests/fuzz/corpus/manifest");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    int files = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = ds_path_join(dir, e->d_name);
        size_t len;
        char *text = ds_read_file(p, &len);
        CHECK(text != NULL, "cannot read %s", p);
        if (text) LLVMFuzzerTestOneInput((const uint8_t *)text, len);
        free(text);
        free(p);
        files++;
    }
    if (d) closedir(d);
    CHECK(files >= 5, "only %d corpus files in %s", files, dir);
    free(dir);
    check_end();
}

static int parses(const char *text)
{
    ds_manifest m;
    int rc = ds_manifest_parse(&m, text, strlen(text), "test");
    if (rc == 0) ds_manifest_free(&m);
    return rc == 0;
}

int main(void)
{
    char dir[] = "/tmp/ds-manifest-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char *file = ds_path_join(dir, "train.txt");

    check_begin("manifest round trip");
    ds_manifest_entry e[3] = {{0, "a/x 1.jpg"}, {0, "a/y.JPEG"}, {2, "c/\xc3\xa9t\xc3\xa9.png"}};
    CHECK(ds_manifest_write(file, "/data/my root", e, 3) == 0, "write");
    ds_manifest m;
    CHECK(ds_manifest_read(&m, file) == 0, "read");
    CHECK(m.n == 3, "n = %zu", m.n);
    CHECK(strcmp(m.root, "/data/my root") == 0, "root '%s'", m.root);
    for (size_t i = 0; i < m.n && i < 3; i++)
        CHECK(m.items[i].label == e[i].label && !strcmp(m.items[i].path, e[i].path), "item %zu", i);
    ds_manifest_free(&m);
    char *tmp = ds_path_join(dir, "train.txt.tmp");
    CHECK(access(tmp, F_OK) != 0, "tmp file left behind");
    check_end();

    check_begin("manifest refuses malformed input");
    CHECK(parses("# ds-manifest 1 root=/r\n"), "empty list is fine");
    CHECK(parses("# ds-manifest 1 root=/r\n0\ta.jpg"), "no final newline is fine");
    CHECK(!parses(""), "empty file");
    CHECK(!parses("0\ta.jpg\n"), "no header");
    CHECK(!parses("# ds-manifest 2 root=/r\n"), "other version");
    CHECK(!parses("# ds-manifest 1 root=\n"), "empty root");
    CHECK(!parses("# ds-manifest 1 root=/r\n0 a.jpg\n"), "no tab");
    CHECK(!parses("# ds-manifest 1 root=/r\n-1\ta.jpg\n"), "negative label");
    CHECK(!parses("# ds-manifest 1 root=/r\nx\ta.jpg\n"), "non-numeric label");
    CHECK(!parses("# ds-manifest 1 root=/r\n0\t\n"), "empty path");
    CHECK(!parses("# ds-manifest 1 root=/r\n99999999999\ta\n"), "label overflow");
    CHECK(!parses("# ds-manifest 1 root=/r\n\n"), "blank line");
    check_end();

    check_begin("class list round trip and refusal");
    char *cf = ds_path_join(dir, "classes.txt");
    char *names[] = {"n01440764", "n01443537", "z zz"};
    CHECK(ds_classes_write(cf, names, 3) == 0, "write");
    char **got;
    int n;
    CHECK(ds_classes_read(cf, &got, &n) == 0 && n == 3, "read");
    for (int i = 0; i < n; i++) CHECK(!strcmp(got[i], names[i]), "class %d", i);
    ds_classes_free(got, n);
    CHECK(ds_classes_parse("a\n\nb\n", 5, "t", &got, &n) != 0, "empty name refused");
    char *cp = ds_classes_path_for("/x/y/train.txt");
    CHECK(!strcmp(cp, "/x/y/classes.txt"), "%s", cp);
    free(cp);
    check_end();

    unlink(file);
    unlink(cf);
    rmdir(dir);
    free(file);
    free(cf);
    free(tmp);
    test_fuzz_corpus();
    return check_exit();
}

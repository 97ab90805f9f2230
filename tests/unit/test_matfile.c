/* The MAT-file reader: the corpus's MATLAB-shaped synset tables read to the expected rows
 * (a compressed one and a plain one, IDs stored as uint8, uint16 and double, WNIDs as
 * uint16 and UTF-8 characters), every truncation of them refused, and a replay of the
 * fuzzing corpus with the harness's checks (the SAN build watches memory and leaks). */
#include "../check.h"
#include "../fuzz/fuzz_matfile.c" /* LLVMFuzzerTestOneInput: the fuzzer's own checks */
#include "fsutil.h"
#include "matfile.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* The corpus's ok-*.mat files: synsets in element order (not ID order), as the test writes them. */
static const struct { int64_t id; const char *wnid; } want[] = {
    {4, "n02000002"}, {5, "n07000007"}, {6, "n03000003"}, {7, "n00001740"}, {300, "n00002137"},
    {1860, "n00004258"}, {1, "n04000005"}, {2, "n01000001"}, {3, "n09000009"},
};
#define NWANT (sizeof want / sizeof want[0])

static char *corpus_file(const char *name)
{
    const char *root = getenv("DS_ROOT") ? getenv("DS_ROOT") : ".";
    char *dir = ds_path_join(root, "tests/fuzz/corpus/matfile");
    char *p = ds_path_join(dir, name);
    free(dir);
    return p;
}

/* stderr off while thousands of refusals are expected (restored by quiet(0)). */
static void quiet(int on)
{
    static int saved = -1;
    fflush(stderr);
    if (on) {
        int null = open("/dev/null", O_WRONLY);
        saved = dup(2);
        dup2(null, 2);
        close(null);
    } else if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
        saved = -1;
    }
}

static void test_reads(const char *name)
{
    char label[96];
    snprintf(label, sizeof label, "reads_%s", name);
    check_begin(label);
    char *path = corpus_file(name);
    size_t len;
    unsigned char *buf = (unsigned char *)ds_read_file(path, &len);
    CHECK(buf != NULL, "cannot read %s", path);
    ds_mat_row *rows = NULL;
    size_t n = 0;
    if (buf) CHECK(ds_mat_parse_struct(buf, len, path, "synsets", "ILSVRC2012_ID", "WNID", &rows, &n) == 0, "refused");
    CHECK(n == NWANT, "%zu rows, want %zu", n, NWANT);
    for (size_t i = 0; i < n && i < NWANT; i++)
        CHECK(rows[i].num == want[i].id && !strcmp(rows[i].str, want[i].wnid), "row %zu: %lld %s, want %lld %s", i,
              (long long)rows[i].num, rows[i].str, (long long)want[i].id, want[i].wnid);
    ds_mat_rows_free(rows, n);
    ds_mat_row *other;
    size_t no;
    quiet(1);
    int wrong_var = buf ? ds_mat_parse_struct(buf, len, path, "synset", "ILSVRC2012_ID", "WNID", &other, &no) : -1;
    int wrong_field = buf ? ds_mat_parse_struct(buf, len, path, "synsets", "ILSVRC2012_ID", "wnid", &other, &no) : -1;
    int number_as_string = buf ? ds_mat_parse_struct(buf, len, path, "synsets", "WNID", "WNID", &other, &no) : -1;
    /* Every prefix of the file is refused: a cut never yields fewer rows silently. */
    size_t accepted = 0;
    for (size_t cut = 0; buf && cut < len; cut++) {
        if (ds_mat_parse_struct(buf, cut, path, "synsets", "ILSVRC2012_ID", "WNID", &other, &no) == 0) {
            accepted++;
            ds_mat_rows_free(other, no);
        }
    }
    quiet(0);
    CHECK(wrong_var != 0 && wrong_field != 0 && number_as_string != 0,
          "a missing variable or field, or a string read as a number, accepted");
    CHECK(accepted == 0, "%zu of %zu truncations accepted", accepted, len);
    free(buf);
    free(path);
    check_end();
}

static void test_fuzz_corpus(void)
{
    check_begin("fuzz_corpus_replay");
    const char *root = getenv("DS_ROOT") ? getenv("DS_ROOT") : ".";
    char *dir = ds_path_join(root, "tests/fuzz/corpus/matfile");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    int files = 0;
    struct dirent *e;
    quiet(1);
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = ds_path_join(dir, e->d_name);
        size_t len;
        char *data = ds_read_file(p, &len);
        if (data) LLVMFuzzerTestOneInput((const uint8_t *)data, len);
        files += data != NULL;
        free(data);
        free(p);
    }
    quiet(0);
    if (d) closedir(d);
    CHECK(files >= 4, "only %d corpus files in %s", files, dir);
    free(dir);
    check_end();
}

int main(void)
{
    test_reads("ok-plain.mat");
    test_reads("ok-compressed.mat");
    test_fuzz_corpus();
    return check_exit();
}

/* The split rule (val count, per-class independence) and the directory scan's rules for
 * what counts as an image. */
#include "../check.h"
#include "fsutil.h"
#include "split.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void touch(const char *dir, const char *rel)
{
    char *p = ds_path_join(dir, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "x", 1) != 1) fprintf(stderr, "cannot create %s\n", p);
    if (fd >= 0) close(fd);
    free(p);
}

static void mkdir_in(const char *dir, const char *rel)
{
    char *p = ds_path_join(dir, rel);
    ds_mkdirs(p);
    free(p);
}

/* The class's val names under (seed, fraction), joined with '|', in sorted-name order. */
static char *val_names(const ds_split_tree *t, const char *cls, double fraction, uint64_t seed)
{
    ds_manifest_entry *tr, *va;
    size_t nt, nv;
    ds_split_assign(t, fraction, seed, &tr, &nt, &va, &nv);
    size_t cap = 1;
    for (size_t i = 0; i < nv; i++) cap += strlen(va[i].path) + 1;
    char *s = ds_xcalloc(cap, 1);
    size_t cl = strlen(cls);
    for (size_t i = 0; i < nv; i++) {
        if (strncmp(va[i].path, cls, cl) || va[i].path[cl] != '/') continue;
        strcat(s, va[i].path);
        strcat(s, "|");
    }
    ds_split_entries_free(tr, nt);
    ds_split_entries_free(va, nv);
    return s;
}

static char **names_for(const char *cls, int n)
{
    char **p = ds_xmalloc(n * sizeof *p);
    for (int i = 0; i < n; i++) {
        p[i] = ds_xmalloc(strlen(cls) + 32);
        sprintf(p[i], "%s/img%03d.jpg", cls, i);
    }
    return p;
}

static void free_names(char **p, int n)
{
    for (int i = 0; i < n; i++) free(p[i]);
    free(p);
}

int main(void)
{
    check_begin("val count: the ceil rule at n = 0, 1, 2, 5, 13, 101");
    {
        size_t n[] = {0, 1, 2, 5, 13, 101};
        size_t want[] = {0, 0, 1, 1, 3, 21};  /* ceil(0.2 n), never the last train image */
        for (int i = 0; i < 6; i++)
            CHECK(ds_split_val_count(n[i], 0.2) == want[i], "n=%zu: got %zu want %zu", n[i],
                  ds_split_val_count(n[i], 0.2), want[i]);
        CHECK(ds_split_val_count(2, 0.9) == 1, "n=2 f=0.9 keeps one train image");
        CHECK(ds_split_val_count(10, 1.0) == 9, "f=1 keeps one train image");
        CHECK(ds_split_val_count(10, 0.0) == 0, "f=0");
    }
    check_end();

    check_begin("val count: exact integers never round up (against integer arithmetic)");
    {
        /* fraction = k/100 exactly in decimal; ceil(n k / 100) in integers is the truth. */
        int bad = 0;
        for (int k = 1; k < 100 && bad < 5; k++) {
            double f = k / 100.0;
            for (size_t n = 2; n <= 20000 && bad < 5; n++) {
                size_t want = (n * k + 99) / 100;
                if (want > n - 1) want = n - 1;
                size_t got = ds_split_val_count(n, f);
                if (got != want) {
                    CHECK(got == want, "n=%zu f=%g: got %zu want %zu", n, f, got, want);
                    bad++;
                }
            }
        }
    }
    check_end();

    check_begin("a class's split is independent of the other classes");
    {
        ds_split_tree alone = {0}, many = {0};
        char **b = names_for("b", 37), **a = names_for("a", 50), **c = names_for("c", 11);
        ds_split_tree_add(&alone, b, 37);
        ds_split_tree_add(&many, c, 11);
        ds_split_tree_add(&many, b, 37);
        ds_split_tree_add(&many, a, 50);
        CHECK(many.nclasses == 3 && !strcmp(many.classes[1].name, "b"), "classes sorted");
        char *v1 = val_names(&alone, "b", 0.2, 42), *v2 = val_names(&many, "b", 0.2, 42);
        CHECK(!strcmp(v1, v2), "alone: %s\nwith others: %s", v1, v2);
        CHECK(strlen(v1) > 0, "some val files");
        char *v3 = val_names(&alone, "b", 0.2, 43);
        CHECK(strcmp(v1, v3) != 0, "another seed gives another split");
        /* The same files added in another order give the same split. */
        ds_split_tree rev = {0};
        for (int i = 36; i >= 0; i--) ds_split_tree_add(&rev, &b[i], 1);
        char *v4 = val_names(&rev, "b", 0.2, 42);
        CHECK(!strcmp(v1, v4), "order of arrival changed the split");
        free(v1), free(v2), free(v3), free(v4);
        ds_split_tree_free(&alone);
        ds_split_tree_free(&many);
        ds_split_tree_free(&rev);
        free_names(a, 50), free_names(b, 37), free_names(c, 11);
    }
    check_end();

    check_begin("manifests are sorted by (label, path) and cover every image once");
    {
        ds_split_tree t = {0};
        char **a = names_for("a", 101), **z = names_for("z", 13);
        ds_split_tree_add(&t, z, 13);
        ds_split_tree_add(&t, a, 101);
        ds_manifest_entry *tr, *va;
        size_t nt, nv;
        ds_split_assign(&t, 0.2, 42, &tr, &nt, &va, &nv);
        CHECK(nt + nv == 114 && nv == 21 + 3, "train %zu val %zu", nt, nv);
        for (size_t i = 1; i < nt; i++)
            CHECK(tr[i - 1].label < tr[i].label || (tr[i - 1].label == tr[i].label && strcmp(tr[i - 1].path, tr[i].path) < 0),
                  "train order at %zu", i);
        for (size_t i = 1; i < nv; i++)
            CHECK(va[i - 1].label < va[i].label || (va[i - 1].label == va[i].label && strcmp(va[i - 1].path, va[i].path) < 0),
                  "val order at %zu", i);
        for (size_t i = 0; i < nt; i++)
            for (size_t j = 0; j < nv; j++) CHECK(strcmp(tr[i].path, va[j].path), "%s in both", tr[i].path);
        ds_split_entries_free(tr, nt);
        ds_split_entries_free(va, nv);
        ds_split_tree_free(&t);
        free_names(a, 101), free_names(z, 13);
    }
    check_end();

    check_begin("image names");
    CHECK(ds_split_is_image_name("a.jpg") && ds_split_is_image_name("a.JPEG") && ds_split_is_image_name("x.Png"), "images");
    CHECK(!ds_split_is_image_name("a.gif") && !ds_split_is_image_name("jpg") && !ds_split_is_image_name("a.jpg.txt"),
          "non-images");
    CHECK(!ds_split_is_image_name("a.jpgx") && !ds_split_is_image_name("a."), "near misses");
    check_end();

    check_begin("scan: what counts as an image, what is skipped");
    {
        char dir[] = "/tmp/ds-split-XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        mkdir_in(dir, "n02/nested");
        mkdir_in(dir, "n01");
        mkdir_in(dir, "empty");
        mkdir_in(dir, ".hiddenclass");
        touch(dir, "n01/b.jpg");
        touch(dir, "n01/a.PNG");
        touch(dir, "n01/c.jpeg");
        touch(dir, "n01/.d.jpg");
        touch(dir, "n01/notes.txt");
        touch(dir, "n01/tab\there.jpg");
        touch(dir, "n01/new\nline.jpg");
        touch(dir, "n02/x y \xc3\xa9.JPG");
        touch(dir, "n02/nested/deep.jpg");
        touch(dir, "rootfile.jpg");
        char *link = ds_path_join(dir, "n02/link.jpg"), *target = ds_path_join(dir, "n01/b.jpg");
        CHECK(symlink(target, link) == 0, "symlink");
        char *dang = ds_path_join(dir, "n02/dangling.jpg");
        CHECK(symlink("/nonexistent/x.jpg", dang) == 0, "symlink");
        ds_split_tree t;
        CHECK(ds_split_scan(&t, dir) == 0, "scan");
        CHECK(t.nclasses == 3, "classes %d", t.nclasses);
        if (t.nclasses == 3) {
            CHECK(!strcmp(t.classes[0].name, "empty") && !strcmp(t.classes[1].name, "n01"), "class order");
            CHECK(t.classes[0].n == 0, "empty class");
            CHECK(t.classes[1].n == 3, "n01 has %zu", t.classes[1].n);
            if (t.classes[1].n == 3)
                CHECK(!strcmp(t.classes[1].files[0], "a.PNG") && !strcmp(t.classes[1].files[2], "c.jpeg"), "sorted");
            CHECK(t.classes[2].n == 2, "n02 has %zu (the name with spaces and the link)", t.classes[2].n);
        }
        CHECK(t.nimages == 5, "images %zu", t.nimages);
        CHECK(t.skipped[DS_SKIP_HIDDEN] == 2, "hidden %zu", t.skipped[DS_SKIP_HIDDEN]);
        CHECK(t.skipped[DS_SKIP_BAD_NAME] == 2, "bad names %zu", t.skipped[DS_SKIP_BAD_NAME]);
        CHECK(t.skipped[DS_SKIP_NOT_IMAGE] == 2, "not images %zu", t.skipped[DS_SKIP_NOT_IMAGE]);
        CHECK(t.skipped[DS_SKIP_DIR] == 1, "nested %zu", t.skipped[DS_SKIP_DIR]);
        CHECK(t.skipped[DS_SKIP_ROOT_FILE] == 1, "root files %zu", t.skipped[DS_SKIP_ROOT_FILE]);
        CHECK(t.nskipped == 8, "skipped list %zu", t.nskipped);
        ds_split_tree_free(&t);
        free(link), free(target), free(dang);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
    check_end();

    check_begin("scan refuses a missing root and a root without classes");
    {
        ds_split_tree t;
        fprintf(stderr, "(two expected errors follow)\n");
        CHECK(ds_split_scan(&t, "/nonexistent/ds-root") != 0, "missing root");
        char dir[] = "/tmp/ds-split-XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        touch(dir, "a.jpg");
        CHECK(ds_split_scan(&t, dir) != 0, "no classes");
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
    check_end();

    return check_exit();
}

/* Run directory: checkpoint names, atomic last/best links, pruning that spares best.h5's
 * target, --resume resolution, and metrics.jsonl truncation on resume. */
#include "../check.h"
#include "fsutil.h"
#include "rundir.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void touch(const char *dir, const char *name)
{
    char *p = ds_path_join(dir, name);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    free(p);
}

static int exists(const char *dir, const char *name)
{
    char *p = ds_path_join(dir, name);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

int main(void)
{
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/rundir.XXXXXX", getenv("DS_TEST_TMP") ? getenv("DS_TEST_TMP") : "/tmp");
    char *dir = mkdtemp(tmpl);
    if (!dir) return 1;

    check_begin("checkpoint_names_sort_by_step");
    char *p = ds_rundir_ckpt_path(dir, 1234);
    CHECK(strlen(p) > 16 && !strcmp(p + strlen(p) - 16, "ckpt-00001234.h5"), "got %s", p);
    free(p);
    check_end();

    check_begin("links_and_prune_keep_newest_and_best");
    const char *names[] = {"ckpt-00000010.h5", "ckpt-00000020.h5", "ckpt-00000030.h5", "ckpt-00000040.h5",
                           "ckpt-00000050.h5"};
    for (int i = 0; i < 5; i++) touch(dir, names[i]);
    touch(dir, "notes.txt");
    CHECK(ds_rundir_link(dir, "best.h5", names[1]) == 0, "best link");
    CHECK(ds_rundir_link(dir, "last.h5", names[3]) == 0, "last link");
    CHECK(ds_rundir_link(dir, "last.h5", names[4]) == 0, "last link replaced");
    char target[64] = "";
    char *lp = ds_path_join(dir, "last.h5");
    ssize_t n = readlink(lp, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    CHECK(!strcmp(target, names[4]), "last.h5 -> %s", target);
    CHECK(!exists(dir, "last.h5.tmp"), "a temporary link was left");
    CHECK(ds_rundir_prune(dir, 2) == 0, "prune");
    CHECK(!exists(dir, names[0]) && !exists(dir, names[2]), "old checkpoints kept");
    CHECK(exists(dir, names[1]), "best.h5's target was removed");
    CHECK(exists(dir, names[3]) && exists(dir, names[4]), "the newest two were removed");
    CHECK(exists(dir, "notes.txt"), "a file that is not a checkpoint was removed");
    CHECK(ds_rundir_has_checkpoints(dir) == 1, "has_checkpoints");
    check_end();

    check_begin("resume_resolves_last");
    char *r = ds_rundir_resolve(dir);
    CHECK(r && strlen(r) >= 16 && !strcmp(r + strlen(r) - 16, names[4]), "resolved %s", r ? r : "NULL");
    free(r);
    r = ds_rundir_resolve(lp);
    CHECK(r && !strcmp(r, lp), "a file resolves to itself");
    free(r);
    char *missing = ds_path_join(dir, "nothing");
    CHECK(ds_rundir_resolve(missing) == NULL, "a missing path resolved");
    /* Killed after the first checkpoint's rename, before last.h5: the newest complete
     * checkpoint, never a larger-numbered .tmp. */
    CHECK(ds_mkdirs(missing) == 0, "mkdir");
    CHECK(ds_rundir_resolve(missing) == NULL, "an empty run directory resolved");
    touch(missing, "ckpt-00000003.h5");
    touch(missing, "ckpt-00000002.h5");
    touch(missing, "ckpt-00000004.h5.tmp");
    r = ds_rundir_resolve(missing);
    CHECK(r && strlen(r) >= 16 && !strcmp(r + strlen(r) - 16, "ckpt-00000003.h5"), "without last.h5 resolved %s",
          r ? r : "NULL");
    free(r);
    free(missing);
    free(lp);
    check_end();

    check_begin("metrics_log_append_and_truncate");
    ds_metrics_log m;
    CHECK(ds_metrics_log_open(&m, dir, 0, 0) == 0, "open");
    for (int s = 1; s <= 5; s++) {
        char line[64];
        snprintf(line, sizeof line, "{\"step\":%d,\"loss\":1}", s * 10);
        ds_metrics_log_write(&m, line);
    }
    ds_metrics_log_close(&m);
    CHECK(ds_metrics_log_truncate(dir, 30) == 0, "truncate");
    char *mp = ds_path_join(dir, "metrics.jsonl");
    size_t len;
    char *text = ds_read_file(mp, &len);
    CHECK(text && !strcmp(text, "{\"step\":10,\"loss\":1}\n{\"step\":20,\"loss\":1}\n{\"step\":30,\"loss\":1}\n"),
          "got '%s'", text ? text : "NULL");
    free(text);
    free(mp);
    check_end();
    return check_exit();
}

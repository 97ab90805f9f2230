/* comm_check: runs comm's collectives under a launcher (tests/shell/test_comm_mpi.sh).
 *   comm_check sums          sums, bitwise agreement, chunking, bcast, stop agreement;
 *                            rank 0 prints PASS/FAIL lines, exit 1 on any failure
 *   comm_check die RANK      RANK calls ds_die while the others wait in a collective
 *   comm_check spin DIR      every rank writes DIR/RANK.pid, then reduces forever */
#include "comm.h"
#include "log.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

/* A check passes only when it passed on every rank; rank 0 reports it. */
static void report(const char *name, int ok)
{
    int bad = ds_comm_any(!ok);
    if (ds_comm_rank() == 0) printf("%s %s\n", bad ? "FAIL" : "PASS", name);
    fflush(stdout);
    failures += bad;
}

/* Rank r's i-th contribution: any rank can compute every rank's, to form the expected sum. */
static float value(int r, size_t i)
{
    ds_rng g;
    ds_rng_init(&g, 1234 + r, DS_RNG_DATA, i);
    return (ds_rng_float(&g) * 2 - 1) * (1.0f + r);
}

/* Every rank's buf equals rank 0's, bit for bit. */
static int same_on_all_ranks(const void *buf, size_t bytes)
{
    char *root = malloc(bytes);
    if (!root) ds_die("out of memory");
    memcpy(root, buf, bytes);
    ds_comm_bcast(root, bytes, 0);
    int same = memcmp(root, buf, bytes) == 0;
    free(root);
    return same;
}

static void check_f32(const char *name, size_t n)
{
    int rank = ds_comm_rank(), world = ds_comm_world();
    float *x = malloc(n * sizeof *x);
    if (!x) ds_die("out of memory");
    for (size_t i = 0; i < n; i++) x[i] = value(rank, i);
    ds_comm_allreduce_sum_f32(x, n);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        double want = 0;
        for (int r = 0; r < world; r++) want += value(r, i);
        /* fp32 sum of `world` terms of size <= world: a few ulps of the largest */
        if (fabs(x[i] - want) > 1e-6 * world * world) {
            fprintf(stderr, "rank %d: [%zu] got %.9g want %.9g\n", rank, i, x[i], want);
            ok = 0;
        }
    }
    char label[128];
    snprintf(label, sizeof label, "%s: sum", name);
    report(label, ok);
    snprintf(label, sizeof label, "%s: bitwise the same on every rank", name);
    report(label, same_on_all_ranks(x, n * sizeof *x));
    free(x);
}

/* The sum is formed in rank order, ((v0 + v1) + v2) + ..., in float: what one process adding
 * the same buffers one after another gets, bit for bit. With 3 or more ranks of values of
 * mixed magnitude, other orders differ in the last bits of many elements. */
static void check_rank_order(size_t n)
{
    int rank = ds_comm_rank(), world = ds_comm_world();
    float *x = malloc(n * sizeof *x);
    if (!x) ds_die("out of memory");
    for (size_t i = 0; i < n; i++) x[i] = value(rank, i);
    ds_comm_allreduce_sum_f32(x, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        float want = value(0, i);
        for (int r = 1; r < world; r++) want += value(r, i);
        differ += memcmp(&want, &x[i], sizeof want) != 0;
    }
    if (differ) fprintf(stderr, "rank %d: %zu of %zu sums differ from the rank-order sum\n", rank, differ, n);
    report("f32 allreduce adds in rank order (bitwise the sequential sum)", differ == 0);
    free(x);
}

static int run_sums(void)
{
    int rank = ds_comm_rank(), world = ds_comm_world();

    int64_t seen[3] = {1, rank, (int64_t)1 << ds_comm_local_rank()};
    ds_comm_allreduce_sum_i64(seen, 3);
    report("ranks: world size, distinct ranks and local ranks",
           seen[0] == world && seen[1] == (int64_t)world * (world - 1) / 2 &&
           seen[2] == ((int64_t)1 << world) - 1 && ds_comm_local_size() == world && ds_comm_launched());

    check_f32("f32 allreduce", 1000);
    ds_comm_set_chunk(7);   /* 1000 = 142 chunks of 7 and one of 6 */
    check_f32("f32 allreduce in chunks", 1000);
    check_rank_order(1000);

    double d[4] = {0.1 * rank, 1e300, -1e-300, rank};
    ds_comm_allreduce_sum_f64(d, 4);
    double want0 = 0;
    for (int r = 0; r < world; r++) want0 += 0.1 * r;
    report("f64 allreduce in chunks", fabs(d[0] - want0) < 1e-12 && d[3] == world * (world - 1) / 2.0 &&
                                          same_on_all_ranks(d, sizeof d));

    int64_t big[20];
    for (int i = 0; i < 20; i++) big[i] = ((int64_t)1 << 40) * (rank + 1) + i;
    ds_comm_allreduce_sum_i64(big, 20);
    int ok = 1;
    for (int i = 0; i < 20; i++)
        ok &= big[i] == ((int64_t)1 << 40) * world * (world + 1) / 2 + (int64_t)i * world;
    report("i64 allreduce in chunks is exact", ok);

    char msg[40] = {0};
    if (rank == world - 1) snprintf(msg, sizeof msg, "from the last rank, %d", rank);
    ds_comm_bcast(msg, sizeof msg, world - 1);
    char want[40];
    snprintf(want, sizeof want, "from the last rank, %d", world - 1);
    report("bcast from a non-zero root", strcmp(msg, want) == 0);
    ds_comm_set_chunk((size_t)1 << 26);

    /* The last rank alone decides to stop at step 5; everyone must stop at step 5. */
    int step = 0;
    for (; step < 100; step++)
        if (ds_comm_any(rank == world - 1 && step == 5)) break;
    int64_t steps[2] = {step, (int64_t)step * step};
    ds_comm_allreduce_sum_i64(steps, 2);
    report("stop agreement: every rank stops at the step one rank asked for",
           step == 5 && steps[0] == 5 * world && steps[1] == 25 * world);
    report("any(0) on every rank is 0", ds_comm_any(0) == 0);
    ds_comm_barrier();
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    ds_log_init("comm_check");
    if (ds_comm_init(&argc, &argv) != 0) return 1;
    const char *mode = argc > 1 ? argv[1] : "sums";
    int rc = 0;
    if (strcmp(mode, "sums") == 0) {
        rc = run_sums();
    } else if (strcmp(mode, "die") == 0 && argc > 2) {
        ds_comm_barrier();
        if (ds_comm_rank() == atoi(argv[2])) ds_die("rank %d fails on purpose", ds_comm_rank());
        for (;;) ds_comm_barrier();   /* the others wait for a rank that never comes */
    } else if (strcmp(mode, "spin") == 0 && argc > 2) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d.pid", argv[2], ds_comm_rank());
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) ds_die("%s: cannot write", path);
        float x[256] = {0};
        for (;;) {
            ds_comm_allreduce_sum_f32(x, 256);
            usleep(10000);
        }
    } else {
        fprintf(stderr, "usage: comm_check sums | die RANK | spin DIR\n");
        return 2;
    }
    ds_comm_free();
    return rc;
}

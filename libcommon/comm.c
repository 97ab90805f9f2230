#include "comm.h"
#include "fsutil.h"
#include "log.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DS_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#endif

static int world_rank = 0, world_size = 1, node_rank = 0, node_size = 1;
static double timeout_s = DS_COMM_TIMEOUT;    /* a wait longer than this ends the job; 0: never */
static char where[64];                       /* what the job is doing, for the stall message */
static int mpi_live;                          /* MPI_Init done here, MPI_Finalize not yet */
static size_t chunk_elems = (size_t)1 << 26;  /* elements per MPI call; counts are int */

int ds_comm_rank(void) { return world_rank; }
int ds_comm_world(void) { return world_size; }
int ds_comm_local_rank(void) { return node_rank; }
int ds_comm_local_size(void) { return node_size; }
int ds_comm_launched(void) { return mpi_live; }

void ds_comm_set_timeout(double seconds) { timeout_s = seconds > 0 ? seconds : 0; }
double ds_comm_timeout(void) { return timeout_s; }

void ds_comm_set_where(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
}

void ds_comm_set_chunk(size_t elems)
{
    chunk_elems = elems < 1 ? 1 : elems > INT_MAX ? INT_MAX : elems;
}

static void (*device_abort)(void), (*device_free)(void);

void ds_comm_set_device_hooks(void (*on_abort)(void), void (*on_free)(void))
{
    device_abort = on_abort;
    device_free = on_free;
}

void ds_comm_abort(int status)
{
    /* A rank blocked in a device kernel (NCCL) would never reach MPI again: end the
     * device's link first so this rank's work stops, then let MPI_Abort end the others. */
    void (*abort_device)(void) = device_abort;
    device_abort = NULL;   /* once: an error inside it comes back here */
    if (abort_device) abort_device();
#ifdef DS_HAVE_MPI
    if (mpi_live) MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
#endif
    exit(status);
}

/* ds_die's hook: a fatal error on one rank ends the job. */
static void abort_hook(int status) { ds_comm_abort(status); }

#ifdef DS_HAVE_MPI

/* Every MPI call goes through this: the communicator has MPI_ERRORS_RETURN, so a failure
 * comes back here, is printed with where it happened and MPI's own words, and ends the
 * job (a collective that failed on one rank cannot be continued by the others). */
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)
static void mpi_check(int rc, const char *what, const char *file, int line)
{
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    ds_err("%s:%d: %s: %s (rank %d of %d)", file, line, what, msg, world_rank, world_size);
    ds_comm_abort(1);
}

/* A launcher sets one of these for each process it starts: OpenMPI's mpirun, and the
 * PMI/PMIx process managers (srun, hydra). Without one, MPI_Init would start a singleton
 * (and, in OpenMPI, try to spawn its daemon), which a world of one does not need. */
static int launched_by_mpi(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int ds_comm_init(int *argc, char ***argv)
{
    if (!launched_by_mpi()) goto done;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return ds_err("MPI_Init_thread failed");
    mpi_live = 1;
    mpiCheck(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_SERIALIZED)
        ds_warn("MPI provides thread level %d, below MPI_THREAD_SERIALIZED", provided);
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    ds_log_set_rank(world_rank);
    /* The processes that share memory are the ones on this node; their order among
     * themselves (key = world rank) is the GPU each one drives. */
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &node_rank));
    mpiCheck(MPI_Comm_size(node, &node_size));
    mpiCheck(MPI_Comm_free(&node));
done:
    ds_set_abort_hook(abort_hook);
    return 0;
}

/* Elements sent in one message: bounds rank 0's scratch (4 or 8 MB per other rank). */
#define ORDERED_PIECE ((size_t)1 << 20)
#define TAG_SUM 17
#define TAG_BCAST 18

/* A wait that outlived the timeout: a rank is stopped or hung (alive, so mpirun does not
 * notice). Rank 0, which receives from every rank, names the ones that did not arrive;
 * the other ranks wait a little longer than rank 0 before they give up, so that it is
 * rank 0's message that names them. */
static void stalled(const char *what, const int *missing, int nmissing)
{
    char who[256] = "";
    size_t len = 0;
    for (int i = 0; i < nmissing && len + 16 < sizeof who; i++)
        len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", i ? ", " : "", missing[i]);
    if (nmissing)
        ds_err("%s%s%s: rank%s %s did not arrive within %g s (stopped or hung?); ending the job (--comm-timeout)",
               where, *where ? ": " : "", what, nmissing > 1 ? "s" : "", who, timeout_s);
    else
        ds_err("%s%s%s: not every rank arrived within %g s (one is stopped or hung?); ending the job (--comm-timeout)",
               where, *where ? ": " : "", what, timeout_s);
    ds_comm_abort(1);
}

/* Waits for requests req[0, n) (peer[i]: the rank each one waits for, -1 for a collective).
 * The caller's thread polls without pause (as MPI_Wait would spin); the worker polls with
 * short naps, as it shares the cores with the backward pass it overlaps. A wait past the
 * timeout ends the job. */
static void wait_all(MPI_Request *req, const int *peer, int n, int nap, const char *what)
{
    double t0 = ds_now(), limit = world_rank == 0 ? timeout_s : timeout_s + (timeout_s < 20 ? timeout_s / 2 : 10);
    /* naps from 20 us, doubling to 320 us while the wait goes on: a quick answer is seen
     * at once, a long wait (a peer still in backward) costs few wake-ups */
    struct timespec t = {0, 20000};
    for (unsigned spin = 0;; spin++) {
        int done = 0;
        mpiCheck(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE));
        if (done) return;
        if (nap) {
            nanosleep(&t, NULL);
            if (t.tv_nsec < 320000) t.tv_nsec *= 2;
        }
        if (timeout_s > 0 && (nap || spin % 1024 == 0) && ds_now() - t0 > limit) {
            int missing[64], nmissing = 0;
            for (int i = 0; i < n && nmissing < 64; i++) {
                int one = 0;
                if (req[i] != MPI_REQUEST_NULL) mpiCheck(MPI_Test(&req[i], &one, MPI_STATUS_IGNORE));
                if (!one && peer[i] >= 0) missing[nmissing++] = peer[i];
            }
            stalled(what, missing, nmissing);
        }
    }
}

static void wait_req(MPI_Request *req, int peer, int nap, const char *what) { wait_all(req, &peer, 1, nap, what); }

/* count values of buf from root to every other rank, point to point: the root then waits
 * for each rank by name, so a stalled one is named rather than a collective that did not
 * finish. */
static void send_from_root(void *buf, int count, MPI_Datatype type, int root, int nap, const char *what)
{
    if (world_rank != root) {
        MPI_Request req;
        mpiCheck(MPI_Irecv(buf, count, type, root, TAG_BCAST, MPI_COMM_WORLD, &req));
        wait_req(&req, root, nap, what);
        return;
    }
    int others = world_size - 1;
    MPI_Request *req = ds_xmalloc((size_t)others * sizeof *req);
    int *peer = ds_xmalloc((size_t)others * sizeof *peer);
    for (int r = 0, i = 0; r < world_size; r++) {
        if (r == root) continue;
        peer[i] = r;
        mpiCheck(MPI_Isend(buf, count, type, r, TAG_BCAST, MPI_COMM_WORLD, &req[i++]));
    }
    wait_all(req, peer, others, nap, what);
    free(peer);
    free(req);
}

/* Sum on rank 0, then (bcast) broadcast: the one sum that exists is the one every rank gets.
 * Rank 0 adds the ranks' buffers one at a time in rank order, ((b0 + b1) + b2) + ..., which
 * is the order in which one process accumulating micro-batches adds them: a step of world W
 * and accum 1 is then bitwise the step of world 1 and accum W on the CPU (docs/DESIGN.md §3), not
 * only equal up to rounding. MPI_Reduce leaves the order of its additions to the library.
 * Rank 0 receives a piece from every rank at once, adds them in rank order, and sends the
 * sum back to each rank by name (integer counts take the same path: exact in any order). */
static void reduce_bcast(void *buf, size_t n, size_t elem, MPI_Datatype type, int nap, int bcast, const char *what)
{
    if (!mpi_live || world_size == 1) return;
    size_t piece = chunk_elems < ORDERED_PIECE ? chunk_elems : ORDERED_PIECE;
    int others = world_size - 1;
    char *p = buf, *tmp = world_rank == 0 ? ds_xmalloc((size_t)others * piece * elem) : NULL;
    MPI_Request *req = ds_xmalloc((size_t)others * sizeof *req);
    for (size_t off = 0; off < n; off += piece) {
        int count = (int)(n - off < piece ? n - off : piece);
        void *chunk = p + off * elem;
        if (world_rank == 0) {
            for (int r = 1; r <= others; r++)
                mpiCheck(MPI_Irecv(tmp + (size_t)(r - 1) * piece * elem, count, type, r, TAG_SUM, MPI_COMM_WORLD,
                                   &req[r - 1]));
            /* every piece must arrive: a stalled rank is named with all the others missing */
            int *peer = ds_xmalloc((size_t)others * sizeof *peer);
            for (int r = 1; r <= others; r++) peer[r - 1] = r;
            wait_all(req, peer, others, nap, what);
            free(peer);
            for (int r = 1; r <= others; r++) {
                const void *part = tmp + (size_t)(r - 1) * piece * elem;
                if (type == MPI_FLOAT)
                    for (int i = 0; i < count; i++) ((float *)chunk)[i] += ((const float *)part)[i];
                else if (type == MPI_DOUBLE)
                    for (int i = 0; i < count; i++) ((double *)chunk)[i] += ((const double *)part)[i];
                else
                    for (int i = 0; i < count; i++) ((int64_t *)chunk)[i] += ((const int64_t *)part)[i];
            }
        } else {
            mpiCheck(MPI_Isend(chunk, count, type, 0, TAG_SUM, MPI_COMM_WORLD, &req[0]));
            wait_req(&req[0], 0, nap, what);
        }
        if (bcast) send_from_root(chunk, count, type, 0, nap, what);
    }
    free(req);
    free(tmp);
}

void ds_comm_allreduce_sum_f32(float *buf, size_t n) { reduce_bcast(buf, n, sizeof *buf, MPI_FLOAT, 0, 1, "sum"); }
void ds_comm_allreduce_sum_f64(double *buf, size_t n) { reduce_bcast(buf, n, sizeof *buf, MPI_DOUBLE, 0, 1, "sum"); }

/* ---- the worker: queued sums, in order, beside the caller's computation ---- */

typedef struct {
    float *buf;
    size_t n;
    int to_all;
} bucket;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a bucket queued, one done, or quit */
    pthread_t thread;
    int running, quit;
    bucket *q;              /* this round's buckets: [0, next) taken, [next, nq) waiting */
    int nq, cap, next, done;
    ds_comm_reduce_record rec;  /* .queued since the process started; the rest of this round */
} wk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *worker_main(void *arg)
{
    pthread_mutex_lock(&wk.mu);
    for (;;) {
        while (!wk.quit && wk.next == wk.nq) pthread_cond_wait(&wk.cv, &wk.mu);
        if (wk.next == wk.nq) break;   /* quit, and nothing left */
        if (wk.next == 0) {
            wk.rec.first_begun_time = ds_now();
            wk.rec.first_begun_event = ds_event_seq();
        }
        bucket b = wk.q[wk.next++];
        pthread_mutex_unlock(&wk.mu);
        reduce_bcast(b.buf, b.n, sizeof *b.buf, MPI_FLOAT, 1, b.to_all, "gradient sum");
        pthread_mutex_lock(&wk.mu);
        wk.done++;
        pthread_cond_broadcast(&wk.cv);
    }
    pthread_mutex_unlock(&wk.mu);
    return arg;
}

void ds_comm_reduce_start(float *buf, size_t n, int to_all)
{
    if (!mpi_live || world_size == 1) return;
    pthread_mutex_lock(&wk.mu);
    if (!wk.running) {
        /* Signals stay with the main thread (dstrain's stop flags); the worker inherits the
         * mask it is created with. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int rc = pthread_create(&wk.thread, NULL, worker_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) {
            pthread_mutex_unlock(&wk.mu);
            ds_err("cannot start the reduction thread: %s", strerror(rc));
            ds_comm_abort(1);
        }
        wk.running = 1;
    }
    if (wk.nq == wk.cap) {
        wk.cap = wk.cap ? 2 * wk.cap : 16;
        wk.q = ds_xrealloc(wk.q, (size_t)wk.cap * sizeof *wk.q);
    }
    if (wk.nq == 0) {  /* a new round */
        wk.rec.first_queued_event = ds_event_seq();
        wk.rec.first_begun_event = 0;
        wk.rec.first_begun_time = 0;
    }
    wk.q[wk.nq++] = (bucket){buf, n, to_all};
    wk.rec.queued++;
    pthread_cond_broadcast(&wk.cv);
    pthread_mutex_unlock(&wk.mu);
}

void ds_comm_reduce_wait(void)
{
    pthread_mutex_lock(&wk.mu);
    while (wk.done < wk.nq) pthread_cond_wait(&wk.cv, &wk.mu);
    wk.nq = wk.next = wk.done = 0;
    pthread_mutex_unlock(&wk.mu);
}

void ds_comm_reduce_stats(ds_comm_reduce_record *rec)
{
    pthread_mutex_lock(&wk.mu);
    *rec = wk.rec;
    pthread_mutex_unlock(&wk.mu);
}

/* Ends the worker (idle: every caller waits for its sums before it leaves). */
static void worker_stop(void)
{
    pthread_mutex_lock(&wk.mu);
    int running = wk.running;
    wk.quit = 1;
    pthread_cond_broadcast(&wk.cv);
    pthread_mutex_unlock(&wk.mu);
    if (running) pthread_join(wk.thread, NULL);
    free(wk.q);
    wk.q = NULL;
    wk.running = wk.quit = wk.nq = wk.cap = wk.next = wk.done = 0;
}

void ds_comm_allreduce_sum_i64(int64_t *buf, size_t n) { reduce_bcast(buf, n, sizeof *buf, MPI_INT64_T, 0, 1, "count sum"); }

void ds_comm_bcast(void *buf, size_t bytes, int root)
{
    if (!mpi_live || world_size == 1) return;
    char *p = buf;
    for (size_t off = 0; off < bytes; off += chunk_elems) {
        int count = (int)(bytes - off < chunk_elems ? bytes - off : chunk_elems);
        send_from_root(p + off, count, MPI_BYTE, root, 0, "broadcast");
    }
}

void ds_comm_barrier(void) { (void)ds_comm_any(0); }

int ds_comm_any(int flag)
{
    /* Through the ordered sum rather than MPI_Allreduce: rank 0 then receives from every
     * rank by name, so a rank that stalls here (the step's last agreement) is named. */
    double any = flag != 0;
    reduce_bcast(&any, 1, sizeof any, MPI_DOUBLE, 0, 1, "agreement between the ranks");
    return any != 0;
}

#else /* no MPI: always a world of one */

int ds_comm_init(int *argc, char ***argv)
{
    ds_set_abort_hook(abort_hook);
    return 0;
}

void ds_comm_allreduce_sum_f32(float *buf, size_t n) {}
void ds_comm_allreduce_sum_f64(double *buf, size_t n) {}
void ds_comm_reduce_start(float *buf, size_t n, int to_all) {}
void ds_comm_reduce_wait(void) {}
void ds_comm_reduce_stats(ds_comm_reduce_record *rec) { memset(rec, 0, sizeof *rec); }
void ds_comm_allreduce_sum_i64(int64_t *buf, size_t n) {}
void ds_comm_bcast(void *buf, size_t bytes, int root) {}
void ds_comm_barrier(void) {}
int ds_comm_any(int flag) { return flag != 0; }

#endif

void ds_comm_free(void)
{
    if (device_free) device_free();
    device_abort = device_free = NULL;
#ifdef DS_HAVE_MPI
    worker_stop();
    if (!mpi_live) return;
    mpiCheck(MPI_Finalize());
    mpi_live = 0;
#endif
}

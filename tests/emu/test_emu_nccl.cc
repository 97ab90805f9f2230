/* The emulated device's NCCL itself (emu_nccl.cc), between processes as ds runs it: the
 * parent makes the unique id and forks one child per rank, which joins the communicator and
 * works through the case as a ds rank would (cudaMalloc, cudaMemcpy, a stream, ncclAllReduce
 * on it, polling cudaStreamQuery and ncclCommGetAsyncError). Each child runs under alarm(),
 * so a hang is a failure, not a stuck test; the ranks report their results' bits on a shared
 * board, and the parent checks that every rank holds the same bits. The parent itself makes
 * no device call: the runtime's threads would not survive the fork. Cases: sums of 1, 2 and
 * 3 ranks against a double reference (in place, out of place, in a group, int32); an order of
 * summation that varies from call to call and follows DS_EMU_SEED; a buffer larger than a
 * slot; sends and receives in a group (an all-to-all of chunks of unequal sizes, larger than
 * a slot, oneself included, then the all-gather back: bit for bit; a lone send and receive;
 * a group that is not emulated refused); one device per rank, also as CUDA_VISIBLE_DEVICES
 * gives it; two ranks on one device refused with NCCL's words on every rank; nccl_stall with an abort; a peer that exits mid-collective; nccl_init_fail; a rank
 * that never arrives; no shared-memory segment left behind, and that of a job killed before
 * all its ranks arrived removed by the next ncclGetUniqueId once its processes are gone. */
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

static void report(const char *name, bool ok, const std::string &detail = "")
{
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, ok || detail.empty() ? "" : ": ", ok ? "" : detail.c_str());
    fflush(stdout);
    if (!ok) failures++;
}

/* ---- what the ranks share with the parent ---- */

constexpr int MAX_RANKS = 4, MAX_CALLS = 16;

struct board {
    uint64_t hash[MAX_CALLS][MAX_RANKS];   /* bits of each call's result, per rank */
    int ncalls;
    volatile int flag[8][MAX_RANKS];       /* the stall case's steps, each rank's own */
};

static int this_rank;   /* for the messages */

/* A failed check in a child: says which rank and why, and ends the child with status 1. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: ", this_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    _exit(1);
}

#define CK(call)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) fail("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

#define NCK(call)                                                                      \
    do {                                                                               \
        ncclResult_t r_ = (call);                                                      \
        if (r_ != ncclSuccess)                                                         \
            fail("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
    } while (0)

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t fnv(const void *p, size_t bytes)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* Rank r's element i: a spread of signs and magnitudes (2^-8 to 2^8), so that adding three
 * of them rounds differently in different orders. */
static float input(int r, size_t i)
{
    uint64_t x = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 32;
    double m = (double)(x & 0xffffff) / 0x1000000 * 2 - 1;
    return (float)ldexp(m, (int)((x >> 24) % 17) - 8);
}

/* got against the double sum of the ranks' inputs: a float sum of n terms in any order is
 * within (n - 1) rounding errors of 2^-24 times the sum of the magnitudes, plus the final
 * rounding; twice that bound leaves room and still fails a missing or doubled term. */
static void check_sum(const char *what, const float *got, size_t count, int n)
{
    for (size_t i = 0; i < count; i++) {
        double ref = 0, mag = 0;
        for (int r = 0; r < n; r++) ref += input(r, i), mag += fabs(input(r, i));
        double tol = 2 * n * ldexp(mag, -24);
        if (!(fabs(got[i] - ref) <= tol))
            fail("%s: element %zu is %.9g, the ranks' sum %.9g (tolerance %.3g)", what, i, got[i], ref, tol);
    }
}

/* ---- a child's life: joining, the buffers ---- */

struct rank_env {
    int rank, n;
    int device;   /* the device it sets (run_opts) */
    ncclUniqueId id;
    board *b;
    ncclComm_t comm = NULL;
    cudaStream_t stream = NULL;
};

static void join(rank_env &e)
{
    CK(cudaSetDevice(e.device));
    NCK(ncclCommInitRank(&e.comm, e.n, e.id, e.rank));
    int count = -1, rank = -1;
    NCK(ncclCommCount(e.comm, &count));
    NCK(ncclCommUserRank(e.comm, &rank));
    if (count != e.n || rank != e.rank) fail("ncclCommCount %d, ncclCommUserRank %d", count, rank);
    CK(cudaStreamCreateWithFlags(&e.stream, cudaStreamNonBlocking));
}

static void leave(rank_env &e)
{
    NCK(ncclCommFinalize(e.comm));
    NCK(ncclCommDestroy(e.comm));
}

static float *upload_inputs(int r, size_t count)
{
    std::vector<float> h(count);
    for (size_t i = 0; i < count; i++) h[i] = input(r, i);
    float *d;
    CK(cudaMalloc((void **)&d, count * sizeof(float)));
    CK(cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> download(const float *d, size_t count)
{
    std::vector<float> h(count);
    CK(cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* waits for the stream as ds_nccl_sync does: polling, and failing on NCCL's error */
static void sync_polling(rank_env &e)
{
    for (;;) {
        cudaError_t ce = cudaStreamQuery(e.stream);
        if (ce == cudaSuccess) return;
        if (ce != cudaErrorNotReady) fail("cudaStreamQuery: %s", cudaGetErrorString(ce));
        ncclResult_t async;
        NCK(ncclCommGetAsyncError(e.comm, &async));
        if (async != ncclSuccess) fail("asynchronous error %s: %s", ncclGetErrorString(async), ncclGetLastError(NULL));
        nap_ms(0);
    }
}

/* ---- the cases, as each rank runs them ---- */

/* out of place (the input must stay), then in place inside a group, then int32 exactly */
static void case_sum(rank_env &e)
{
    join(e);
    const size_t count = 10007;   /* not a multiple of a block */
    float *send = upload_inputs(e.rank, count), *recv;
    CK(cudaMalloc((void **)&recv, count * sizeof(float)));
    NCK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, e.comm, e.stream));
    sync_polling(e);
    std::vector<float> got = download(recv, count);
    check_sum("out of place", got.data(), count, e.n);
    e.b->hash[0][e.rank] = fnv(got.data(), count * sizeof(float));
    std::vector<float> kept = download(send, count);
    for (size_t i = 0; i < count; i++)
        if (kept[i] != input(e.rank, i)) fail("out of place: sendbuff changed at element %zu", i);

    NCK(ncclGroupStart());
    NCK(ncclAllReduce(send, send, count, ncclFloat32, ncclSum, e.comm, e.stream));
    NCK(ncclGroupEnd());
    CK(cudaStreamSynchronize(e.stream));
    got = download(send, count);
    check_sum("in place", got.data(), count, e.n);
    e.b->hash[1][e.rank] = fnv(got.data(), count * sizeof(float));

    std::vector<int32_t> hi(count), ho(count);
    for (size_t i = 0; i < count; i++) hi[i] = (int32_t)(i * 7) - e.rank * 1000;
    int32_t *di;
    CK(cudaMalloc((void **)&di, count * sizeof(int32_t)));
    CK(cudaMemcpy(di, hi.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice));
    NCK(ncclAllReduce(di, di, count, ncclInt32, ncclSum, e.comm, e.stream));
    CK(cudaStreamSynchronize(e.stream));
    CK(cudaMemcpy(ho.data(), di, count * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) {
        int32_t want = (int32_t)(i * 7) * e.n - 1000 * (e.n * (e.n - 1) / 2);
        if (ho[i] != want) fail("int32: element %zu is %d, not %d", i, ho[i], want);
    }
    e.b->ncalls = 2;

    if (ncclAllReduce(send, send, count, ncclBfloat16, ncclSum, e.comm, e.stream) != ncclInvalidArgument)
        fail("a bf16 reduction was not refused with ncclInvalidArgument");
    leave(e);
}

/* the same inputs reduced again and again, each time into a fresh result */
static void case_order(rank_env &e)
{
    join(e);
    const size_t count = 4 * 2048 + 5;   /* a few blocks of 8 KiB */
    const int calls = 8;
    float *send = upload_inputs(e.rank, count), *recv;
    CK(cudaMalloc((void **)&recv, count * sizeof(float)));
    for (int k = 0; k < calls; k++) {
        CK(cudaMemsetAsync(recv, 0, count * sizeof(float), e.stream));
        NCK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, e.comm, e.stream));
        sync_polling(e);
        std::vector<float> got = download(recv, count);
        check_sum("order", got.data(), count, e.n);
        e.b->hash[k][e.rank] = fnv(got.data(), count * sizeof(float));
    }
    e.b->ncalls = calls;
    leave(e);
}

/* several slots' worth, in place */
static void case_large(rank_env &e)
{
    join(e);
    const size_t count = 700001;   /* 2.8 MB: three pieces of a 1 MiB slot */
    float *buf = upload_inputs(e.rank, count);
    NCK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, e.comm, e.stream));
    sync_polling(e);
    std::vector<float> got = download(buf, count);
    check_sum("large", got.data(), count, e.n);
    e.b->hash[0][e.rank] = fnv(got.data(), count * sizeof(float));
    e.b->ncalls = 1;
    leave(e);
}

/* Rank r's chunk j of a buffer of `count` elements cut W ways: [count j / W, count (j+1) / W). */
static size_t chunk_lo(size_t count, int j, int w) { return count * (size_t)j / (size_t)w; }

/* All-to-all of chunks (every rank sends chunk j of its input to rank j, itself included),
 * in one group; then the all-gather of each rank's chunk back into every rank's buffer, as
 * ds's ordered reduction moves them; the bits must arrive unchanged. Then a lone send and
 * receive (a group of its own) between ranks 0 and 1, and the groups the emulation refuses. */
static void case_p2p(rank_env &e)
{
    join(e);
    const int w = e.n, r = e.rank;
    const size_t count = 300007 * (size_t)w;   /* each chunk past a slot's part per peer */
    float *in = upload_inputs(r, count), *stage, *all;
    CK(cudaMalloc((void **)&stage, count * sizeof(float)));
    CK(cudaMalloc((void **)&all, count * sizeof(float)));
    const size_t mine = chunk_lo(count, r + 1, w) - chunk_lo(count, r, w);
    NCK(ncclGroupStart());
    for (int j = 0; j < w; j++) {
        size_t lo = chunk_lo(count, j, w), len = chunk_lo(count, j + 1, w) - lo;
        NCK(ncclSend(in + lo, len, ncclFloat32, j, e.comm, e.stream));
        NCK(ncclRecv(stage + (size_t)j * mine, mine, ncclFloat32, j, e.comm, e.stream));
    }
    NCK(ncclGroupEnd());
    sync_polling(e);
    std::vector<float> got = download(stage, (size_t)w * mine);
    const size_t lo_r = chunk_lo(count, r, w);
    for (int j = 0; j < w; j++)
        for (size_t i = 0; i < mine; i++)
            if (got[(size_t)j * mine + i] != input(j, lo_r + i))
                fail("all-to-all: element %zu of rank %d's chunk is %.9g, not %.9g", i, j, got[(size_t)j * mine + i],
                     input(j, lo_r + i));
    /* all-gather: each rank's own chunk of its input, in place at its offset everywhere */
    CK(cudaMemcpy(all + lo_r, in + lo_r, mine * sizeof(float), cudaMemcpyDeviceToDevice));
    NCK(ncclGroupStart());
    NCK(ncclGroupStart());   /* nested: only the outermost end issues */
    for (int j = 0; j < w; j++) {
        if (j == r) continue;
        size_t lo = chunk_lo(count, j, w), len = chunk_lo(count, j + 1, w) - lo;
        NCK(ncclSend(all + lo_r, mine, ncclFloat32, j, e.comm, e.stream));
        NCK(ncclRecv(all + lo, len, ncclFloat32, j, e.comm, e.stream));
    }
    NCK(ncclGroupEnd());
    NCK(ncclGroupEnd());
    sync_polling(e);
    got = download(all, count);
    for (size_t i = 0; i < count; i++) {
        int owner = 0;
        while (chunk_lo(count, owner + 1, w) <= i) owner++;
        if (got[i] != input(owner, i)) fail("all-gather: element %zu is %.9g, not rank %d's %.9g", i, got[i], owner, input(owner, i));
    }
    e.b->hash[0][r] = fnv(got.data(), count * sizeof(float));
    if (w == 2) {   /* alone, outside a group: each call is a group of its own */
        if (r == 0) NCK(ncclSend(in, 1000, ncclFloat32, 1, e.comm, e.stream));
        else NCK(ncclRecv(stage, 1000, ncclFloat32, 0, e.comm, e.stream));
        sync_polling(e);
        if (r == 1) {
            got = download(stage, 1000);
            for (size_t i = 0; i < 1000; i++)
                if (got[i] != input(0, i)) fail("lone send: element %zu is %.9g, not %.9g", i, got[i], input(0, i));
        }
    }
    /* not emulated, refused before anything is queued: two sends to one peer in a group */
    NCK(ncclGroupStart());
    NCK(ncclSend(in, 4, ncclFloat32, 0, e.comm, e.stream));
    NCK(ncclSend(in, 4, ncclFloat32, 0, e.comm, e.stream));
    if (ncclGroupEnd() != ncclInvalidUsage) fail("two sends to one peer in a group were not refused");
    if (ncclSend(in, 1, ncclFloat32, w, e.comm, e.stream) != ncclInvalidArgument) fail("a peer out of range was not refused");
    e.b->ncalls = 1;
    leave(e);
}

/* Steps of the stall case, each rank's flag set when it has done the step. */
enum { CHECKED_BUSY, ABORTED, SAW_ERROR };

static void await_flag(board *b, int step, int rank)
{
    while (!b->flag[step][rank]) nap_ms(1);
}

static void expect_busy(rank_env &e, const char *when)
{
    cudaError_t ce = cudaStreamQuery(e.stream);
    if (ce != cudaErrorNotReady) fail("%s: the stream is not busy (cudaStreamQuery: %s)", when, cudaGetErrorString(ce));
    ncclResult_t async;
    NCK(ncclCommGetAsyncError(e.comm, &async));
    if (async != ncclSuccess) fail("%s: asynchronous error %s", when, ncclGetErrorString(async));
}

/* nccl_stall=1 over 3 ranks: rank 1's collective never ends and everyone's stream stays
 * busy without an error (a stuck peer is alive); rank 0 aborts, which ends its stream; rank 2
 * then sees ncclRemoteError and its stream ends; rank 1 is still held (it sees no peer)
 * until it aborts too. The steps go by flags, not by time. */
static void case_stall(rank_env &e)
{
    join(e);
    const size_t count = 1000;
    float *buf = upload_inputs(e.rank, count);
    NCK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, e.comm, e.stream));
    expect_busy(e, "while rank 1 stalls");
    e.b->flag[CHECKED_BUSY][e.rank] = 1;
    for (int r = 0; r < e.n; r++) await_flag(e.b, CHECKED_BUSY, r);
    if (e.rank == 0) {
        NCK(ncclCommAbort(e.comm));
        CK(cudaStreamSynchronize(e.stream));
        e.b->flag[ABORTED][0] = 1;
        return;
    }
    await_flag(e.b, ABORTED, 0);
    if (e.rank == 1) {
        await_flag(e.b, SAW_ERROR, 2);
        expect_busy(e, "after its peers gave up");
        NCK(ncclCommAbort(e.comm));
        CK(cudaStreamSynchronize(e.stream));
        return;
    }
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess) {
        NCK(ncclCommGetAsyncError(e.comm, &async));
        nap_ms(1);
    }
    if (async != ncclRemoteError) fail("after rank 0 aborted: %s, not ncclRemoteError", ncclGetErrorString(async));
    CK(cudaStreamSynchronize(e.stream));
    e.b->flag[SAW_ERROR][2] = 1;
    NCK(ncclCommDestroy(e.comm));
}

/* nccl_stall=2 over 3 ranks: rank 2 exits inside its collective (and stays a zombie until
 * the parent reaps it, after the others); the survivors see ncclRemoteError, their streams
 * end, and a later collective is refused with the same error. */
static void case_peer_exit(rank_env &e)
{
    join(e);
    const size_t count = 1000;
    float *buf = upload_inputs(e.rank, count);
    NCK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, e.comm, e.stream));
    if (e.rank == 2) {
        nap_ms(100);   /* lets its stream's worker enter the collective first (either way it fails to come) */
        _exit(0);
    }
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess) {
        NCK(ncclCommGetAsyncError(e.comm, &async));
        nap_ms(1);
    }
    if (async != ncclRemoteError) fail("after rank 2 exited: %s, not ncclRemoteError", ncclGetErrorString(async));
    const char *why = ncclGetLastError(e.comm);
    if (!strstr(why, "rank 2")) fail("the last error does not name rank 2: \"%s\"", why);
    CK(cudaStreamSynchronize(e.stream));
    ncclResult_t rc = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, e.comm, e.stream);
    if (rc != ncclRemoteError) fail("a collective after the error: %s, not ncclRemoteError", ncclGetErrorString(rc));
    NCK(ncclCommDestroy(e.comm));
}

static void case_init_fail(rank_env &e)
{
    CK(cudaSetDevice(e.device));
    ncclResult_t rc = ncclCommInitRank(&e.comm, e.n, e.id, e.rank);
    if (rc != ncclSystemError) fail("ncclCommInitRank: %s, not ncclSystemError", ncclGetErrorString(rc));
    if (!*ncclGetLastError(NULL)) fail("ncclCommInitRank failed without a message");
}

/* the only rank of 2 that arrives gives up after DS_EMU_NCCL_INIT_TIMEOUT, naming rank 1 */
static void case_missing(rank_env &e)
{
    CK(cudaSetDevice(e.device));
    ncclResult_t rc = ncclCommInitRank(&e.comm, 2, e.id, 0);
    if (rc != ncclSystemError) fail("ncclCommInitRank: %s, not ncclSystemError", ncclGetErrorString(rc));
    const char *why = ncclGetLastError(NULL);
    if (!strstr(why, "rank 1")) fail("the message does not name rank 1: \"%s\"", why);
}

/* two ranks or more on one device: NCCL's duplicate check refuses the communicator on the
 * ranks that share it (ncclInvalidUsage, NCCL's words), and the others learn that it failed;
 * none waits */
static void case_duplicate(rank_env &e)
{
    CK(cudaSetDevice(e.device));
    ncclResult_t rc = ncclCommInitRank(&e.comm, e.n, e.id, e.rank);
    const char *why = ncclGetLastError(NULL);
    if (e.rank != 1) {
        if (rc != ncclInvalidUsage) fail("ncclCommInitRank: %s, not ncclInvalidUsage", ncclGetErrorString(rc));
        if (!strstr(why, "Duplicate GPU detected : rank")) fail("not NCCL's words: \"%s\"", why);
    } else if (rc == ncclSuccess) {
        fail("ncclCommInitRank succeeded on the rank whose peers were refused");
    }
}

/* ---- the parent ---- */

/* Devices: DS_EMU_DEVICES is `devices` (0: one per rank); rank r sets device r % devices,
 * or, with per_rank_visible, sees only device r (CUDA_VISIBLE_DEVICES, as a launcher sets
 * it) and sets device 0. */
struct run_opts {
    const char *fault = NULL, *seed = NULL, *init_timeout = NULL;
    int timeout_s = 20;
    int devices = 0;
    bool per_rank_visible = false;
};

/* Forks n ranks running body; true when every one exited with status 0. The ranks are
 * reaped in rank order, so one that exits early stays a zombie meanwhile, as a dead process
 * can under a launcher that reaps late. */
/* the segment an id names ("/ds-emu-nccl-..."), read from its bytes; "" if none */
static std::string segment_name(const ncclUniqueId &id)
{
    static const char mark[] = "/ds-emu-nccl-";
    const char *p = (const char *)memmem(id.internal, sizeof id.internal, mark, sizeof mark - 1);
    return p ? std::string(p, strnlen(p, sizeof id.internal - (size_t)(p - id.internal))) : std::string();
}

static bool segment_exists(const std::string &name)
{
    return !name.empty() && access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

static std::vector<std::string> names_used;   /* every segment this test's ids named */

static bool run_ranks(int n, const run_opts &o, void (*body)(rank_env &), board *b, std::string *why)
{
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        *why = "ncclGetUniqueId failed";
        return false;
    }
    names_used.push_back(segment_name(id));
    memset(b, 0, sizeof *b);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            *why = "fork failed";
            return false;
        }
        if (pid == 0) {
            if (o.fault) setenv("DS_EMU_FAULT", o.fault, 1);
            if (o.seed) setenv("DS_EMU_SEED", o.seed, 1);
            if (o.init_timeout) setenv("DS_EMU_NCCL_INIT_TIMEOUT", o.init_timeout, 1);
            int devices = o.devices ? o.devices : n;
            setenv("DS_EMU_DEVICES", std::to_string(devices).c_str(), 1);
            if (o.per_rank_visible) setenv("CUDA_VISIBLE_DEVICES", std::to_string(r % devices).c_str(), 1);
            alarm(o.timeout_s);
            this_rank = r;
            rank_env e;
            e.device = o.per_rank_visible ? 0 : r % devices;
            e.rank = r;
            e.n = n;
            e.id = id;
            e.b = b;
            body(e);
            fflush(stdout);
            fflush(stderr);
            _exit(0);
        }
        pids.push_back(pid);
    }
    bool ok = true;
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        ok = false;
        char buf[96];
        if (WIFSIGNALED(status))
            snprintf(buf, sizeof buf, "rank %d killed by signal %d%s; ", r, WTERMSIG(status),
                     WTERMSIG(status) == SIGALRM ? " (hung)" : "");
        else
            snprintf(buf, sizeof buf, "rank %d exited with %d; ", r, WEXITSTATUS(status));
        *why += buf;
    }
    return ok;
}

/* every rank's bits the same for every call; the distinct results counted */
static bool same_bits(const board *b, int n, std::string *why, int *distinct = NULL)
{
    std::set<uint64_t> seen;
    for (int k = 0; k < b->ncalls; k++) {
        for (int r = 1; r < n; r++)
            if (b->hash[k][r] != b->hash[k][0]) {
                *why = "call " + std::to_string(k) + ": rank " + std::to_string(r) + "'s result differs from rank 0's";
                return false;
            }
        seen.insert(b->hash[k][0]);
    }
    if (b->ncalls == 0) {
        *why = "no results reported";
        return false;
    }
    if (distinct) *distinct = (int)seen.size();
    return true;
}

static void check_ranks(const char *name, int n, const run_opts &o, void (*body)(rank_env &), board *b,
                        bool results)
{
    std::string why;
    bool ok = run_ranks(n, o, body, b, &why);
    if (ok && results) ok = same_bits(b, n, &why);
    report(name, ok, why);
}

/* the segments this test's ids named still in /dev/shm (by their full names: a segment left
 * by another process that once had this pid is not this test's) */
static int leftover_segments()
{
    int n = 0;
    for (const std::string &name : names_used) n += segment_exists(name);
    return n;
}

/* A job ended before all its ranks arrived leaves its segment (no rank was last to arrive);
 * the next ncclGetUniqueId removes it once the process that named it and every rank it
 * records are gone, and not before. Here a child names the id and arrives as rank 0 of 2;
 * rank 1 never comes; the child is killed while it waits. */
static void check_stale_segment_swept(board *b)
{
    memset(b, 0, sizeof *b);
    static char name[96];
    char *shared = (char *)mmap(NULL, sizeof name, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        report("stale_segment_swept", false, "mmap failed");
        return;
    }
    memset(shared, 0, sizeof name);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(1);
        std::string nm = segment_name(id);
        snprintf(shared, sizeof name, "%s", nm.c_str());
        setenv("DS_EMU_NCCL_INIT_TIMEOUT", "30", 1);
        setenv("DS_EMU_DEVICES", "1", 1);
        ncclComm_t comm;
        ncclCommInitRank(&comm, 2, id, 0);   /* waits for rank 1 until killed */
        _exit(1);
    }
    std::string why, seg;
    for (int i = 0; i < 2000 && seg.empty(); i++) {   /* the child's name, then its segment */
        if (shared[0] && segment_exists(shared)) seg = shared;
        else nap_ms(5);
    }
    bool ok = !seg.empty();
    if (!ok) why = "the waiting rank's segment never appeared";
    /* until rank 0's record holds the child's pid (emu_nccl.cc's layout: the 64-byte header,
     * then the rank records, each opening with its pid), sweeping meanwhile */
    int fd = ok ? shm_open(seg.c_str(), O_RDONLY, 0) : -1;
    void *map = fd >= 0 ? mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) close(fd);
    if (ok && map == MAP_FAILED) ok = false, why = "could not map " + seg;
    bool recorded = false;
    for (int i = 0; ok && i < 4000 && !recorded; i++) {
        recorded = ((const volatile int32_t *)((const char *)map + 64))[0] == (int32_t)pid;
        ncclUniqueId other;
        ok = ncclGetUniqueId(&other) == ncclSuccess && segment_exists(seg);
        if (!ok) why = "removed while its rank was alive and waiting";
        nap_ms(5);
    }
    if (map != MAP_FAILED) munmap(map, 4096);
    if (ok && !recorded) ok = false, why = "the waiting rank's record never appeared";
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (ok && !segment_exists(seg)) ok = false, why = "the killed rank's segment was gone before any sweep: nothing tested";
    ncclUniqueId after;
    if (ok && (ncclGetUniqueId(&after) != ncclSuccess || segment_exists(seg)))
        ok = false, why = seg + " left after its only rank was killed";
    if (!seg.empty()) shm_unlink(seg.c_str());
    munmap(shared, sizeof name);
    report("stale_segment_swept", ok, why);
}

int main(void)
{
    board *b = (board *)mmap(NULL, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    run_opts plain;
    check_ranks("sum_1rank", 1, plain, case_sum, b, true);
    check_ranks("sum_2ranks", 2, plain, case_sum, b, true);
    check_ranks("sum_3ranks", 3, plain, case_sum, b, true);
    check_ranks("large_3ranks", 3, plain, case_large, b, true);
    check_ranks("p2p_1rank", 1, plain, case_p2p, b, true);
    check_ranks("p2p_2ranks", 2, plain, case_p2p, b, true);
    check_ranks("p2p_3ranks", 3, plain, case_p2p, b, true);
    run_opts visible;
    visible.per_rank_visible = true;
    check_ranks("sum_3ranks_one_visible_device_each", 3, visible, case_sum, b, true);
    run_opts two_devices;
    two_devices.devices = 2;
    check_ranks("duplicate_gpu_refused", 3, two_devices, case_duplicate, b, false);
    run_opts one_visible;
    one_visible.devices = 1;
    one_visible.per_rank_visible = true;   /* CUDA_VISIBLE_DEVICES=0 on every rank */
    check_ranks("duplicate_gpu_refused_one_visible", 3, one_visible, case_duplicate, b, false);

    {
        /* the same seed gives the same sequence of results; the order varies within it */
        run_opts seeded;
        seeded.seed = "5";
        std::string why;
        int distinct = 0;
        bool ok = run_ranks(3, seeded, case_order, b, &why) && same_bits(b, 3, &why, &distinct);
        if (ok && distinct < 2) ok = false, why = "every call gave the same bits: the order never varied";
        report("order_varies", ok, why);
        std::vector<uint64_t> first(b->ncalls);
        for (int k = 0; k < b->ncalls; k++) first[k] = b->hash[k][0];
        ok = ok && run_ranks(3, seeded, case_order, b, &why) && same_bits(b, 3, &why);
        for (int k = 0; ok && k < b->ncalls; k++)
            if (b->hash[k][0] != first[k]) ok = false, why = "call " + std::to_string(k) + " differs under the same seed";
        report("order_follows_seed", ok, why);
        run_opts other;
        other.seed = "6";
        ok = ok && run_ranks(3, other, case_order, b, &why) && same_bits(b, 3, &why);
        bool differs = false;
        for (int k = 0; ok && k < b->ncalls; k++) differs |= b->hash[k][0] != first[k];
        if (ok && !differs) ok = false, why = "seeds 5 and 6 gave the same results";
        report("order_changes_with_seed", ok, why);
    }

    run_opts stall;
    stall.fault = "nccl_stall=1";
    check_ranks("stall_abort", 3, stall, case_stall, b, false);
    run_opts exiting;
    exiting.fault = "nccl_stall=2";
    check_ranks("peer_exit", 3, exiting, case_peer_exit, b, false);
    run_opts init_fail;
    init_fail.fault = "nccl_init_fail";
    check_ranks("init_fail", 2, init_fail, case_init_fail, b, false);
    run_opts missing;
    missing.init_timeout = "0.5";
    check_ranks("init_missing_rank", 1, missing, case_missing, b, false);

    check_stale_segment_swept(b);

    int left = leftover_segments();
    report("no_segment_left", left == 0, std::to_string(left) + " segments left in /dev/shm");
    return failures ? 1 : 0;
}

/* emu_nccl: the NCCL of the emulated device (emu.h): the communicator calls and the one
 * collective ds uses, between the processes of one machine, through POSIX shared memory.
 * Every entry point has the signature of the installed nccl.h.
 *
 * Emulated: ncclGetUniqueId, ncclCommInitRank, ncclAllReduce (sum, prod, max, min, avg of
 * the 8-, 32- and 64-bit integers, float32 and float64), ncclSend and ncclRecv (any type
 * emulated; alone or in a group), ncclGroupStart/ncclGroupEnd,
 * ncclCommGetAsyncError, ncclGetErrorString (NCCL's own strings), ncclGetLastError,
 * ncclCommFinalize, ncclCommDestroy, ncclCommAbort, ncclCommCount, ncclCommUserRank,
 * ncclGetVersion. A collective is queued on the caller's stream (emu::enqueue) and runs on
 * that stream's worker, out of step with the host, as a real NCCL kernel does; operations
 * of one communicator run in the order they were issued, whatever their streams.
 *
 * The order of summation is not fixed, as real NCCL's is not (it follows the ring, the
 * channels and the algorithm chosen for the size): the buffer is cut into blocks of 8 KiB,
 * each reduced by one rank (a different one from call to call), which adds the ranks'
 * copies of the block in an order drawn from emu::random("nccl") (DS_EMU_SEED). Every rank
 * then copies the same sums, so all ranks end with identical bits, as with real NCCL. With
 * two ranks the order cannot show (a + b == b + a); with three or more it does.
 *
 * Checked beyond what NCCL checks: send and receive buffers must lie in live device memory
 * and may be the same buffer but must not overlap otherwise; every rank must issue the same
 * collective (count, type, operation) as its peers, in the same order; a communicator
 * handle must be live (not destroyed or aborted). Each of these is a defect (emu::defect).
 *
 * Shared memory: the unique id names a segment ("/ds-emu-nccl-PID-RANDOM"), created by the
 * first rank to arrive in ncclCommInitRank and unlinked by the last, so it outlives no job
 * killed afterwards; that of a job ended before all its ranks arrived is removed by the next
 * ncclGetUniqueId on the machine once every process it records is gone. It holds a header, one record per rank (pid, state,
 * barrier count, the descriptor of its current collective) and nranks + 1 slots of 1 MiB
 * (one per rank for its contribution, one for the sums). A collective moves a piece of up
 * to one slot at a time: each rank copies its piece into its slot and arrives at a barrier;
 * the owner of each block adds the slots' copies into the sum slot; a second barrier; every
 * rank copies the sums out. A barrier is each rank's count of barriers reached, raised with
 * release order and read with acquire order; the waiting spins, then sleeps 50 us at a time.
 * While it waits, a rank watches its peers: one that aborted, failed or left its
 * communicator, or one not yet arrived whose process is gone (kill(pid, 0), or a zombie),
 * ends the wait with ncclRemoteError, recorded as the communicator's asynchronous error; the
 * collective then finishes (the receive buffer's contents undefined) and every later one on
 * the communicator finishes at once with the same error. A peer that is alive but stuck is
 * waited for without limit, as with real NCCL over NVLink: the program's watchdog must end
 * it (ncclCommAbort).
 *
 * Fault switches (DS_EMU_FAULT):
 *   nccl_stall=R      the first collective that rank R (of any communicator) issues in
 *                     this process never completes: it waits, holding its stream, until
 *                     its communicator is aborted, and sees no peer's error meanwhile;
 *                     the peers wait for it (no error: it is alive). A bare nccl_stall is
 *                     rank 0.
 *   nccl_fail=R[:K]   rank R's K-th operation (collective or group; 1-based, default 1)
 *                     fails while its process lives on: its communicator's asynchronous
 *                     error is ncclSystemError (NCCL's words as the last error), the
 *                     operation finishes with its output undefined, and its peers, waiting
 *                     for it, see ncclRemoteError.
 *   nccl_init_stall=R ncclCommInitRank of rank R never meets its peers and never returns:
 *                     the process is alive, stuck before the rendezvous (the peers wait for
 *                     it up to DS_EMU_NCCL_INIT_TIMEOUT).
 *   nccl_finalize_stall=R
 *                     ncclCommFinalize of rank R never returns until its communicator is
 *                     aborted (ncclCommAbort from another thread).
 *   nccl_init_fail[=R] ncclCommInitRank of rank R (bare: of every rank) answers
 *                     ncclSystemError, with a message, without meeting its peers (which
 *                     then wait for it until their own timeout).
 * Devices. A communicator belongs to the device current at ncclCommInitRank. As NCCL (2.5 to
 * 2.29), two ranks of one communicator on one device (the same PCI bus id: emu_runtime.cc)
 * are refused on every rank once all have arrived: ncclInvalidUsage, with NCCL's words
 * "Duplicate GPU detected : rank I and rank J both on CUDA device BUSID" as the last error.
 * A collective or group queued on a stream of another device fails as NCCL's kernel launch
 * would (ncclUnhandledCudaError, "invalid resource handle"); a buffer in another device's
 * memory is a defect.
 * DS_EMU_NCCL_INIT_TIMEOUT (seconds, default 60): how long ncclCommInitRank waits for all
 * ranks to arrive before it answers ncclSystemError naming the missing ones.
 *
 * Point-to-point. ncclSend and ncclRecv inside ncclGroupStart/ncclGroupEnd are kept until
 * the outermost ncclGroupEnd, which queues them as one operation on their stream (a send or
 * receive outside a group is a group of its own), as NCCL runs a group's sends and receives
 * together, so that a group in which every rank sends to and receives from every other
 * cannot deadlock. The data moves bit for bit (a copy, no arithmetic). Each rank's slot is
 * cut into one part per peer; a group moves a part's worth per peer per round, with a
 * barrier after the copies in and another after the copies out. Send to and receive from
 * oneself is a copy. Checked: each receive has the matching send on its peer (the same
 * bytes), which is a defect otherwise (real NCCL would hang or corrupt); buffers in live
 * device memory. Not emulated (ncclInvalidUsage, with a message): a group over several
 * communicators or streams, more than one send (receive) to the same peer in one group, a
 * collective and point-to-point in one group. The emulation's rendezvous is every rank of
 * the communicator: each rank must issue a group at the same place in its order of
 * operations, even one with no operation toward some peers (real NCCL involves only the
 * peers named; ds's groups always involve every rank).
 *
 * Not emulated: NCCL's transports, topology, algorithms and protocols, its speed, its
 * environment variables, ranks on more than one machine, non-blocking communicators and
 * ncclCommInitRankConfig, split and shrink, the other collectives, fp16/bf16/fp8 reductions
 * (ncclInvalidArgument), user-defined reduction operators, and deferring a collective in a
 * group: ncclAllReduce is queued when it is called, inside a group or not (correct for ds's
 * one collective a group; ncclCommInitRank inside a group blocks as outside one). */
#include "emu.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace {

constexpr size_t SLOT_BYTES = (size_t)1 << 20;    /* one rank's piece of a collective */
constexpr size_t BLOCK_BYTES = (size_t)8 << 10;   /* the unit whose summation order is drawn */
constexpr int MAX_RANKS = 256;                    /* one machine's worth of processes */
constexpr char ID_MAGIC[] = "ds-emu-nccl-id";
constexpr double PEER_CHECK_MS = 20;              /* how often a waiting rank looks for dead peers */

/* ---- the shared segment ---- */

enum peer_state : uint32_t {
    PEER_ABSENT = 0,   /* not arrived in ncclCommInitRank */
    PEER_ALIVE,
    PEER_ABORTED,      /* ncclCommAbort */
    PEER_FAILED,       /* gave up on an error of its own or of a peer */
    PEER_LEFT,         /* ncclCommDestroy */
};

/* Every field of the segment is reached by several processes; these atomics are address
 * free (lock free on every target we build for), so they work across mappings. */
static_assert(std::atomic<uint64_t>::is_always_lock_free, "process-shared atomics need lock-free 64-bit atomics");

struct alignas(64) shm_header {
    std::atomic<uint32_t> nranks;        /* set by the first to arrive; 0 before */
    std::atomic<uint32_t> arrived;       /* ranks that have mapped the segment */
    std::atomic<uint32_t> init_failed;   /* a rank gave up in ncclCommInitRank */
};

struct alignas(64) shm_rank {
    std::atomic<int32_t> pid;
    std::atomic<uint32_t> state;         /* peer_state */
    std::atomic<uint64_t> barrier;       /* barriers this rank has reached */
    /* the collective it is in, written before its first barrier (for the mismatch check) */
    std::atomic<uint64_t> seq, count;
    std::atomic<int32_t> dtype, op;
    std::atomic<int64_t> bus_id;         /* its device's PCI bus id, as NCCL's peer info has it */
    char why[160];                       /* why it gave up, written before state PEER_FAILED */
};

/* After the ranks' records: the point-to-point matrix, p2p[i * nranks + j] = 1 + the bytes
 * rank i sends rank j in its current group (0: no send). */
size_t header_bytes(int nranks)
{
    size_t b = sizeof(shm_header) + (size_t)nranks * sizeof(shm_rank) + (size_t)nranks * nranks * sizeof(uint64_t);
    return (b + 4095) / 4096 * 4096;
}

size_t segment_bytes(int nranks) { return header_bytes(nranks) + (size_t)(nranks + 1) * SLOT_BYTES; }

/* ---- the process's side of a communicator ---- */

struct comm_state {
    int rank = 0, nranks = 0;
    int device = 0;                      /* current at ncclCommInitRank */
    std::string name;                    /* the segment's name, for messages */
    char *map = nullptr;
    size_t map_bytes = 0;
    shm_header *hdr = nullptr;
    shm_rank *ranks = nullptr;
    std::atomic<uint64_t> *p2p = nullptr;   /* nranks x nranks (header_bytes) */
    char *slots = nullptr;               /* nranks slots, then the sums */

    std::atomic<int> async{ncclSuccess};   /* first error of a collective; sticky */
    std::atomic<bool> aborted{false};

    /* The order of operations: each gets a number when issued and runs when next_run
     * reaches it. Under m, with running (an operation is inside its rendezvous) and
     * pending (issued, not finished). */
    std::mutex m;
    std::condition_variable cv;
    uint64_t issued = 0, next_run = 0;
    int pending = 0;
    bool running = false, finalized = false;

    /* touched only by the operation whose turn it is (the turn passes under m) */
    uint64_t barriers = 0;

    char *slot(int r) const { return slots + (size_t)r * SLOT_BYTES; }
    char *sums() const { return slots + (size_t)nranks * SLOT_BYTES; }

    ~comm_state()
    {
        if (map) munmap(map, map_bytes);
    }
};

}  // namespace

/* The handle nccl.h declares: what the program holds. Operations hold the state itself, so
 * an abort or destroy while one is still queued leaves it something to run against. */
struct ncclComm {
    std::shared_ptr<comm_state> s;
};

namespace {

/* Allocated once and never freed: a stream's worker may still use these while the
 * process's static destructors run. */
struct globals {
    std::mutex m;
    std::set<const ncclComm *> live;
    std::string last_error;
};

globals &g()
{
    static globals *p = new globals;
    return *p;
}

thread_local int group_depth = 0;
std::atomic<bool> stall_used{false};

/* ncclGetLastError's text: the latest failure of any call, as NCCL keeps it. */
void set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_last_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> lock(g().m);
        g().last_error = buf;
    }
    emu::note("nccl: %s", buf);
}

/* The live communicator behind a handle; a handle that is not live is a defect. */
comm_state *live(const ncclComm *c, const char *fn)
{
    std::lock_guard<std::mutex> lock(g().m);
    if (!g().live.count(c)) emu::defect("%s: communicator %p is not live (destroyed, aborted, or never made)", fn, (const void *)c);
    return c->s.get();
}

void forget(const ncclComm *c)
{
    std::lock_guard<std::mutex> lock(g().m);
    g().live.erase(c);
}

const char *type_name(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "float8e4m3";
    case ncclFloat8e5m2: return "float8e5m2";
    default: return "unknown type";
    }
}

/* The element size of the types emulated; 0 for the others. */
size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

const char *op_name(ncclRedOp_t op)
{
    switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "unknown operation";
    }
}

void nap_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* A waiting loop's pause: a few yields first (a peer a moment behind), then short sleeps,
 * which leave the cores to the ranks being waited for. */
struct backoff {
    int spins = 0;
    void pause()
    {
        if (spins < 64) {
            spins++;
            std::this_thread::yield();
        } else {
            nap_us(50);
        }
    }
};

/* Whether process pid has ended: gone, or a zombie its parent has not reaped yet. */
bool process_gone(pid_t pid)
{
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');   /* the command name may hold spaces */
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Removes the segments of jobs that ended before all their ranks arrived (killed, or ended by
 * their watchdog while a peer was stuck before ncclCommInitRank): the last rank to arrive
 * unlinks a segment, and here none did. One is stale when the process that named it (the
 * pid in its name, ncclGetUniqueId's caller) and every rank recorded in it are gone; one
 * with no rank recorded yet may be a rank's, between shm_open and its record, and is left. */
void sweep_stale_segments()
{
    static const char prefix[] = "ds-emu-nccl-";
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    while (struct dirent *de = readdir(d)) {
        if (strncmp(de->d_name, prefix, sizeof prefix - 1)) continue;
        pid_t named = (pid_t)atoi(de->d_name + sizeof prefix - 1);
        if (named <= 0 || !process_gone(named)) continue;
        std::string name = std::string("/") + de->d_name;
        int fd = shm_open(name.c_str(), O_RDONLY, 0);
        if (fd < 0) continue;
        struct stat st;
        void *map = MAP_FAILED;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= header_bytes(1))
            map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (map == MAP_FAILED) continue;
        const shm_header *hdr = (const shm_header *)map;
        const shm_rank *ranks = (const shm_rank *)((const char *)map + sizeof(shm_header));
        uint32_t n = hdr->nranks.load();
        bool stale = n >= 1 && n <= (uint32_t)MAX_RANKS && (size_t)st.st_size >= header_bytes((int)n);
        int recorded = 0;
        for (uint32_t j = 0; stale && j < n; j++) {
            pid_t pid = ranks[j].pid.load();
            if (pid > 0) recorded++, stale = process_gone(pid);
        }
        munmap(map, (size_t)st.st_size);
        if (stale && recorded) shm_unlink(name.c_str());
    }
    closedir(d);
}

const char *state_words(uint32_t st)
{
    switch (st) {
    case PEER_ABORTED: return "aborted its communicator";
    case PEER_LEFT: return "destroyed its communicator";
    default: return "is not in the communicator";
    }
}

/* ---- the rendezvous ---- */

struct failure {
    ncclResult_t rc = ncclSuccess;
    std::string why;
};

/* Whether every rank has reached barrier `target`. */
bool all_reached(const comm_state *c, uint64_t target)
{
    for (int j = 0; j < c->nranks; j++)
        if (c->ranks[j].barrier.load(std::memory_order_acquire) < target) return false;
    return true;
}

/* Why barrier `target` cannot complete, or an empty string while it still may: a peer that
 * aborted, failed or left (arrived or not: it will not go on), or one not yet arrived whose
 * process is gone (one that arrived and died is caught at the next barrier). */
std::string broken(const comm_state *c, uint64_t target, bool check_pids)
{
    char why[sizeof(shm_rank::why) + 64];
    for (int j = 0; j < c->nranks; j++) {
        if (j == c->rank) continue;
        const shm_rank &p = c->ranks[j];
        uint32_t st = p.state.load(std::memory_order_acquire);
        if (st == PEER_FAILED) {
            /* its cause, which names the rank at the root of it */
            char cause[sizeof p.why];
            memcpy(cause, p.why, sizeof cause);
            cause[sizeof cause - 1] = 0;
            snprintf(why, sizeof why, "rank %d (pid %d) gave up: %s", j, (int)p.pid.load(), cause);
            return why;
        }
        if (st != PEER_ALIVE) {
            snprintf(why, sizeof why, "rank %d (pid %d) %s", j, (int)p.pid.load(), state_words(st));
            return why;
        }
        if (check_pids && p.barrier.load(std::memory_order_acquire) < target && process_gone(p.pid.load())) {
            snprintf(why, sizeof why, "rank %d (pid %d) exited or was killed", j, (int)p.pid.load());
            return why;
        }
    }
    return "";
}

/* Raises this rank's barrier count and waits until every rank has reached it. Fails when
 * this communicator is aborted, or when a peer cannot get there any more. */
failure barrier(comm_state *c)
{
    uint64_t target = ++c->barriers;
    c->ranks[c->rank].barrier.store(target, std::memory_order_release);
    backoff b;
    double next_check = emu::now_ms() + PEER_CHECK_MS;
    for (;;) {
        if (all_reached(c, target)) return {};
        if (c->aborted.load()) return {ncclInvalidUsage, "the communicator was aborted"};
        bool check_pids = emu::now_ms() >= next_check;
        if (check_pids) next_check = emu::now_ms() + PEER_CHECK_MS;
        std::string why = broken(c, target, check_pids);
        /* a peer may end its communicator, or its process, just after the last rank reached
         * the barrier: its change is seen after that arrival, so looking again tells */
        if (!why.empty()) return all_reached(c, target) ? failure{} : failure{ncclRemoteError, why};
        b.pause();
    }
}

/* A small generator for one block's order, seeded from the shared stream. */
uint64_t mix(uint64_t &x)
{
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void draw_order(int *order, int n, int rank)
{
    uint64_t x = emu::random("nccl") ^ ((uint64_t)(rank + 1) * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) std::swap(order[i], order[mix(x) % (uint64_t)(i + 1)]);
}

template <typename T>
T combine(T a, T b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: return (T)(a * b);
    case ncclMax: return a < b ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return (T)(a + b);   /* sum, and avg before its division */
    }
}

/* out[i] = the ranks' slot copies of [from, from + n) combined in `order`, left to right. */
template <typename T>
void reduce_block(const comm_state *c, T *out, size_t from, size_t n, const int *order, ncclRedOp_t op)
{
    memcpy(out, (const T *)c->slot(order[0]) + from, n * sizeof(T));
    for (int k = 1; k < c->nranks; k++) {
        const T *in = (const T *)c->slot(order[k]) + from;
        for (size_t i = 0; i < n; i++) out[i] = combine(out[i], in[i], op);
    }
    if (op == ncclAvg)
        for (size_t i = 0; i < n; i++) out[i] = (T)(out[i] / (T)c->nranks);
}

struct collective {
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    uint64_t seq;
};

/* The descriptors every rank published for this collective must agree: a program whose
 * ranks disagree would read garbage or hang on a real machine. */
void check_same(const comm_state *c, const collective &a)
{
    for (int j = 0; j < c->nranks; j++) {
        const shm_rank &p = c->ranks[j];
        uint64_t seq = p.seq.load(std::memory_order_relaxed), count = p.count.load(std::memory_order_relaxed);
        int dtype = p.dtype.load(std::memory_order_relaxed), op = p.op.load(std::memory_order_relaxed);
        if (seq != a.seq || count != a.count || dtype != a.dtype || op != a.op)
            emu::defect("ncclAllReduce: the ranks disagree: rank %d issues collective #%llu of %llu %s (%s), "
                        "rank %d collective #%llu of %zu %s (%s)",
                        j, (unsigned long long)seq, (unsigned long long)count, type_name((ncclDataType_t)dtype),
                        op_name((ncclRedOp_t)op), c->rank, (unsigned long long)a.seq, a.count,
                        type_name(a.dtype), op_name(a.op));
    }
}

template <typename T>
failure allreduce_as(comm_state *c, const collective &a)
{
    const size_t piece = SLOT_BYTES / sizeof(T), block = BLOCK_BYTES / sizeof(T);
    const T *send = (const T *)a.send;
    T *recv = (T *)a.recv;
    int order[MAX_RANKS];
    shm_rank &me = c->ranks[c->rank];
    me.seq.store(a.seq, std::memory_order_relaxed);
    me.count.store(a.count, std::memory_order_relaxed);
    me.dtype.store(a.dtype, std::memory_order_relaxed);
    me.op.store(a.op, std::memory_order_relaxed);
    for (size_t off = 0; off < a.count; off += piece) {
        size_t len = std::min(piece, a.count - off);
        memcpy(c->slot(c->rank), send + off, len * sizeof(T));
        failure f = barrier(c);
        if (f.rc) return f;
        if (off == 0) check_same(c, a);
        /* the owner of block b changes from call to call, so no rank always sums first */
        for (size_t b = 0, nb = (len + block - 1) / block; b < nb; b++) {
            if ((b + a.seq) % (size_t)c->nranks != (size_t)c->rank) continue;
            size_t from = b * block, n = std::min(block, len - from);
            draw_order(order, c->nranks, c->rank);
            reduce_block<T>(c, (T *)c->sums() + from, from, n, order, a.op);
        }
        if ((f = barrier(c)).rc) return f;
        /* the sums stay until every rank reaches the next piece's first barrier */
        memcpy(recv + off, c->sums(), len * sizeof(T));
    }
    return {};
}

failure allreduce(comm_state *c, const collective &a)
{
    if (c->nranks == 1) {
        if (a.send != a.recv) memcpy(a.recv, a.send, a.count * type_size(a.dtype));
        return {};
    }
    switch (a.dtype) {
    case ncclInt8: return allreduce_as<int8_t>(c, a);
    case ncclUint8: return allreduce_as<uint8_t>(c, a);
    case ncclInt32: return allreduce_as<int32_t>(c, a);
    case ncclUint32: return allreduce_as<uint32_t>(c, a);
    case ncclInt64: return allreduce_as<int64_t>(c, a);
    case ncclUint64: return allreduce_as<uint64_t>(c, a);
    case ncclFloat32: return allreduce_as<float>(c, a);
    case ncclFloat64: return allreduce_as<double>(c, a);
    default: return {ncclInvalidArgument, "type not emulated"};   /* refused when issued */
    }
}

/* nccl_stall: holds the stream as a kernel that never gets its peers' data would. */
failure stall(comm_state *c)
{
    emu::note("nccl: rank %d stalls in its collective (DS_EMU_FAULT=nccl_stall)", c->rank);
    while (!c->aborted.load()) nap_us(1000);
    return {ncclInvalidUsage, "the communicator was aborted"};
}

/* ---- point-to-point ---- */

/* One rank's group of sends and receives, by peer: 1 + the bytes (0: none). */
struct p2p_group {
    std::vector<const void *> send;
    std::vector<void *> recv;
    std::vector<uint64_t> send_bytes, recv_bytes;
    uint64_t seq = 0;
};

/* The group's rendezvous (the header comment): the sizes published, checked against the
 * peers', then the parts moved round by round through the slots. */
failure p2p_run(comm_state *c, const p2p_group &gp)
{
    const int n = c->nranks, r = c->rank;
    shm_rank &me = c->ranks[r];
    me.seq.store(gp.seq, std::memory_order_relaxed);
    me.count.store(0, std::memory_order_relaxed);
    me.dtype.store(-1, std::memory_order_relaxed);   /* no collective: a point-to-point group */
    me.op.store(-1, std::memory_order_relaxed);
    for (int j = 0; j < n; j++) c->p2p[(size_t)r * n + j].store(gp.send_bytes[j], std::memory_order_relaxed);
    failure f = barrier(c);
    if (f.rc) return f;
    for (int j = 0; j < n; j++) {
        const shm_rank &p = c->ranks[j];
        uint64_t seq = p.seq.load(std::memory_order_relaxed);
        int dtype = p.dtype.load(std::memory_order_relaxed);
        if (seq != gp.seq || dtype != -1)
            emu::defect("ncclGroupEnd (send/receive): the ranks disagree: rank %d issues operation #%llu (%s), "
                        "rank %d a point-to-point group as operation #%llu",
                        j, (unsigned long long)seq, dtype == -1 ? "a point-to-point group" : "a collective", r,
                        (unsigned long long)gp.seq);
        uint64_t sent = c->p2p[(size_t)j * n + r].load(std::memory_order_relaxed);
        if (sent != gp.recv_bytes[j])
            emu::defect("ncclGroupEnd (send/receive, operation #%llu): rank %d %s%.0llu%s to rank %d, which "
                        "%s%.0llu%s from it",
                        (unsigned long long)gp.seq, j, sent ? "sends " : "sends nothing",
                        (unsigned long long)(sent ? sent - 1 : 0), sent ? " bytes" : "", r,
                        gp.recv_bytes[j] ? "receives " : "receives nothing",
                        (unsigned long long)(gp.recv_bytes[j] ? gp.recv_bytes[j] - 1 : 0),
                        gp.recv_bytes[j] ? " bytes" : "");
    }
    if (gp.send_bytes[r]) memmove(gp.recv[r], gp.send[r], gp.send_bytes[r] - 1);
    const size_t part = SLOT_BYTES / (size_t)n / 64 * 64;
    uint64_t most = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            uint64_t b = c->p2p[(size_t)i * n + j].load(std::memory_order_relaxed);
            if (i != j && b) most = std::max(most, b - 1);
        }
    const size_t rounds = (most + part - 1) / part;
    for (size_t k = 0; k < rounds; k++) {
        const size_t off = k * part;
        for (int j = 0; j < n; j++) {
            uint64_t b = gp.send_bytes[j];
            if (j != r && b && off < b - 1) memcpy(c->slot(r) + j * part, (const char *)gp.send[j] + off, std::min(part, b - 1 - off));
        }
        if ((f = barrier(c)).rc) return f;
        for (int j = 0; j < n; j++) {
            uint64_t b = gp.recv_bytes[j];
            if (j != r && b && off < b - 1) memcpy((char *)gp.recv[j] + off, c->slot(j) + r * part, std::min(part, b - 1 - off));
        }
        if ((f = barrier(c)).rc) return f;
    }
    /* no rank writes its row of the matrix again before every rank has read it */
    if (rounds == 0) f = barrier(c);
    return f;
}

bool fails_now(int rank, uint64_t seq);

/* What the stream's worker runs for one operation (a collective, or a group). */
void run_op(const std::shared_ptr<comm_state> &sp, uint64_t seq, const char *name, bool stalls,
            const std::function<failure(comm_state *)> &body)
{
    comm_state *c = sp.get();
    {
        std::unique_lock<std::mutex> lock(c->m);
        c->cv.wait(lock, [&] { return c->next_run == seq || c->aborted.load(); });
        c->running = true;
    }
    if (!c->aborted.load() && c->async.load() == ncclSuccess) {
        failure f = fails_now(c->rank, seq)
                        ? failure{ncclSystemError, "NET/Socket : connection closed by the transport, the process "
                                                   "lives on (DS_EMU_FAULT=nccl_fail)"}
                        : stalls ? stall(c) : body(c);
        if (f.rc != ncclSuccess && !c->aborted.load()) {
            int expected = ncclSuccess;
            c->async.compare_exchange_strong(expected, f.rc);
            /* the peers waiting for this rank learn of it, and why, instead of waiting forever */
            shm_rank &me = c->ranks[c->rank];
            snprintf(me.why, sizeof me.why, "%s", f.why.c_str());
            me.state.store(PEER_FAILED, std::memory_order_release);
            set_last_error("%s (operation #%llu, rank %d of %d): %s", name, (unsigned long long)seq, c->rank,
                           c->nranks, f.why.c_str());
        }
    }
    std::lock_guard<std::mutex> lock(c->m);
    c->next_run = std::max(c->next_run, seq + 1);
    c->running = false;
    c->pending--;
    c->cv.notify_all();
}

void run(const std::shared_ptr<comm_state> &sp, const collective &a, bool stalls)
{
    run_op(sp, a.seq, "ncclAllReduce", stalls, [&a](comm_state *c) { return allreduce(c, a); });
}

/* The device's PCI bus id as NCCL reads it (its hex digits: 0000:19:00.0 is 0x19000) */
int64_t bus_id(int device)
{
    char pci[32];
    if (cudaDeviceGetPCIBusId(pci, sizeof pci, device) != cudaSuccess) return -1;
    int64_t id = 0;
    for (const char *c = pci; *c; c++)
        if (isxdigit((unsigned char)*c)) id = id * 16 + (isdigit((unsigned char)*c) ? *c - '0' : (tolower(*c) - 'a' + 10));
    return id;
}

/* A collective's stream must be of the communicator's device, as NCCL's kernel launch
 * requires; its last error says what CUDA would. */
bool stream_ok(const comm_state *c, cudaStream_t stream, const char *fn)
{
    if (emu::stream_device(stream) == c->device) return true;
    set_last_error("%s: Cuda failure 'invalid resource handle' (the stream is device %d's, the communicator "
                   "device %d's)", fn, emu::stream_device(stream), c->device);
    return false;
}

/* A send or receive waiting for the outermost ncclGroupEnd. */
struct p2p_op {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
    ncclComm *comm;
    cudaStream_t stream;
};
thread_local std::vector<p2p_op> group_ops;

/* The nccl_fail switch (R[:K]): whether operation seq (0-based) of rank `rank` fails */
bool fails_now(int rank, uint64_t seq)
{
    const char *f = emu::fault("nccl_fail");
    if (!f) return false;
    int r = *f ? atoi(f) : 0;
    const char *colon = strchr(f, ':');
    long k = colon ? atol(colon + 1) : 1;
    return r == rank && (uint64_t)k == seq + 1;
}

/* The nccl_init_stall and nccl_finalize_stall switches: whether rank `rank` stalls there */
bool stalls_at(const char *name, int rank)
{
    const char *f = emu::fault(name);
    return f && (*f ? atoi(f) : 0) == rank;
}

/* The nccl_stall switch: whether this operation of rank `rank` is the one that stalls. */
bool stalls_now(int rank)
{
    const char *st = emu::fault("nccl_stall");
    return st && (*st ? atoi(st) : 0) == rank && !stall_used.exchange(true);
}

/* Queues the sends and receives kept since the outermost ncclGroupStart as one operation. */
ncclResult_t group_flush()
{
    std::vector<p2p_op> ops;
    ops.swap(group_ops);
    if (ops.empty()) return ncclSuccess;
    ncclComm *comm = ops[0].comm;
    cudaStream_t stream = ops[0].stream;
    comm_state *c = live(comm, "ncclGroupEnd");
    const int n = c->nranks;
    p2p_group gp;
    gp.send.assign(n, nullptr);
    gp.recv.assign(n, nullptr);
    gp.send_bytes.assign(n, 0);
    gp.recv_bytes.assign(n, 0);
    for (const p2p_op &o : ops) {
        if (o.comm != comm || o.stream != stream) {
            set_last_error("ncclGroupEnd: a group over several communicators or streams is not emulated");
            return ncclInvalidUsage;
        }
        uint64_t &b = o.send ? gp.send_bytes[o.peer] : gp.recv_bytes[o.peer];
        if (b) {
            set_last_error("ncclGroupEnd: more than one %s rank %d in one group is not emulated",
                           o.send ? "send to" : "receive from", o.peer);
            return ncclInvalidUsage;
        }
        b = o.bytes + 1;
        if (o.send) gp.send[o.peer] = o.buf;
        else gp.recv[o.peer] = o.buf;
    }
    if (gp.send_bytes[c->rank] != gp.recv_bytes[c->rank])
        emu::defect("ncclGroupEnd: rank %d sends itself %llu bytes and receives %llu from itself", c->rank,
                    (unsigned long long)(gp.send_bytes[c->rank] ? gp.send_bytes[c->rank] - 1 : 0),
                    (unsigned long long)(gp.recv_bytes[c->rank] ? gp.recv_bytes[c->rank] - 1 : 0));
    {
        std::lock_guard<std::mutex> lock(c->m);
        if (c->finalized) {
            set_last_error("ncclGroupEnd: the communicator is finalized");
            return ncclInvalidUsage;
        }
    }
    ncclResult_t async = (ncclResult_t)c->async.load();
    if (async != ncclSuccess) return async;
    if (!stream_ok(c, stream, "ncclGroupEnd")) return ncclUnhandledCudaError;
    bool stalls = stalls_now(c->rank);
    std::shared_ptr<comm_state> sp = comm->s;
    {
        std::lock_guard<std::mutex> lock(c->m);
        gp.seq = c->issued++;
        c->pending++;
    }
    emu::enqueue(stream, "ncclGroupEnd (send/receive)", [sp, gp, stalls] {
        run_op(sp, gp.seq, "ncclGroupEnd (send/receive)", stalls, [&gp](comm_state *c) { return p2p_run(c, gp); });
    });
    return ncclSuccess;
}

/* ncclSend and ncclRecv: checked now, kept for the group's end (or queued at once alone). */
ncclResult_t p2p_add(bool send, void *buf, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                     cudaStream_t stream)
{
    const char *fn = send ? "ncclSend" : "ncclRecv";
    if (!comm) {
        set_last_error("%s: comm is NULL", fn);
        return ncclInvalidArgument;
    }
    comm_state *c = live(comm, fn);
    size_t size = type_size(datatype);
    if (!size) {
        set_last_error("%s: datatype %s (%d) is not emulated", fn, type_name(datatype), (int)datatype);
        return ncclInvalidArgument;
    }
    if (peer < 0 || peer >= c->nranks) {
        set_last_error("%s: peer %d is not a rank of the communicator (%d ranks)", fn, peer, c->nranks);
        return ncclInvalidArgument;
    }
    if (count > SIZE_MAX / size) {
        set_last_error("%s: count %zu of %s overflows", fn, count, type_name(datatype));
        return ncclInvalidArgument;
    }
    size_t bytes = count * size;
    if (bytes) {
        char what[160];
        snprintf(what, sizeof what, "%s: %s (%zu %s, %zu bytes, %s rank %d)", fn, send ? "sendbuff" : "recvbuff",
                 count, type_name(datatype), bytes, send ? "to" : "from", peer);
        emu::check_range(buf, bytes, emu::MEM_DEVICE, what);
        emu::check_device(buf, c->device, what);
        group_ops.push_back({send, buf, bytes, peer, comm, stream});
    }
    /* as NCCL: a count of 0 moves nothing and meets no peer */
    return group_depth == 0 ? group_flush() : ncclSuccess;
}

/* Waits until every operation issued on c has finished. */
void wait_pending(comm_state *c)
{
    std::unique_lock<std::mutex> lock(c->m);
    c->cv.wait(lock, [&] { return c->pending == 0; });
}

/* ---- ncclCommInitRank's pieces ---- */

struct unique_id {
    char magic[sizeof ID_MAGIC];
    char name[64];
};
static_assert(sizeof(unique_id) <= NCCL_UNIQUE_ID_BYTES, "the id must fit ncclUniqueId");

double init_timeout_s()
{
    const char *v = getenv("DS_EMU_NCCL_INIT_TIMEOUT");
    double t = v ? atof(v) : 0;
    return t > 0 ? t : 60;
}

/* Ends a failed init: peers still waiting stop at once, a late rank finds no segment. */
ncclResult_t init_fail(comm_state *c, ncclResult_t rc)
{
    c->hdr->init_failed.store(1);
    shm_rank &me = c->ranks[c->rank];
    if (me.pid.load() == getpid()) {
        snprintf(me.why, sizeof me.why, "it failed in ncclCommInitRank");
        me.state.store(PEER_FAILED, std::memory_order_release);
    }
    shm_unlink(c->name.c_str());
    return rc;
}

/* Waits until all ranks have mapped the segment; fails after the timeout, when a rank gave
 * up, or when one that arrived has died since. */
ncclResult_t await_ranks(comm_state *c)
{
    const double deadline = emu::now_ms() + init_timeout_s() * 1000;
    backoff b;
    double next_check = 0;
    while (c->hdr->arrived.load(std::memory_order_acquire) < (uint32_t)c->nranks) {
        if (c->hdr->init_failed.load()) {
            set_last_error("ncclCommInitRank (rank %d of %d): another rank gave up on the communicator", c->rank,
                           c->nranks);
            return init_fail(c, ncclSystemError);
        }
        double now = emu::now_ms();
        if (now >= next_check) {
            next_check = now + PEER_CHECK_MS;
            for (int j = 0; j < c->nranks; j++) {
                pid_t pid = c->ranks[j].pid.load();
                if (j != c->rank && process_gone(pid)) {
                    set_last_error("ncclCommInitRank (rank %d of %d): rank %d (pid %d) exited before all ranks "
                                   "arrived", c->rank, c->nranks, j, (int)pid);
                    return init_fail(c, ncclRemoteError);
                }
            }
        }
        if (now > deadline) {
            std::string missing;
            int n = 0;
            for (int j = 0; j < c->nranks; j++)
                if (!c->ranks[j].pid.load()) {
                    if (n++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(j);
                }
            set_last_error("ncclCommInitRank (rank %d of %d): rank%s %s%s did not arrive within %g s "
                           "(DS_EMU_NCCL_INIT_TIMEOUT)", c->rank, c->nranks, n > 1 ? "s" : "", missing.c_str(),
                           n > 16 ? ", ..." : "", init_timeout_s());
            return init_fail(c, ncclSystemError);
        }
        b.pause();
    }
    if (c->hdr->init_failed.load()) {
        set_last_error("ncclCommInitRank (rank %d of %d): another rank gave up on the communicator", c->rank, c->nranks);
        return init_fail(c, ncclSystemError);
    }
    return ncclSuccess;
}

}  // namespace

/* ---- the entry points ---- */

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* As NCCL: comm is not used (it may be NULL); the text is the process's latest failure.
 * The copy is the calling thread's, so a worker recording an error cannot change it under
 * the caller's eyes. */
const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    static thread_local std::string copy;
    std::lock_guard<std::mutex> lock(g().m);
    copy = g().last_error;
    return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId) {
        set_last_error("ncclGetUniqueId: uniqueId is NULL");
        return ncclInvalidArgument;
    }
    /* a name no other job draws: the pid and 64 random bits (no emu:: call here, so a test
     * may make the id and then fork its ranks) */
    sweep_stale_segments();
    uint64_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r ^= (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts;
    }
    if (fd >= 0) close(fd);
    unique_id id;
    memset(&id, 0, sizeof id);
    memcpy(id.magic, ID_MAGIC, sizeof ID_MAGIC);
    snprintf(id.name, sizeof id.name, "/ds-emu-nccl-%d-%016llx", (int)getpid(), (unsigned long long)r);
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, &id, sizeof id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (!comm) {
        set_last_error("ncclCommInitRank: comm is NULL");
        return ncclInvalidArgument;
    }
    *comm = NULL;
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
        set_last_error("ncclCommInitRank: rank %d of %d is out of range (1 to %d ranks emulated)", rank, nranks,
                       MAX_RANKS);
        return ncclInvalidArgument;
    }
    unique_id id;
    memcpy(&id, commId.internal, sizeof id);
    if (memcmp(id.magic, ID_MAGIC, sizeof ID_MAGIC) || !memchr(id.name, 0, sizeof id.name)) {
        set_last_error("ncclCommInitRank (rank %d of %d): the unique id was not made by ncclGetUniqueId", rank,
                       nranks);
        return ncclInvalidArgument;
    }
    if (stalls_at("nccl_init_stall", rank)) {
        emu::note("nccl: rank %d stalls before ncclCommInitRank meets its peers (fault nccl_init_stall)", rank);
        for (;;) pause();   /* alive, never arriving: until a signal ends the process */
    }
    const char *f = emu::fault("nccl_init_fail");
    if (f && (!*f || atoi(f) == rank)) {
        set_last_error("ncclCommInitRank (rank %d of %d): the transport could not be set up "
                       "(DS_EMU_FAULT=nccl_init_fail)", rank, nranks);
        return ncclSystemError;
    }

    auto s = std::make_shared<comm_state>();
    s->rank = rank;
    s->nranks = nranks;
    s->device = emu::current_device();
    s->name = id.name;
    /* whoever comes first creates it; the others find it (a fresh segment reads as zeros,
     * which is every field's starting state) */
    int fd = shm_open(id.name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        set_last_error("ncclCommInitRank (rank %d of %d): shm_open %s: %s", rank, nranks, id.name, strerror(errno));
        return ncclSystemError;
    }
    size_t bytes = segment_bytes(nranks);
    struct stat st;
    /* only ever grown: a rank told a smaller nranks must not cut the segment under another */
    if (fstat(fd, &st) != 0 || ((size_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0)) {
        set_last_error("ncclCommInitRank (rank %d of %d): sizing %s to %zu bytes: %s", rank, nranks, id.name, bytes,
                       strerror(errno));
        close(fd);
        shm_unlink(id.name);
        return ncclSystemError;
    }
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        set_last_error("ncclCommInitRank (rank %d of %d): mmap %s (%zu bytes): %s", rank, nranks, id.name, bytes,
                       strerror(errno));
        shm_unlink(id.name);
        return ncclSystemError;
    }
    s->map = (char *)map;
    s->map_bytes = bytes;
    s->hdr = (shm_header *)map;
    s->ranks = (shm_rank *)(s->map + sizeof(shm_header));
    s->p2p = (std::atomic<uint64_t> *)(s->map + sizeof(shm_header) + (size_t)nranks * sizeof(shm_rank));
    s->slots = s->map + header_bytes(nranks);

    if (s->hdr->init_failed.load()) {
        set_last_error("ncclCommInitRank (rank %d of %d): the other ranks gave up on the communicator", rank, nranks);
        shm_unlink(id.name);
        return ncclSystemError;
    }
    uint32_t expected = 0;
    if (!s->hdr->nranks.compare_exchange_strong(expected, (uint32_t)nranks) && expected != (uint32_t)nranks) {
        set_last_error("ncclCommInitRank (rank %d): nranks %d, but another rank was given %u", rank, nranks, expected);
        return init_fail(s.get(), ncclInvalidUsage);
    }
    int32_t nobody = 0;
    if (!s->ranks[rank].pid.compare_exchange_strong(nobody, (int32_t)getpid())) {
        set_last_error("ncclCommInitRank (rank %d of %d): rank %d is already taken by pid %d", rank, nranks, rank,
                       (int)nobody);
        return init_fail(s.get(), ncclInvalidUsage);
    }
    s->ranks[rank].bus_id.store(bus_id(s->device), std::memory_order_relaxed);
    s->ranks[rank].state.store(PEER_ALIVE, std::memory_order_release);
    /* the last to arrive unlinks: every rank has it mapped, and no name is left behind */
    if (s->hdr->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == (uint32_t)nranks) shm_unlink(id.name);
    ncclResult_t rc = await_ranks(s.get());
    if (rc != ncclSuccess) return rc;
    /* NCCL's duplicate check, after the peer information is gathered: every rank sees the
     * same records, so a rank that shares its device refuses, and the others learn that
     * their peers gave up (as NCCL's next bootstrap step would); none waits */
    const int64_t mine = s->ranks[rank].bus_id.load();
    for (int i = 0; i < nranks; i++)
        if (i != rank && s->ranks[i].bus_id.load() == mine) {
            set_last_error("Duplicate GPU detected : rank %d and rank %d both on CUDA device %llx", rank, i,
                           (unsigned long long)mine);
            s->ranks[rank].state.store(PEER_FAILED, std::memory_order_release);
            return ncclInvalidUsage;
        }
    for (int i = 0; i < nranks; i++)
        for (int j = i + 1; j < nranks; j++)
            if (s->ranks[i].bus_id.load() == s->ranks[j].bus_id.load()) {
                set_last_error("ncclCommInitRank (rank %d of %d): ranks %d and %d gave up on the communicator (both "
                               "on CUDA device %llx)", rank, nranks, i, j, (unsigned long long)s->ranks[i].bus_id.load());
                s->ranks[rank].state.store(PEER_FAILED, std::memory_order_release);
                return ncclRemoteError;
            }

    ncclComm *c = new ncclComm{std::move(s)};
    {
        std::lock_guard<std::mutex> lock(g().m);
        g().live.insert(c);
    }
    emu::note("nccl: rank %d of %d joined %s", rank, nranks, id.name);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    if (!comm) {
        set_last_error("ncclAllReduce: comm is NULL");
        return ncclInvalidArgument;
    }
    comm_state *c = live(comm, "ncclAllReduce");
    std::shared_ptr<comm_state> sp = comm->s;
    size_t size = type_size(datatype);
    if (!size) {
        set_last_error("ncclAllReduce: datatype %s (%d) is not emulated", type_name(datatype), (int)datatype);
        return ncclInvalidArgument;
    }
    if (op < ncclSum || op > ncclAvg) {
        set_last_error("ncclAllReduce: reduction operation %d is not emulated", (int)op);
        return ncclInvalidArgument;
    }
    {
        std::lock_guard<std::mutex> lock(c->m);
        if (c->finalized) {
            set_last_error("ncclAllReduce: the communicator is finalized");
            return ncclInvalidUsage;
        }
    }
    ncclResult_t async = (ncclResult_t)c->async.load();
    if (async != ncclSuccess) return async;   /* as NCCL: a failed communicator refuses work */
    if (count == 0) return ncclSuccess;       /* as NCCL: nothing moves, no rendezvous */
    if (count > SIZE_MAX / size) {
        set_last_error("ncclAllReduce: count %zu of %s overflows", count, type_name(datatype));
        return ncclInvalidArgument;
    }
    size_t bytes = count * size;
    char what[160];
    snprintf(what, sizeof what, "ncclAllReduce: sendbuff (%zu %s, %zu bytes)", count, type_name(datatype), bytes);
    emu::check_range(sendbuff, bytes, emu::MEM_DEVICE, what);
    emu::check_device(sendbuff, c->device, what);
    snprintf(what, sizeof what, "ncclAllReduce: recvbuff (%zu %s, %zu bytes)", count, type_name(datatype), bytes);
    emu::check_range(recvbuff, bytes, emu::MEM_DEVICE, what);
    emu::check_device(recvbuff, c->device, what);
    if (!stream_ok(c, stream, "ncclAllReduce")) return ncclUnhandledCudaError;
    const char *s0 = (const char *)sendbuff, *r0 = (const char *)recvbuff;
    if (s0 != r0 && s0 < r0 + bytes && r0 < s0 + bytes)
        emu::defect("ncclAllReduce: sendbuff %p and recvbuff %p overlap without being the same (%zu bytes each)",
                    sendbuff, recvbuff, bytes);

    if (!group_ops.empty()) {
        set_last_error("ncclAllReduce: a collective in a group of sends and receives is not emulated");
        return ncclInvalidUsage;
    }
    bool stalls = stalls_now(c->rank);
    collective a{sendbuff, recvbuff, count, datatype, op, 0};
    {
        std::lock_guard<std::mutex> lock(c->m);
        a.seq = c->issued++;
        c->pending++;
    }
    emu::enqueue(stream, "ncclAllReduce", [sp, a, stalls] { run(sp, a, stalls); },
                 {{sendbuff, bytes}, {recvbuff, bytes}});
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) {
        set_last_error("ncclGroupEnd: not inside ncclGroupStart");
        return ncclInvalidUsage;
    }
    return --group_depth == 0 ? group_flush() : ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return p2p_add(true, (void *)sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return p2p_add(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError) {
        set_last_error("ncclCommGetAsyncError: %s is NULL", comm ? "asyncError" : "comm");
        return ncclInvalidArgument;
    }
    *asyncError = (ncclResult_t)live(comm, "ncclCommGetAsyncError")->async.load();
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count) {
        set_last_error("ncclCommCount: %s is NULL", comm ? "count" : "comm");
        return ncclInvalidArgument;
    }
    *count = live(comm, "ncclCommCount")->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank) {
        set_last_error("ncclCommUserRank: %s is NULL", comm ? "rank" : "comm");
        return ncclInvalidArgument;
    }
    *rank = live(comm, "ncclCommUserRank")->rank;
    return ncclSuccess;
}

/* Blocking, as a default (blocking) communicator's is: every operation issued has run. */
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm) {
        set_last_error("ncclCommFinalize: comm is NULL");
        return ncclInvalidArgument;
    }
    comm_state *c = live(comm, "ncclCommFinalize");
    std::shared_ptr<comm_state> keep = comm->s;   /* an abort from another thread deletes comm */
    if (stalls_at("nccl_finalize_stall", c->rank)) {
        emu::note("nccl: rank %d stalls in ncclCommFinalize (fault nccl_finalize_stall)", c->rank);
        while (!c->aborted.load()) nap_us(1000);   /* until ncclCommAbort, from another thread */
        return ncclInvalidUsage;
    }
    wait_pending(c);
    {
        std::lock_guard<std::mutex> lock(c->m);
        c->finalized = true;
    }
    return (ncclResult_t)c->async.load();
}

/* As NCCL: NULL is no communicator, and nothing to do. Without ncclCommFinalize first the
 * issued operations are still waited for. */
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    comm_state *c = live(comm, "ncclCommDestroy");
    wait_pending(c);
    /* a peer still waiting for this rank (it issued more collectives) learns it left */
    if (c->ranks[c->rank].state.load() == PEER_ALIVE) c->ranks[c->rank].state.store(PEER_LEFT, std::memory_order_release);
    forget(comm);
    delete comm;
    return ncclSuccess;
}

/* Ends this rank's part at once: an operation in its rendezvous gives up (and returns the
 * stream to its other work) before this returns, one still queued will do nothing when it
 * runs, and peers waiting for this rank see ncclRemoteError. */
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    comm_state *c = live(comm, "ncclCommAbort");
    std::shared_ptr<comm_state> sp = comm->s;   /* keeps c alive past the delete below */
    forget(comm);
    c->aborted.store(true);
    c->ranks[c->rank].state.store(PEER_ABORTED, std::memory_order_release);
    {
        std::unique_lock<std::mutex> lock(c->m);
        c->cv.notify_all();
        c->cv.wait(lock, [&] { return !c->running; });
    }
    emu::note("nccl: rank %d of %d aborted its communicator", c->rank, c->nranks);
    delete comm;
    return ncclSuccess;
}

}  // extern "C"

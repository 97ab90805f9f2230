/* emu_runtime: the CUDA runtime of the emulated device (emu.h), on the CPU: device memory,
 * page-locked host memory, streams, events and kernel launches, with the checks a real GPU
 * does not make. Every entry point has the signature of the installed toolkit's
 * cuda_runtime_api.h, so the program under test is compiled exactly as for a GPU.
 *
 * sm_90's launch limits. Device memory is host memory the program must not touch directly: it
 * is reached through copies, kernels and library calls, which check every range.
 *
 * Devices. DS_EMU_DEVICES=N (default 1) devices, numbered 0 to N - 1 (the physical numbers);
 * CUDA_VISIBLE_DEVICES, when set, is read as CUDA reads it: a comma-separated list of
 * physical numbers, cut at the first entry that is not one (or repeats one), the process
 * seeing its entries as devices 0, 1, ...; an empty list is no device. Each host thread has
 * its current device (cudaSetDevice; 0 until set), and every stream, event and device
 * allocation belongs to the device current when it was made, as do the libraries' handles
 * and communicators. CUDA's multi-device rules (the Programming Guide's "Stream and Event
 * Behavior") are enforced: a kernel launched into a stream of a device that is not current
 * fails with cudaErrorInvalidResourceHandle; so does cudaEventRecord of an event and a
 * stream of different devices, and cudaEventElapsedTime across devices; copies, stream waits
 * and event synchronisation across devices succeed. A kernel's or a library's pointer into
 * another device's memory is a defect (no peer access is enabled). A device's PCI bus id is
 * 0000:XX:00.0 with XX = 0x19 + its physical number, which two processes on one device share.
 *
 * Streams. Each stream has a worker thread that runs its queue in order; a worker waits in
 * cudaStreamWaitEvent's operation until the event's captured record has completed; the host
 * runs on. The legacy default stream (NULL) is a stream of its own that waits for every
 * blocking stream and is waited for by them (non-blocking streams, which ds uses, are
 * independent of it). DS_EMU_SCHED chooses how late queued work runs:
 *   eager          (default) as soon as its worker gets to it;
 *   delay[=US]     each operation waits a random 0..US microseconds first (default 300),
 *                  seeded by DS_EMU_SEED: streams run out of step with each other and with
 *                  the host in a different way for each seed;
 *   lazy[=MS]      work is held back until someone waits for a stream (the host in a
 *                  synchronising call, or another stream's wait), or its oldest operation has
 *                  been queued MS milliseconds (default 50): as late as CUDA allows, so a
 *                  missing wait reads or overwrites memory at the worst moment.
 * Under every schedule, emu_order.cc checks the order of the streams' uses of device memory
 * (fed from enqueue_on, drain and the event calls): a missing wait is a defect there even
 * when the schedule happened to hide it.
 *
 * Kernels. A 16-byte vector access (load16/store16) must be 16-byte aligned, as on the GPU:
 * a misaligned one is a defect naming the kernel. A grid's blocks are spread over DS_EMU_BLOCK_THREADS threads (default 2; the
 * stream's worker is one of them); each block's threads are fibers of one CPU thread, run in
 * turn up to a __syncthreads or their end, so shared memory and barriers mean what they mean
 * on the device. Fibers switch by a few instructions of our own (x86-64), told to
 * AddressSanitizer and ThreadSanitizer as those require.
 *
 * Memory. Device allocations are filled with 0xff (NaN as float and bf16) and followed by 64
 * guard bytes, checked after every queued operation, at each synchronisation and at free; a
 * freed range stays poisoned and known (quarantine, up to 256 MiB) so a later use of it is
 * named as such. cudaFree and cudaFreeHost wait for the device, as the real ones do.
 * DS_EMU_MEMORY (bytes, default 16 GiB) is the device's size: larger totals fail as cudaMalloc
 * does.
 *
 * Faults (DS_EMU_FAULT, comma-separated; the libraries read their own, see their files):
 *   no_device       cudaGetDeviceCount answers cudaErrorNoDevice (no GPU, no driver);
 *   driver_old      cudaGetDeviceCount answers cudaErrorInsufficientDriver, the driver
 *                   supporting CUDA 11.4;
 *   init_error      cudaGetDeviceCount answers cudaErrorInitializationError;
 *   oom=N           the N-th cudaMalloc (1-based) and every one after it fail;
 *   no_pinned       cudaHostAlloc and cudaHostRegister are refused;
 *   launch_fail=K   every launch of a kernel whose name contains K fails as a kernel that
 *                   asks for more registers than a block has does on the device
 *                   (cudaErrorLaunchOutOfResources, nothing queued).
 * A launch that fails leaves its error to be read: a launch or a synchronisation with that
 * error still unread (no cudaGetLastError after the launch, so the
 * failure would surface later under another call's name) is a defect.
 *
 * Stream capture and graph replay: emu_graph.cc, which the calls here consult.
 *
 * Not emulated: the driver API, unified memory, graphs built node by node, cooperative launches, peer access,
 * a legacy default stream per device (the one legacy stream belongs to whichever device is
 * current), the legacy default stream's per-thread variant, the static shared memory limit
 * (ptxas reports it), warp-level intrinsics, and anything about speed. */
#include "emu.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define EMU_TSAN 1
#endif

/* ---- configuration ---- */

namespace {

struct config {
    std::string faults;
    uint64_t seed = 1;
    enum { EAGER, DELAY, LAZY } sched = EAGER;
    int delay_us = 300, lazy_ms = 50;
    int verbose = 0, block_threads = 2;
    size_t memory = (size_t)16 << 30;
    int devices = 1;              /* DS_EMU_DEVICES: the machine's */
    std::vector<int> visible;     /* the process's devices: their physical numbers */
};

/* CUDA_VISIBLE_DEVICES as CUDA reads it: the list up to its first entry that is not a
 * device of the machine (or names one a second time). */
std::vector<int> parse_visible(const char *v, int devices)
{
    std::vector<int> out;
    while (v && *v) {
        char *end;
        errno = 0;
        long d = strtol(v, &end, 10);
        if (end == v || errno || d < 0 || d >= devices || (*end && *end != ',')) break;
        bool again = false;
        for (int e : out) again |= e == d;
        if (again) break;
        out.push_back((int)d);
        v = *end ? end + 1 : end;
    }
    return out;
}

const config &cfg()
{
    static config c;
    static std::once_flag once;
    std::call_once(once, [] {
        const char *v;
        if ((v = getenv("DS_EMU_FAULT"))) c.faults = v;
        if ((v = getenv("DS_EMU_SEED"))) c.seed = strtoull(v, NULL, 10);
        if ((v = getenv("DS_EMU_VERBOSE"))) c.verbose = atoi(v) > 0;
        if ((v = getenv("DS_EMU_BLOCK_THREADS")) && atoi(v) > 0) c.block_threads = atoi(v);
        if ((v = getenv("DS_EMU_MEMORY")) && strtoull(v, NULL, 10) > 0) c.memory = strtoull(v, NULL, 10);
        if ((v = getenv("DS_EMU_DEVICES"))) {
            char *end;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 1 || n > 64) {
                fprintf(stderr, "ds-emu: DS_EMU_DEVICES=%s: not a number of devices from 1 to 64\n", v);
                exit(2);
            }
            c.devices = (int)n;
        }
        if ((v = getenv("CUDA_VISIBLE_DEVICES"))) c.visible = parse_visible(v, c.devices);
        else
            for (int d = 0; d < c.devices; d++) c.visible.push_back(d);
        if ((v = getenv("DS_EMU_SCHED")) && *v) {
            const char *eq = strchr(v, '=');
            std::string mode(v, eq ? (size_t)(eq - v) : strlen(v));
            if (mode == "eager") c.sched = config::EAGER;
            else if (mode == "delay") c.sched = config::DELAY, c.delay_us = eq ? atoi(eq + 1) : 300;
            else if (mode == "lazy") c.sched = config::LAZY, c.lazy_ms = eq ? atoi(eq + 1) : 50;
            else {
                fprintf(stderr, "ds-emu: DS_EMU_SCHED=%s: not eager, delay[=US] or lazy[=MS]\n", v);
                exit(2);
            }
        }
    });
    return c;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int cur_device = 0;   /* cudaSetDevice's, per host thread */
thread_local std::string unread_launch;   /* the kernel whose launch error is not yet read */

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess) last_error = e;
    return e;
}

}  // namespace

namespace emu {

const char *fault(const char *name)
{
    const std::string &f = cfg().faults;
    size_t len = strlen(name), at = 0;
    while (at <= f.size()) {
        size_t end = f.find(',', at);
        if (end == std::string::npos) end = f.size();
        if (end - at >= len && !f.compare(at, len, name)) {
            if (end - at == len) return "";
            if (f[at + len] == '=') {
                static thread_local std::string value;
                value = f.substr(at + len + 1, end - at - len - 1);
                return value.c_str();
            }
        }
        at = end + 1;
    }
    return NULL;
}

uint64_t random(const char *stream_name)
{
    static std::mutex m;
    static std::map<std::string, uint64_t> state;
    std::lock_guard<std::mutex> lock(m);
    auto it = state.find(stream_name);
    if (it == state.end()) {
        uint64_t h = 1469598103934665603ull;   /* FNV-1a of the name, then the seed */
        for (const char *c = stream_name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        it = state.emplace(stream_name, h ^ (cfg().seed * 0x9e3779b97f4a7c15ull)).first;
    }
    uint64_t z = (it->second += 0x9e3779b97f4a7c15ull);   /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double now_ms()
{
    static const auto t0 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void note(const char *fmt, ...)
{
    if (!cfg().verbose) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ds-emu: %s\n", buf);
}

static void dump_queues();

void defect(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ds-emu: defect: %s\n", buf);
    dump_queues();
    fflush(stderr);
    abort();
}

}  // namespace emu

/* ---- memory ---- */

namespace {

constexpr size_t GUARD = 64;
constexpr unsigned char GUARD_BYTE = 0xa5, POISON = 0xff, FREED = 0xfe;
constexpr size_t QUARANTINE = (size_t)256 << 20;

struct region {
    char *base;
    size_t bytes;
    int kind;           /* emu::MEM_DEVICE or emu::MEM_PINNED */
    bool live = true;
    bool registered = false;   /* pinned by cudaHostRegister (the program owns the memory) */
    int id;
    int device = -1;           /* device memory: the device it was allocated on */
    void *raw = nullptr;       /* what the emulator allocated (device, cudaHostAlloc) */
};

struct memory_map {
    std::mutex m;
    std::map<uintptr_t, region> by_base;
    std::deque<uintptr_t> quarantine;   /* freed device ranges, oldest first */
    size_t quarantined = 0;
    size_t device_bytes[64] = {};   /* per device */
    int next_id = 1, mallocs = 0;
};

memory_map &mem()
{
    static memory_map *m = new memory_map;   /* never destroyed: workers may run at exit */
    return *m;
}

/* The region containing p, or NULL (caller holds mem().m). */
region *find_locked(const void *p)
{
    auto &mm = mem();
    auto it = mm.by_base.upper_bound((uintptr_t)p);
    if (it == mm.by_base.begin()) return nullptr;
    --it;
    region &r = it->second;
    if ((uintptr_t)p < (uintptr_t)r.base + (r.bytes ? r.bytes : 1)) return &r;
    return nullptr;
}

const char *kind_name(int k) { return k == emu::MEM_DEVICE ? "device memory" : k == emu::MEM_PINNED ? "page-locked host memory" : "pageable host memory"; }

/* The first live device allocation whose guard bytes are not intact, as a message; empty
 * when all are. */
std::string guards_broken()
{
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    for (auto &e : mm.by_base) {
        region &r = e.second;
        if (!r.live || r.kind != emu::MEM_DEVICE) continue;
        const unsigned char *g = (const unsigned char *)r.base + r.bytes;
        for (size_t i = 0; i < GUARD; i++)
            if (g[i] != GUARD_BYTE) {
                char buf[256];
                snprintf(buf, sizeof buf, "device allocation #%d (%p, %zu bytes) written past its end: byte %zu after it",
                         r.id, (void *)r.base, r.bytes, i);
                return buf;
            }
    }
    return "";
}

}  // namespace

namespace emu {

int kind_of(const void *p, const void **base, size_t *size)
{
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    region *r = find_locked(p);
    if (!r || !r->live) {
        if (base) *base = p;
        if (size) *size = 0;
        return MEM_PAGEABLE;
    }
    if (base) *base = r->base;
    if (size) *size = r->bytes;
    return r->kind;
}

void check_range(const void *p, size_t bytes, int kinds, const char *what)
{
    if (!p) {
        if (bytes) defect("%s: NULL for %zu bytes", what, bytes);
        return;
    }
    auto &mm = mem();
    std::unique_lock<std::mutex> lock(mm.m);
    region *r = find_locked(p);
    if (!r) {
        lock.unlock();
        if (kinds & MEM_PAGEABLE) return;
        defect("%s: %p is not %s (no allocation holds it)", what, p, kinds & MEM_DEVICE ? "device memory" : kind_name(kinds));
    }
    region copy = *r;
    lock.unlock();
    if (!copy.live)
        defect("%s: %p lies in %s #%d (%zu bytes), which was freed", what, p, kind_name(copy.kind), copy.id, copy.bytes);
    if (!(kinds & copy.kind))
        defect("%s: %p is %s, not %s", what, p, kind_name(copy.kind),
               kinds & MEM_DEVICE ? "device memory" : kind_name(kinds & ~MEM_PAGEABLE));
    size_t off = (const char *)p - copy.base;
    if (bytes > copy.bytes - off)
        defect("%s: %zu bytes from offset %zu of %s #%d (%zu bytes) run %zu bytes past its end", what, bytes, off,
               kind_name(copy.kind), copy.id, copy.bytes, bytes - (copy.bytes - off));
}

int device_count() { return (int)cfg().visible.size(); }

int current_device() { return cur_device; }

int physical_device(int d) { return d >= 0 && d < device_count() ? cfg().visible[d] : -1; }

void check_device(const void *p, int device, const char *what)
{
    if (!p) return;
    auto &mm = mem();
    std::unique_lock<std::mutex> lock(mm.m);
    region *r = find_locked(p);
    if (!r || r->kind != MEM_DEVICE || r->device == device) return;
    region copy = *r;
    lock.unlock();
    defect("%s: %p is in device allocation #%d of device %d, used on device %d (no peer access)", what, p, copy.id,
           copy.device, device);
}

void check_current(int device, const char *what)
{
    if (device != cur_device)
        defect("%s: made on device %d, used while device %d is current (cudaSetDevice)", what, device, cur_device);
}

}  // namespace emu

/* ---- streams ---- */

struct op {
    std::string name;
    std::function<void()> fn;
    std::vector<emu::range> uses;
    double queued_ms;
};

struct CUstream_st {
    int id;
    int device;                 /* current when it was made */
    unsigned flags;
    std::mutex m;
    std::condition_variable cv;
    std::deque<op> q;
    std::string running;        /* the op the worker is running, for the queue listing */
    bool busy = false;          /* an op is running */
    int demand = 0;             /* lazy mode: how many wait for this stream */
    uint64_t queued = 0, done = 0;
};

struct CUevent_st {
    unsigned flags;
    int device;                             /* current when it was made */
    std::mutex m;
    std::condition_variable cv;
    uint64_t recorded = 0, completed = 0;   /* records captured by the host; records run */
    double ms = 0;
    CUstream_st *stream = nullptr;          /* of the last record */
};

namespace {

struct stream_list {
    std::mutex m;
    std::vector<CUstream_st *> all;   /* live streams, the legacy one first */
    int next_id = 0;
};

stream_list &streams()
{
    static stream_list *s = new stream_list;
    return *s;
}

/* Lazy mode: a stream someone waits for (the host, or another stream through an event) runs
 * its queue; the others hold theirs back. */
struct waiting {
    CUstream_st *s;
    explicit waiting(CUstream_st *st) : s(st)
    {
        if (!s) return;
        std::lock_guard<std::mutex> lock(s->m);
        s->demand++;
        s->cv.notify_all();
    }
    ~waiting()
    {
        if (!s) return;
        std::lock_guard<std::mutex> lock(s->m);
        s->demand--;
    }
};

void worker(CUstream_st *s)
{
    const config &c = cfg();
    char rname[32];
    snprintf(rname, sizeof rname, "sched-%d", s->id);
    for (;;) {
        op o;
        {
            std::unique_lock<std::mutex> lock(s->m);
            for (;;) {
                if (!s->q.empty()) {
                    if (c.sched != config::LAZY || s->demand > 0 ||
                        emu::now_ms() - s->q.front().queued_ms >= c.lazy_ms)
                        break;
                    s->cv.wait_for(lock, std::chrono::milliseconds(c.lazy_ms / 4 + 1));
                    continue;
                }
                s->cv.wait(lock);
            }
            o = std::move(s->q.front());
            s->q.pop_front();
            s->busy = true;
            s->running = o.name;
        }
        if (c.sched == config::DELAY && c.delay_us > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(emu::random(rname) % (c.delay_us + 1)));
        for (const emu::range &r : o.uses) {
            char what[256];
            snprintf(what, sizeof what, "%s on stream %d, when it ran", o.name.c_str(), s->id);
            emu::check_range(r.p, r.bytes, emu::MEM_DEVICE | emu::MEM_PINNED | emu::MEM_PAGEABLE, what);
        }
        o.fn();
        std::string broken = guards_broken();
        if (!broken.empty()) emu::defect("after %s on stream %d: %s", o.name.c_str(), s->id, broken.c_str());
        {
            std::lock_guard<std::mutex> lock(s->m);
            s->busy = false;
            s->running.clear();
            s->done++;
            s->cv.notify_all();
        }
    }
}

CUstream_st *stream_new(unsigned flags)
{
    CUstream_st *s = new CUstream_st;
    s->flags = flags;
    s->device = cur_device;
    {
        std::lock_guard<std::mutex> lock(streams().m);
        s->id = streams().next_id++;
        streams().all.push_back(s);
    }
    std::thread(worker, s).detach();
    return s;
}

CUstream_st *legacy()
{
    static CUstream_st *s = stream_new(cudaStreamDefault);
    return s;
}

CUstream_st *of(cudaStream_t s) { return s ? s : legacy(); }

/* The device of a stream: the legacy one is the current device's. */
int device_of(cudaStream_t s) { return s ? s->device : cur_device; }

/* Waits until s has run everything queued on it so far. */
void drain(CUstream_st *s)
{
    std::unique_lock<std::mutex> lock(s->m);
    uint64_t target = s->queued;
    s->demand++;
    s->cv.notify_all();
    s->cv.wait(lock, [&] { return s->done >= target; });
    s->demand--;
    lock.unlock();
    emu::order_host_waits(s->id);
}

void enqueue_on(CUstream_st *s, op o)
{
    if (emu::capture_take(s, o.name, o.fn, o.uses)) return;   /* recorded, not run (emu_graph.cc) */
    o.queued_ms = emu::now_ms();
    emu::order_op(s->id, o.name, o.uses);
    std::lock_guard<std::mutex> lock(s->m);
    s->q.push_back(std::move(o));
    s->queued++;
    s->cv.notify_all();
}

/* Every blocking stream, drained (what work on the legacy stream waits for). */
void drain_blocking(CUstream_st *except)
{
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> lock(streams().m);
        all = streams().all;
    }
    for (CUstream_st *s : all)
        if (s != except && !(s->flags & cudaStreamNonBlocking)) drain(s);
}

}  // namespace

namespace emu {

int stream_device(cudaStream_t s) { return device_of(s); }

void enqueue(cudaStream_t stream, const char *name, std::function<void()> fn, std::initializer_list<range> uses)
{
    CUstream_st *s = of(stream);
    /* the legacy stream waits for the blocking streams, and they for it */
    if (s == legacy()) drain_blocking(s);
    else if (!(s->flags & cudaStreamNonBlocking)) drain(legacy());
    op o;
    o.name = name;
    o.fn = std::move(fn);
    o.uses.assign(uses.begin(), uses.end());
    enqueue_on(s, std::move(o));
}

void enqueue_recorded(cudaStream_t stream, const std::string &name, const std::function<void()> &fn,
                      const std::vector<range> &uses)
{
    CUstream_st *s = of(stream);
    if (s == legacy()) drain_blocking(s);
    else if (!(s->flags & cudaStreamNonBlocking)) drain(legacy());
    op o;
    o.name = name;
    o.fn = fn;
    o.uses = uses;
    enqueue_on(s, std::move(o));
}

void sync_all()
{
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> lock(streams().m);
        all = streams().all;
    }
    for (CUstream_st *s : all) drain(s);
    std::string broken = guards_broken();
    if (!broken.empty()) defect("at a synchronisation: %s", broken.c_str());
}

static void dump_queues()
{
    std::vector<CUstream_st *> all;
    {
        std::unique_lock<std::mutex> lock(streams().m, std::try_to_lock);
        if (!lock.owns_lock()) return;
        all = streams().all;
    }
    for (CUstream_st *s : all) {
        std::unique_lock<std::mutex> lock(s->m, std::try_to_lock);
        if (!lock.owns_lock()) {
            fprintf(stderr, "ds-emu:   stream %d: (busy)\n", s->id);
            continue;
        }
        if (s->q.empty() && !s->busy) continue;
        fprintf(stderr, "ds-emu:   stream %d: running %s; %zu queued", s->id, s->busy ? s->running.c_str() : "nothing",
                s->q.size());
        for (size_t i = 0; i < s->q.size() && i < 8; i++) fprintf(stderr, "%s%s", i ? ", " : ": ", s->q[i].name.c_str());
        fprintf(stderr, "%s\n", s->q.size() > 8 ? ", ..." : "");
    }
}

}  // namespace emu

/* ---- fibers: a block's threads ---- */

namespace {

extern "C" void emu_fiber_switch(void **save_sp, void *to_sp);
extern "C" void emu_fiber_entry(void);

/* Saves the callee-saved registers and the stack pointer of the running context in *save_sp,
 * then resumes the one whose stack pointer is to_sp. A new fiber's stack is laid out so that
 * this lands in emu_fiber_entry with r12 = its argument and r13 = its function. */
asm(R"(
    .text
    .globl emu_fiber_switch
    .type emu_fiber_switch, @function
emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_fiber_switch, .-emu_fiber_switch

    .globl emu_fiber_entry
    .type emu_fiber_entry, @function
emu_fiber_entry:
    movq %r12, %rdi
    andq $-16, %rsp
    callq *%r13
    ud2
    .size emu_fiber_entry, .-emu_fiber_entry
    .section .note.GNU-stack,"",@progbits
    .text
)");

#if defined(EMU_ASAN) || defined(EMU_TSAN)
constexpr size_t STACK = (size_t)1 << 20;
#else
constexpr size_t STACK = (size_t)256 << 10;
#endif

struct fiber {
    void *sp = nullptr;
    char *stack = nullptr;    /* mmap'd, STACK bytes, the lowest page a guard */
    bool done = false;
    uint3 tid;
#ifdef EMU_TSAN
    void *tsan = nullptr;
#endif
};

struct block_runner {
    std::vector<fiber *> free_fibers;   /* stacks not in use, reused */
    void *sched_sp = nullptr;
    fiber *current = nullptr;
    const std::function<void()> *body = nullptr;
#ifdef EMU_ASAN
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
#ifdef EMU_TSAN
    void *sched_tsan = nullptr;
#endif
};

thread_local block_runner *runner = nullptr;

void fiber_start(fiber *f, block_runner *br);

/* A parked fiber, or a new one started at emu_fiber_main. */
fiber *fiber_get(block_runner *br)
{
    if (!br->free_fibers.empty()) {
        fiber *f = br->free_fibers.back();
        br->free_fibers.pop_back();
        f->done = false;
        return f;
    }
    fiber *f = new fiber;
    void *p = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) emu::defect("no memory for a fiber stack (%s)", strerror(errno));
    mprotect(p, 4096, PROT_NONE);   /* a thread whose stack overflows faults here */
    f->stack = (char *)p;
#ifdef EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    fiber_start(f, br);
    return f;
}

/* Switches from the running context (saving into *save) to f (or back to the scheduler when
 * f is NULL), telling the sanitizers. */
void switch_to(block_runner *br, void **save, fiber *f, bool leaving_for_good)
{
#ifdef EMU_ASAN
    void *fake = nullptr;
    if (f) __sanitizer_start_switch_fiber(&fake, f->stack + 4096, STACK - 4096);
    else __sanitizer_start_switch_fiber(leaving_for_good ? nullptr : &fake, br->sched_bottom, br->sched_size);
#endif
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(f ? f->tsan : br->sched_tsan, 0);
#endif
    emu_fiber_switch(save, f ? f->sp : br->sched_sp);
#ifdef EMU_ASAN
    if (f) {
        const void *bottom;
        size_t size;
        __sanitizer_finish_switch_fiber(fake, &bottom, &size);   /* back in the scheduler */
        (void)bottom, (void)size;
    } else {
        __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
    }
#else
    (void)leaving_for_good;
#endif
}

/* A fiber runs one kernel thread after another: once a thread's body returns, the fiber
 * parks at the end of its loop and is resumed for the next thread of this or a later block,
 * so its frames (and the sanitizers' view of its stack) never pile up. */
extern "C" void emu_fiber_main(void *arg)
{
    block_runner *br = (block_runner *)arg;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &br->sched_bottom, &br->sched_size);
#endif
    for (;;) {
        fiber *f = br->current;
        (*br->body)();
        f->done = true;
        switch_to(br, &f->sp, nullptr, false);
    }
}

void fiber_start(fiber *f, block_runner *br)
{
    void **top = (void **)(f->stack + STACK);
    void **sp = top - 8;   /* r15 r14 r13 r12 rbx rbp ret, then a zero */
    sp[0] = nullptr;
    sp[1] = nullptr;
    sp[2] = (void *)emu_fiber_main;   /* r13 */
    sp[3] = (void *)br;               /* r12 */
    sp[4] = nullptr;
    sp[5] = nullptr;
    sp[6] = (void *)emu_fiber_entry;
    sp[7] = nullptr;
    f->sp = sp;
    f->done = false;
}

uint3 unflatten(unsigned t, dim3 d)
{
    uint3 r;
    r.x = t % d.x;
    r.y = t / d.x % d.y;
    r.z = t / (d.x * d.y);
    return r;
}

}  // namespace

namespace emu {

thread_local uint3 k_thread, k_block;
thread_local dim3 k_block_dim, k_grid_dim;

void syncthreads()
{
    block_runner *br = runner;
    if (!br || !br->current) defect("__syncthreads outside a kernel's thread");
    fiber *f = br->current;
    switch_to(br, &f->sp, nullptr, false);
}

}  // namespace emu

namespace {

/* Runs block b of a grid on this thread: every thread up to its first barrier, then every
 * waiting one to its next, until all have ended. */
void run_block(const std::function<void()> &body, dim3 grid, dim3 block, unsigned b)
{
    if (!runner) {
        runner = new block_runner;
#ifdef EMU_TSAN
        runner->sched_tsan = __tsan_get_current_fiber();
#endif
    }
    block_runner *br = runner;
    br->body = &body;
    emu::k_block = unflatten(b, grid);
    emu::k_block_dim = block;
    emu::k_grid_dim = grid;
    unsigned n = block.x * block.y * block.z;
    std::vector<fiber *> waiting, next;
    for (unsigned t = 0; t < n; t++) {
        fiber *f = fiber_get(br);
        f->tid = unflatten(t, block);
        br->current = f;
        emu::k_thread = f->tid;
        switch_to(br, &br->sched_sp, f, false);
        if (f->done) br->free_fibers.push_back(f);
        else waiting.push_back(f);
    }
    while (!waiting.empty()) {
        next.clear();
        for (fiber *f : waiting) {
            br->current = f;
            emu::k_thread = f->tid;
            switch_to(br, &br->sched_sp, f, false);
            if (f->done) br->free_fibers.push_back(f);
            else next.push_back(f);
        }
        waiting.swap(next);
    }
    br->current = nullptr;
}

/* The kernel the calling thread runs blocks of, for the messages ("kernel NAME") */
thread_local const char *running_kernel = "";

/* The block threads: a grid's blocks are taken by index from the job in turn. */
struct grid_job {
    const char *name;
    const std::function<void()> *body;
    dim3 grid, block;
    unsigned blocks;
    std::atomic<unsigned> next{0}, finished{0};
    int helpers = 0;   /* pool threads inside take_blocks (under the pool's lock) */
};

struct block_pool {
    std::mutex m;
    std::condition_variable cv, done_cv;
    std::deque<grid_job *> jobs;
    bool started = false;
};

block_pool &pool()
{
    static block_pool *p = new block_pool;
    return *p;
}

/* Takes blocks of job until none is left; returns when this thread ran its last one. */
void take_blocks(grid_job *j)
{
    running_kernel = j->name;
    for (;;) {
        unsigned b = j->next.fetch_add(1);
        if (b >= j->blocks) return;
        run_block(*j->body, j->grid, j->block, b);
        if (j->finished.fetch_add(1) + 1 == j->blocks) {
            std::lock_guard<std::mutex> lock(pool().m);
            pool().done_cv.notify_all();
        }
    }
}

void pool_thread()
{
    block_pool &p = pool();
    for (;;) {
        grid_job *j;
        {
            std::unique_lock<std::mutex> lock(p.m);
            p.cv.wait(lock, [&] { return !p.jobs.empty(); });
            j = p.jobs.front();
            if (j->next.load() >= j->blocks) {
                p.jobs.pop_front();
                continue;
            }
            j->helpers++;   /* the job's owner waits for this thread to let go of it */
        }
        take_blocks(j);
        std::lock_guard<std::mutex> lock(p.m);
        j->helpers--;
        p.done_cv.notify_all();
    }
}

void run_grid(const char *name, const std::function<void()> &body, dim3 grid, dim3 block)
{
    grid_job j;
    j.name = name;
    j.body = &body;
    j.grid = grid, j.block = block;
    j.blocks = grid.x * grid.y * grid.z;
    block_pool &p = pool();
    if (cfg().block_threads > 1 && j.blocks > 1) {
        std::lock_guard<std::mutex> lock(p.m);
        if (!p.started) {
            p.started = true;
            for (int i = 1; i < cfg().block_threads; i++) std::thread(pool_thread).detach();
        }
        p.jobs.push_back(&j);
        p.cv.notify_all();
    }
    take_blocks(&j);
    std::unique_lock<std::mutex> lock(p.m);
    p.done_cv.wait(lock, [&] { return j.finished.load() == j.blocks && j.helpers == 0; });
    for (auto it = p.jobs.begin(); it != p.jobs.end(); ++it)
        if (*it == &j) {
            p.jobs.erase(it);
            break;
        }
}

}  // namespace

namespace emu {

void threadfence()
{
    static unsigned fences;
    __atomic_fetch_add(&fences, 1u, __ATOMIC_ACQ_REL);
}

void check_vector_access(const void *p)
{
    if ((uintptr_t)p % 16)
        defect("%s: misaligned 16-byte vector access at %p (%zu bytes past a 16-byte boundary); the GPU would fault "
               "(cudaErrorMisalignedAddress)", *running_kernel ? running_kernel : "a kernel", p, (size_t)((uintptr_t)p % 16));
}

/* A defect when a failed launch's error was never read (see the top). */
void unread_launch_check(const char *at)
{
    if (!unread_launch.empty())
        defect("the launch of %s failed and its error was not read (cudaGetLastError) before %s", unread_launch.c_str(),
               at);
}

void launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t s, std::function<void()> body,
            std::vector<const void *> ptrs)
{
    {
        std::string at = std::string("the launch of ") + name;
        unread_launch_check(at.c_str());
    }
    /* sm_90: 1024 threads a block, block (1024, 1024, 64), grid (2^31 - 1, 65535, 65535),
     * 48 KiB of dynamic shared memory without an opt-in attribute */
    unsigned long threads = (unsigned long)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || !grid.x || !grid.y || !grid.z || threads > 1024 || block.x > 1024 ||
        block.y > 1024 || block.z > 64 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        note("launch of %s refused: grid (%u, %u, %u), block (%u, %u, %u)", name, grid.x, grid.y, grid.z, block.x,
             block.y, block.z);
        ret(cudaErrorInvalidConfiguration);
        unread_launch = name;
        return;
    }
    if (shmem > 48 * 1024) {
        ret(cudaErrorInvalidValue);
        unread_launch = name;
        return;
    }
    const char *fail = emu::fault("launch_fail");
    if (fail && *fail && strstr(name, fail)) {
        note("launch of %s failed: too many resources requested (fault launch_fail)", name);
        ret(cudaErrorLaunchOutOfResources);
        unread_launch = name;
        return;
    }
    /* CUDA: a kernel launched into a stream of a device that is not current fails */
    if (device_of(s) != cur_device) {
        note("launch of %s refused: its stream is device %d's, device %d is current", name, device_of(s), cur_device);
        ret(cudaErrorInvalidResourceHandle);
        unread_launch = name;
        return;
    }
    for (size_t i = 0; i < ptrs.size(); i++) {
        if (!ptrs[i]) continue;
        char what[256];
        snprintf(what, sizeof what, "kernel %s, pointer argument %zu", name, i + 1);
        check_range(ptrs[i], 1, MEM_DEVICE, what);
        check_device(ptrs[i], cur_device, what);
    }
    std::string qname = std::string("kernel ") + name;
    CUstream_st *st = of(s);
    if (st == legacy()) drain_blocking(st);
    else if (!(st->flags & cudaStreamNonBlocking)) drain(legacy());
    op o;
    o.name = qname;
    for (const void *p : ptrs)
        if (p) o.uses.push_back({p, 1});
    o.fn = [body = std::move(body), grid, block, qname]() { run_grid(qname.c_str(), body, grid, block); };
    enqueue_on(st, std::move(o));
}

}  // namespace emu

/* ---- the runtime API ---- */

extern "C" {

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    unread_launch.clear();
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

#define ERRORS(X)                                                                          \
    X(cudaSuccess, "no error")                                                            \
    X(cudaErrorInvalidValue, "invalid argument")                                          \
    X(cudaErrorMemoryAllocation, "out of memory")                                         \
    X(cudaErrorInitializationError, "initialization error")                               \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                    \
    X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")           \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                   \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                          \
    X(cudaErrorNotReady, "device not ready")                                              \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                            \
    X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
    X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
    X(cudaErrorNotSupported, "operation not supported")                                   \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")               \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                               \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state")    \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing") \
    X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
    X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream") \
    X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
    X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread")

const char *cudaGetErrorString(cudaError_t e)
{
#define X(code, text) if (e == code) return text;
    ERRORS(X)
#undef X
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t e)
{
#define X(code, text) if (e == code) return #code;
    ERRORS(X)
#undef X
    return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 0;
    if (emu::fault("no_device")) return ret(cudaErrorNoDevice);
    if (emu::fault("driver_old")) return ret(cudaErrorInsufficientDriver);
    if (emu::fault("init_error")) return ret(cudaErrorInitializationError);
    if (!emu::device_count()) return ret(cudaErrorNoDevice);   /* CUDA_VISIBLE_DEVICES hides them all */
    *count = emu::device_count();
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = emu::fault("driver_old") ? 11040 : emu::fault("no_device") ? 0 : CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return e;
    if (d < 0 || d >= n) return ret(cudaErrorInvalidDevice);
    cur_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = cur_device;
    return cudaSuccess;
}

/* 0000:XX:00.0, XX = 0x19 + the physical number (see the top) */
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    if (!pciBusId || len <= 0) return ret(cudaErrorInvalidValue);
    if (device < 0 || device >= emu::device_count()) return ret(cudaErrorInvalidDevice);
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x19 + emu::physical_device(device));
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (cudaError_t e = emu::capture_unsafe_check("cudaDeviceSynchronize")) return ret(e);
    emu::unread_launch_check("cudaDeviceSynchronize");
    emu::sync_all();
    return cudaSuccess;
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (cudaError_t e = emu::capture_unsafe_check("cudaMalloc")) {
        *p = nullptr;
        return ret(e);
    }
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    int nth = ++mm.mallocs;
    const char *oom = emu::fault("oom");
    if ((oom && nth >= atoi(oom)) || bytes > cfg().memory - mm.device_bytes[cur_device]) {
        *p = nullptr;
        return ret(cudaErrorMemoryAllocation);
    }
    size_t raw_bytes = (bytes + GUARD + 255) / 256 * 256;
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, raw_bytes)) {
        *p = nullptr;
        return ret(cudaErrorMemoryAllocation);
    }
    memset(raw, POISON, bytes);
    memset((char *)raw + bytes, GUARD_BYTE, GUARD);
    region r;
    r.base = (char *)raw;
    r.bytes = bytes;
    r.kind = emu::MEM_DEVICE;
    r.id = mm.next_id++;
    r.device = cur_device;
    r.raw = raw;
    mm.by_base[(uintptr_t)raw] = r;
    mm.device_bytes[cur_device] += bytes;
    *p = raw;
    return cudaSuccess;
}

/* The live region starting at p of kind `kind` (caller holds mem().m), or NULL. */
static region *base_of(void *p, int kind)
{
    auto &mm = mem();
    auto it = mm.by_base.find((uintptr_t)p);
    if (it == mm.by_base.end() || !it->second.live || it->second.kind != kind) return nullptr;
    return &it->second;
}

cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    if (cudaError_t e = emu::capture_unsafe_check("cudaFree")) return ret(e);
    emu::sync_all();   /* as the real cudaFree, which waits for the device */
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    region *r = base_of(p, emu::MEM_DEVICE);
    if (!r) {
        region *in = find_locked(p);
        if (in && !in->live) emu::defect("cudaFree(%p): device allocation #%d was freed already", p, in->id);
        emu::defect("cudaFree(%p): not the start of a device allocation", p);
    }
    r->live = false;
    memset(r->base, FREED, r->bytes + GUARD);
    mm.device_bytes[r->device] -= r->bytes;
    mm.quarantine.push_back((uintptr_t)r->base);
    mm.quarantined += r->bytes;
    while (mm.quarantined > QUARANTINE && !mm.quarantine.empty()) {
        auto it = mm.by_base.find(mm.quarantine.front());
        mm.quarantine.pop_front();
        mm.quarantined -= it->second.bytes;
        free(it->second.raw);
        mm.by_base.erase(it);
    }
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    (void)flags;
    *p = nullptr;
    if (emu::fault("no_pinned")) return ret(cudaErrorMemoryAllocation);
    void *raw = nullptr;
    if (posix_memalign(&raw, 4096, bytes ? bytes : 1)) return ret(cudaErrorMemoryAllocation);
    memset(raw, 0, bytes);
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    region r;
    r.base = (char *)raw;
    r.bytes = bytes;
    r.kind = emu::MEM_PINNED;
    r.id = mm.next_id++;
    r.raw = raw;
    mm.by_base[(uintptr_t)raw] = r;
    *p = raw;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }

/* Queued work that still uses [p, p + bytes): its name, or empty. */
static std::string pending_use(const void *p, size_t bytes)
{
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> lock(streams().m);
        all = streams().all;
    }
    for (CUstream_st *s : all) {
        std::lock_guard<std::mutex> lock(s->m);
        for (const op &o : s->q)
            for (const emu::range &r : o.uses)
                if ((const char *)r.p < (const char *)p + bytes && (const char *)p < (const char *)r.p + (r.bytes ? r.bytes : 1))
                    return o.name + " on stream " + std::to_string(s->id);
    }
    return "";
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p) return cudaSuccess;
    emu::sync_all();
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    region *r = base_of(p, emu::MEM_PINNED);
    if (!r || r->registered) emu::defect("cudaFreeHost(%p): not memory from cudaHostAlloc", p);
    void *raw = r->raw;
    mm.by_base.erase((uintptr_t)p);
    free(raw);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!p || !bytes) return ret(cudaErrorInvalidValue);
    if (emu::fault("no_pinned")) return ret(cudaErrorNotSupported);
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    auto it = mm.by_base.lower_bound((uintptr_t)p);
    if (find_locked(p) && find_locked(p)->live) return ret(cudaErrorHostMemoryAlreadyRegistered);
    if (it != mm.by_base.end() && it->second.live && it->first < (uintptr_t)p + bytes)
        return ret(cudaErrorHostMemoryAlreadyRegistered);
    if (it != mm.by_base.end() && !it->second.live && it->first < (uintptr_t)p + bytes)
        mm.by_base.erase(it);   /* a quarantined range the allocator gave back: forgotten */
    region r;
    r.base = (char *)p;
    r.bytes = bytes;
    r.kind = emu::MEM_PINNED;
    r.registered = true;
    r.id = mm.next_id++;
    mm.by_base[(uintptr_t)p] = r;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    size_t bytes;
    {
        auto &mm = mem();
        std::lock_guard<std::mutex> lock(mm.m);
        region *r = base_of(p, emu::MEM_PINNED);
        if (!r || !r->registered) return ret(cudaErrorHostMemoryNotRegistered);
        bytes = r->bytes;
    }
    std::string user = pending_use(p, bytes);
    if (!user.empty())
        emu::defect("cudaHostUnregister(%p, %zu bytes) while %s, queued, still uses it", p, bytes, user.c_str());
    auto &mm = mem();
    std::lock_guard<std::mutex> lock(mm.m);
    mm.by_base.erase((uintptr_t)p);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof *a);
    const void *base;
    size_t size;
    int k = emu::kind_of(p, &base, &size);
    a->device = cur_device;
    if (k == emu::MEM_DEVICE) {
        std::lock_guard<std::mutex> lock(mem().m);
        region *r = find_locked(p);
        if (r) a->device = r->device;
    }
    if (k == emu::MEM_DEVICE) {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
    } else if (k == emu::MEM_PINNED) {
        a->type = cudaMemoryTypeHost;
        a->devicePointer = a->hostPointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
    }
    return cudaSuccess;
}

/* ---- copies ---- */

static int host_kinds_ok(const void *p) { return emu::kind_of(p, NULL, NULL) != emu::MEM_DEVICE; }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (!bytes) return cudaSuccess;
    if (kind == cudaMemcpyDefault) {
        int dk = emu::kind_of(dst, NULL, NULL), sk = emu::kind_of(src, NULL, NULL);
        kind = dk == emu::MEM_DEVICE ? (sk == emu::MEM_DEVICE ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (sk == emu::MEM_DEVICE ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    char what[128];
    switch (kind) {
    case cudaMemcpyHostToDevice: {
        snprintf(what, sizeof what, "cudaMemcpyAsync (host to device): dst");
        emu::check_range(dst, bytes, emu::MEM_DEVICE, what);
        if (!host_kinds_ok(src)) return ret(cudaErrorInvalidValue);
        if (emu::kind_of(src, NULL, NULL) != emu::MEM_PINNED)
            if (cudaError_t e = emu::capture_sync_check(of(s), "cudaMemcpyAsync from pageable memory")) return ret(e);
        if (emu::kind_of(src, NULL, NULL) == emu::MEM_PINNED) {
            emu::check_range(src, bytes, emu::MEM_PINNED, "cudaMemcpyAsync (host to device): src");
            /* a DMA: reads the host memory when it runs */
            emu::enqueue(s, "cudaMemcpyAsync host to device", [=] { memcpy(dst, src, bytes); },
                         {{dst, bytes}, {src, bytes}});
        } else {
            /* from pageable memory the driver stages the bytes first: src is free on return */
            auto copy = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
            emu::enqueue(s, "cudaMemcpyAsync host to device (staged)", [=] { memcpy(dst, copy->data(), bytes); },
                         {{dst, bytes}});
        }
        return cudaSuccess;
    }
    case cudaMemcpyDeviceToHost: {
        emu::check_range(src, bytes, emu::MEM_DEVICE, "cudaMemcpyAsync (device to host): src");
        if (!host_kinds_ok(dst)) return ret(cudaErrorInvalidValue);
        bool pinned = emu::kind_of(dst, NULL, NULL) == emu::MEM_PINNED;
        if (!pinned)
            if (cudaError_t e = emu::capture_sync_check(of(s), "cudaMemcpyAsync to pageable memory")) return ret(e);
        if (pinned) emu::check_range(dst, bytes, emu::MEM_PINNED, "cudaMemcpyAsync (device to host): dst");
        emu::enqueue(s, "cudaMemcpyAsync device to host", [=] { memcpy(dst, src, bytes); },
                     {{dst, bytes}, {src, bytes}});
        /* into pageable memory the call returns once the copy is done */
        if (!pinned) drain(of(s));
        return cudaSuccess;
    }
    case cudaMemcpyDeviceToDevice:
        emu::check_range(src, bytes, emu::MEM_DEVICE, "cudaMemcpyAsync (device to device): src");
        emu::check_range(dst, bytes, emu::MEM_DEVICE, "cudaMemcpyAsync (device to device): dst");
        emu::enqueue(s, "cudaMemcpyAsync device to device", [=] { memmove(dst, src, bytes); },
                     {{dst, bytes}, {src, bytes}});
        return cudaSuccess;
    case cudaMemcpyHostToHost:
        if (cudaError_t e = emu::capture_sync_check(of(s), "cudaMemcpyAsync host to host")) return ret(e);
        emu::enqueue(s, "cudaMemcpyAsync host to host", [=] { memmove(dst, src, bytes); });
        drain(of(s));
        return cudaSuccess;
    default:
        return ret(cudaErrorInvalidMemcpyDirection);
    }
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (cudaError_t e = emu::capture_unsafe_check("cudaMemcpy")) return ret(e);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, 0);
    if (e == cudaSuccess) drain(legacy());
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (!bytes) return cudaSuccess;
    emu::check_range(p, bytes, emu::MEM_DEVICE, "cudaMemsetAsync");
    emu::enqueue(s, "cudaMemsetAsync", [=] { memset(p, value, bytes); }, {{p, bytes}});
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    if (cudaError_t e = emu::capture_unsafe_check("cudaMemset")) return ret(e);
    cudaError_t e = cudaMemsetAsync(p, value, bytes, 0);
    if (e == cudaSuccess) drain(legacy());
    return e;
}

/* ---- streams and events ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    *s = stream_new(flags);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    /* as CUDA: returns at once; queued work still runs. The stream's worker stays (idle). */
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    emu::unread_launch_check("cudaStreamSynchronize");
    CUstream_st *st = of(s);
    if (cudaError_t e = emu::capture_sync_check(st, "cudaStreamSynchronize")) return ret(e);
    drain(st);
    std::string broken = guards_broken();
    if (!broken.empty()) emu::defect("at cudaStreamSynchronize(stream %d): %s", st->id, broken.c_str());
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    CUstream_st *st = of(s);
    if (cudaError_t e = emu::capture_sync_check(st, "cudaStreamQuery")) return ret(e);
    std::unique_lock<std::mutex> lock(st->m);
    if (st->done >= st->queued) {
        lock.unlock();
        emu::order_host_waits(st->id);
        return cudaSuccess;
    }
    return cudaErrorNotReady;   /* (lazy mode: a stream polled runs within its hold time) */   /* not a failure: the last error stays as it was */
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    *e = new CUevent_st;
    (*e)->flags = flags;
    (*e)->device = cur_device;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    (void)e;   /* a queued record may still run: the event is kept */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    /* CUDA: the event and the stream must be of one device */
    if (e->device != device_of(s)) {
        emu::note("cudaEventRecord refused: the event is device %d's, the stream device %d's", e->device, device_of(s));
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (emu::capture_event_record(e, of(s))) return cudaSuccess;   /* a point of the capture (emu_graph.cc) */
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lock(e->m);
        gen = ++e->recorded;
    }
    {
        std::lock_guard<std::mutex> lock(e->m);
        e->stream = of(s);
    }
    emu::enqueue(s, "cudaEventRecord", [e, gen] {
        std::lock_guard<std::mutex> lock(e->m);
        if (gen > e->completed) {
            e->completed = gen;
            e->ms = emu::now_ms();
        }
        e->cv.notify_all();
    });
    emu::order_record(e, of(s)->id);
    return cudaSuccess;
}

/* Waits until the record of e captured now has run (at once when e was never recorded). */
static void event_wait(cudaEvent_t e)
{
    std::unique_lock<std::mutex> lock(e->m);
    uint64_t gen = e->recorded;
    if (e->completed < gen) {
        CUstream_st *s = e->stream;
        lock.unlock();
        waiting w(s);
        lock.lock();
        e->cv.wait(lock, [&] { return e->completed >= gen; });
    }
    lock.unlock();
    emu::order_host_waits_event(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = emu::capture_event_check(e, "cudaEventSynchronize")) return ret(c);
    event_wait(e);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = emu::capture_event_check(e, "cudaEventQuery")) return ret(c);
    std::unique_lock<std::mutex> lock(e->m);
    if (e->completed < e->recorded) return cudaErrorNotReady;
    lock.unlock();
    emu::order_host_waits_event(e);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    bool taken;
    if (cudaError_t c = emu::capture_wait_check(of(s), e, flags, &taken)) return ret(c);
    if (taken) return cudaSuccess;   /* recorded into the capture (emu_graph.cc) */
    uint64_t gen;
    CUstream_st *from;
    {
        std::lock_guard<std::mutex> lock(e->m);
        gen = e->recorded;
        from = e->stream;
    }
    emu::enqueue(s, "cudaStreamWaitEvent", [e, gen, from] {
        std::unique_lock<std::mutex> lock(e->m);
        if (e->completed >= gen) return;
        lock.unlock();
        waiting w(from);
        lock.lock();
        e->cv.wait(lock, [&] { return e->completed >= gen; });
    });
    emu::order_wait(of(s)->id, e);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a || !b) return ret(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = emu::capture_event_check(a, "cudaEventElapsedTime")) return ret(c);
    if (cudaError_t c = emu::capture_event_check(b, "cudaEventElapsedTime")) return ret(c);
    if ((a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return ret(cudaErrorInvalidResourceHandle);
    if (a->device != b->device) return ret(cudaErrorInvalidResourceHandle);   /* CUDA: one device */
    std::lock(a->m, b->m);
    std::lock_guard<std::mutex> la(a->m, std::adopt_lock);
    std::lock_guard<std::mutex> lb(b->m, std::adopt_lock);
    if (!a->recorded || !b->recorded) return ret(cudaErrorInvalidResourceHandle);
    if (a->completed < a->recorded || b->completed < b->recorded) return ret(cudaErrorNotReady);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

}  // extern "C"

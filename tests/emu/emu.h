/* emu: the emulated CUDA device's own interface, shared by its parts (emu_runtime.cc: memory,
 * streams, events, kernel launches; emu_cudnn.cc, emu_cublas.cc, emu_nccl.cc: the libraries).
 * The program under test sees only NVIDIA's headers: every entry point it calls is defined
 * with the signature of the installed toolkit's header, and this file is never included by
 * ds's own sources (tests/emu/emu_device.h, force-included into the host compilation of the
 * .cu files, is the one exception: it brings the kernel launch and the built-in variables).
 *
 * What the device promises and checks (docs/DESIGN.md §4, "The emulated CUDA device"):
 *   - memory: every device allocation and page-locked host range is tracked; fresh device
 *     memory holds a poison pattern (0xff bytes: NaN as float and bf16, -1 as integers), as
 *     real cudaMalloc does not zero; guard bytes follow every device allocation and are
 *     checked after every operation that writes device memory, at every synchronisation and
 *     at free;
 *   - streams: each stream's work runs on its own worker thread, in order, out of step with
 *     the host; DS_EMU_SCHED delays and holds work back (see emu_runtime.cc);
 *   - a defect of the program (a pointer outside live memory, an extent past an allocation,
 *     a workspace smaller than asked for, a guard overwritten) ends the process through
 *     emu::defect with a message starting "ds-emu: defect:"; what the real library would
 *     answer with a status (a bad parameter, an unsupported configuration) is answered with
 *     that status instead. */
#ifndef DS_EMU_H
#define DS_EMU_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace emu {

/* The kinds of memory an argument may be; a mask of these is what a check accepts. */
enum {
    MEM_DEVICE = 1,       /* cudaMalloc */
    MEM_PINNED = 2,       /* cudaHostAlloc, or a cudaHostRegister'ed range */
    MEM_PAGEABLE = 4,     /* any other host address (not tracked: taken on trust) */
    MEM_HOST = MEM_PINNED | MEM_PAGEABLE,
};

/* The kind of memory at p: MEM_DEVICE or MEM_PINNED when p lies in a live tracked range (its
 * start and size in *base, *size), else MEM_PAGEABLE (*base = p, *size = 0). */
int kind_of(const void *p, const void **base, size_t *size);

/* Ends the process when [p, p + bytes) is not inside one live range of a kind in `kinds`
 * (for MEM_DEVICE and MEM_PINNED; a pageable range is not checked). `what` names the
 * argument for the message: "cudnnConvolutionForward: y (NHWC 2x8x8x16 bf16, 4096 bytes)". */
void check_range(const void *p, size_t bytes, int kinds, const char *what);

/* Devices (emu_runtime.cc's header): how many the process sees, the calling thread's current
 * one (cudaSetDevice), a visible device's physical number (what CUDA_VISIBLE_DEVICES named),
 * and the device a stream belongs to (NULL: the legacy stream, the current device's). */
int device_count();
int current_device();
int physical_device(int device);
int stream_device(cudaStream_t s);

/* A defect when p lies in device memory of another device than `device` (no peer access is
 * enabled); `what` names the argument. Host memory and unknown addresses pass. */
void check_device(const void *p, int device, const char *what);

/* A defect when the calling thread's current device is not `device`: `what` names the object
 * made on `device` ("cuDNN handle") and the call. */
void check_current(int device, const char *what);

/* A defect of the program under test: prints "ds-emu: defect: <message>" and the queued
 * work of every stream to stderr, then aborts (exit status 134; the tests look for the
 * text, not the status). Never returns. */
[[noreturn]] void defect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A line on stderr, "ds-emu: <message>", when DS_EMU_VERBOSE is set. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A defect when a failed launch's error is still unread at `at` (emu_runtime.cc). */
void unread_launch_check(const char *at);

/* Queues op on stream s (NULL: the legacy default stream); it runs on s's worker after all
 * work queued on s before it, and after the device's guards are checked it is done. `name`
 * is what the messages call it ("cudnnConvolutionForward", "kernel bn_apply_kernel").
 * `reads`/`writes`: device or pinned ranges the op uses, checked again when it runs (a range
 * freed in between is a defect) and listed in the queue dump; may be empty. */
struct range { const void *p; size_t bytes; };
void enqueue(cudaStream_t s, const char *name, std::function<void()> op,
             std::initializer_list<range> uses = {});

/* Queues an operation a graph recorded (emu_graph.cc's cudaGraphLaunch) on stream s, as
 * enqueue does. */
void enqueue_recorded(cudaStream_t s, const std::string &name, const std::function<void()> &fn,
                      const std::vector<range> &uses);

/* ---- stream capture (emu_graph.cc; what it refuses is listed there) ----
 * capture_take: when s (the stream the runtime resolved: never NULL) is capturing, the
 * operation is recorded into its capture (dropped once the capture is invalidated) and true
 * is returned; the caller then runs nothing. The checks below answer cudaSuccess, or CUDA's
 * error for the call during a capture (the capture then invalidated). */
bool capture_take(cudaStream_t s, const std::string &name, const std::function<void()> &fn,
                  const std::vector<range> &uses);
/* A call that waits for or queries s, or copies pageable memory on it. */
cudaError_t capture_sync_check(cudaStream_t s, const char *call);
/* A "potentially unsafe" call (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset,
 * cudaDeviceSynchronize) while a capture is open. */
cudaError_t capture_unsafe_check(const char *call);
/* cudaEventRecord(e, s): true when s is capturing (recorded into the capture; the runtime
 * records nothing); false forgets any capture e was recorded in. */
bool capture_event_record(cudaEvent_t e, cudaStream_t s);
/* A call that synchronises with, queries or times e. */
cudaError_t capture_event_check(cudaEvent_t e, const char *call);
/* cudaStreamWaitEvent(s, e, flags): *taken when the wait was recorded into s's capture (or
 * refused); the runtime then queues nothing. */
cudaError_t capture_wait_check(cudaStream_t s, cudaEvent_t e, unsigned flags, bool *taken);

/* The stream-order checker (emu_order.cc), fed by emu_runtime.cc, streams by id: an operation
 * queued on `stream` with its ranges (a defect when one was last used on another stream by an
 * operation not ordered before it), the host's wait for everything queued on `stream` so far,
 * an event recorded on `stream`, `stream` waiting for an event, the host waiting for an event. */
void order_op(int stream, const std::string &name, const std::vector<range> &uses);
void order_host_waits(int stream);
void order_record(const void *event, int stream);
void order_wait(int stream, const void *event);
void order_host_waits_event(const void *event);

/* Waits until every stream has run all work queued so far (cudaDeviceSynchronize). */
void sync_all();

/* The fault switches of DS_EMU_FAULT: a comma-separated list of NAME or NAME=VALUE. Returns
 * VALUE ("" for a bare NAME), or NULL when NAME is not in the list. The names are listed in
 * emu_runtime.cc's header comment; each library reads its own. */
const char *fault(const char *name);

/* Seeded random numbers (DS_EMU_SEED, default 1): the scheduler's delays and the
 * libraries' orders that real hardware does not fix (NCCL's summation order). One stream
 * per name, so adding a use in one place does not shift another's. Thread-safe. */
uint64_t random(const char *stream_name);

/* Milliseconds since the first call: what timing events record. */
double now_ms();

}  // namespace emu

#endif

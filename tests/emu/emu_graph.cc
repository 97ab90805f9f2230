/* emu_graph: stream capture and graph replay on the emulated device (emu.h).
 *
 * cudaStreamBeginCapture puts a stream in capture: every operation queued on it from then on
 * (a kernel, a copy, a memset, a cuDNN or cuBLAS call, an event record) is recorded instead of
 * run, as it was queued: a kernel's arguments were copied at its launch, a library call's
 * scalars read at the call, so a replay runs each with the values of the capture, as CUDA's
 * frozen kernel node parameters do; only what the operation reads from memory when it runs
 * (device memory, page-locked host memory) can differ from one replay to the next.
 * cudaStreamEndCapture returns the recording as a graph, cudaGraphInstantiate makes it
 * launchable, and cudaGraphLaunch queues its operations on a stream, in the recorded order.
 *
 * What CUDA refuses during a capture is refused here with its answer, and the capture is
 * invalidated (cudaStreamEndCapture then answers cudaErrorStreamCaptureInvalidated and gives
 * no graph), as CUDA does:
 *   - waiting for or querying the capturing stream (cudaStreamSynchronize, cudaStreamQuery)
 *     and a copy that involves pageable host memory on it (the call would have to wait, or
 *     the bytes be taken now): cudaErrorStreamCaptureUnsupported;
 *   - "potentially unsafe" calls (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset,
 *     cudaDeviceSynchronize) from the capturing thread (capture mode global or thread-local),
 *     or from any thread while a global-mode capture is open: cudaErrorStreamCaptureUnsupported;
 *   - synchronising with, querying or timing an event last recorded in an open capture:
 *     cudaErrorCapturedEvent;
 *   - a capturing stream waiting for an event recorded outside its capture without
 *     cudaEventWaitExternal: cudaErrorStreamCaptureIsolation.
 * Not emulated: a capture that forks into other streams (a stream outside the capture waiting
 * for an event recorded in it), graphs built node by node, updates of an instantiated graph,
 * device-side launches; ds uses none of them, and each is a defect here. */
#include "emu.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct recorded {
    std::string name;
    std::function<void()> fn;
    std::vector<emu::range> uses;
};

struct capture {
    cudaStream_t stream;
    cudaStreamCaptureMode mode;
    std::thread::id thread;
    std::string invalid;   /* why it was invalidated; empty while it is valid */
    std::vector<recorded> ops;
};

struct state {
    std::mutex m;
    std::map<cudaStream_t, capture *> open;      /* by capturing stream */
    std::map<cudaEvent_t, capture *> events;     /* events last recorded in an open capture */
};

state &st()
{
    static state *s = new state;   /* never destroyed: workers may run at exit */
    return *s;
}

void invalidate(capture *c, const char *call, cudaError_t e)
{
    if (!c->invalid.empty()) return;
    c->invalid = std::string(call) + " (" + cudaGetErrorName(e) + ")";
    emu::note("the capture of a stream is invalidated by %s", c->invalid.c_str());
}

}  // namespace

struct CUgraph_st {
    std::vector<recorded> ops;
};

struct CUgraphExec_st {
    std::vector<recorded> ops;
};

namespace emu {

bool capture_take(cudaStream_t s, const std::string &name, const std::function<void()> &fn,
                  const std::vector<range> &uses)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.open.find(s);
    if (it == S.open.end()) return false;
    if (it->second->invalid.empty()) it->second->ops.push_back({name, fn, uses});
    return true;
}

cudaError_t capture_sync_check(cudaStream_t s, const char *call)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.open.find(s);
    if (it == S.open.end()) return cudaSuccess;
    invalidate(it->second, call, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t capture_unsafe_check(const char *call)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    cudaError_t e = cudaSuccess;
    for (auto &o : S.open) {
        capture *c = o.second;
        bool mine = c->thread == std::this_thread::get_id();
        if ((mine && c->mode != cudaStreamCaptureModeRelaxed) || c->mode == cudaStreamCaptureModeGlobal) {
            invalidate(c, call, cudaErrorStreamCaptureUnsupported);
            e = cudaErrorStreamCaptureUnsupported;
        }
    }
    return e;
}

bool capture_event_record(cudaEvent_t e, cudaStream_t s)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.open.find(s);
    if (it == S.open.end()) {
        S.events.erase(e);
        return false;
    }
    /* within the one stream of the capture, an event orders nothing the stream's own order
     * does not: recorded as a point with no work */
    if (it->second->invalid.empty()) it->second->ops.push_back({"cudaEventRecord (captured)", [] {}, {}});
    S.events[e] = it->second;
    return true;
}

cudaError_t capture_event_check(cudaEvent_t e, const char *call)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.events.find(e);
    if (it == S.events.end()) return cudaSuccess;
    invalidate(it->second, call, cudaErrorCapturedEvent);
    return cudaErrorCapturedEvent;
}

cudaError_t capture_wait_check(cudaStream_t s, cudaEvent_t e, unsigned flags, bool *taken)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    *taken = false;
    auto ev = S.events.find(e);
    auto it = S.open.find(s);
    capture *from = ev == S.events.end() ? nullptr : ev->second;
    capture *in = it == S.open.end() ? nullptr : it->second;
    if (from && from != in)
        emu::defect("cudaStreamWaitEvent: a stream waits for an event recorded in another stream's capture (a capture "
                    "that forks or merges streams is not emulated)");
    if (!in) return cudaSuccess;
    *taken = true;
    if (from == in) {   /* the same stream: its own order */
        if (in->invalid.empty()) in->ops.push_back({"cudaStreamWaitEvent (captured)", [] {}, {}});
        return cudaSuccess;
    }
    if (flags & cudaEventWaitExternal)
        emu::defect("cudaStreamWaitEvent: an external event waited for in a capture (cudaEventWaitExternal) is not "
                    "emulated");
    invalidate(in, "cudaStreamWaitEvent on an event recorded outside the capture", cudaErrorStreamCaptureIsolation);
    return cudaErrorStreamCaptureIsolation;
}

}  // namespace emu

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    if (!s) return cudaErrorStreamCaptureUnsupported;   /* the legacy stream cannot be captured */
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    if (S.open.count(s)) return cudaErrorIllegalState;
    capture *c = new capture;
    c->stream = s;
    c->mode = mode;
    c->thread = std::this_thread::get_id();
    S.open[s] = c;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    *graph = nullptr;
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.open.find(s);
    if (it == S.open.end()) return cudaErrorIllegalState;
    capture *c = it->second;
    if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
        return cudaErrorStreamCaptureWrongThread;
    S.open.erase(it);
    for (auto e = S.events.begin(); e != S.events.end();)
        e = e->second == c ? S.events.erase(e) : std::next(e);
    cudaError_t rc = cudaSuccess;
    if (!c->invalid.empty()) {
        emu::note("cudaStreamEndCapture: no graph, the capture was invalidated by %s", c->invalid.c_str());
        rc = cudaErrorStreamCaptureInvalidated;
    } else {
        *graph = new CUgraph_st;
        (*graph)->ops = std::move(c->ops);
    }
    delete c;
    return rc;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    state &S = st();
    std::lock_guard<std::mutex> lock(S.m);
    auto it = S.open.find(s);
    *status = it == S.open.end() ? cudaStreamCaptureStatusNone
              : it->second->invalid.empty() ? cudaStreamCaptureStatusActive
                                            : cudaStreamCaptureStatusInvalidated;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    if (!graph) return cudaErrorInvalidValue;
    *exec = new CUgraphExec_st;
    (*exec)->ops = graph->ops;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    if (!exec) return cudaErrorInvalidValue;
    emu::unread_launch_check("cudaGraphLaunch");
    emu::note("cudaGraphLaunch: %zu recorded operations", exec->ops.size());
    for (const recorded &r : exec->ops) emu::enqueue_recorded(s, r.name, r.fn, r.uses);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    /* queued replays hold copies of the operations: destroying the executable is safe at once */
    delete exec;
    return cudaSuccess;
}

}  // extern "C"

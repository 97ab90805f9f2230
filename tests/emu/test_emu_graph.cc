/* Stream capture and graph replay on the emulated device (emu_graph.cc): a captured kernel
 * replays with the arguments of its capture (a scalar passed by value stays the captured
 * one, a scalar read from device memory is the one written before each launch: the reason
 * ds keeps the learning rate in device memory), nothing runs during the capture, a replay
 * follows the stream's order, a cuBLAS call and a device-to-device copy are captured and
 * replayed like kernels; and each call CUDA refuses during a capture is refused with CUDA's
 * error, after which cudaStreamEndCapture answers cudaErrorStreamCaptureInvalidated and gives
 * no graph. */
#include "emu_device.h"
#include "emu_test.h"

#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

/* x[i] = x[i] * by_value + *in_memory: the two ways a kernel can take a per-step scalar */
__global__ void scale_add(float *x, float by_value, const float *in_memory, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * by_value + *in_memory;
}

static cudaStream_t new_stream()
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

/* A kernel captured with by_value = 2 and *in_memory = 1, replayed with the host's values
 * changed to 3 and 10 before each launch: the by-value argument stays 2 (CUDA freezes a
 * kernel node's parameters), the one in device memory is read when the replay runs. */
static void test_frozen_arguments()
{
    const int n = 300;
    cudaStream_t s = new_stream();
    float *x, *scalar, *pinned;
    CK(cudaMalloc((void **)&x, n * sizeof(float)));
    CK(cudaMalloc((void **)&scalar, sizeof(float)));
    CK(cudaHostAlloc((void **)&pinned, sizeof(float), cudaHostAllocDefault));
    CK(cudaMemsetAsync(x, 0, n * sizeof(float), s));
    *pinned = 1;
    CK(cudaMemcpyAsync(scalar, pinned, sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));

    float by_value = 2;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cudaStreamCaptureStatus status;
    CK(cudaStreamIsCapturing(s, &status));
    LAUNCH(scale_add, dim3((n + 127) / 128), dim3(128), 0, s, x, by_value, (const float *)scalar, n);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    float h[n];
    CK(cudaMemcpyAsync(h, x, n * sizeof(float), cudaMemcpyDeviceToHost, s));   /* outside the capture */
    CK(cudaStreamSynchronize(s));
    report("capture: the stream says it is capturing", status == cudaStreamCaptureStatusActive);
    report("capture: a captured kernel does not run", h[0] == 0 && h[n - 1] == 0);

    /* two replays: x = (0 * 2 + 10) = 10, then 10 * 2 + 10 = 30 (with the host's 3: 40) */
    by_value = 3;
    *pinned = 10;
    CK(cudaMemcpyAsync(scalar, pinned, sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaMemcpyAsync(h, x, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    char d[128];
    snprintf(d, sizeof d, "x = %g (want 30: the captured 2 by value, the written 10 from memory)", h[n / 2]);
    report("replay: an argument passed by value keeps its captured value, one in device memory is read at the "
           "replay",
           h[0] == 30 && h[n / 2] == 30 && h[n - 1] == 30, d);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(scalar));
    CK(cudaFree(x));
}

/* A device-to-device copy and a cuBLAS GEMM captured (the library enqueues on its stream),
 * replayed after the inputs change: the replay computes from the new inputs, as a launch
 * of the calls would. */
static void test_library_capture()
{
    cudaStream_t s = new_stream();
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
        report("capture: cuBLAS and copies replay", false, "cublasCreate failed");
        return;
    }
    const int n = 4;
    float a[n * n], b[n * n], c[n * n], *da, *db, *dc, *dcopy;
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 5), b[i] = (float)(i % 3) - 1;
    CK(cudaMalloc((void **)&da, sizeof a));
    CK(cudaMalloc((void **)&db, sizeof b));
    CK(cudaMalloc((void **)&dc, sizeof c));
    CK(cudaMalloc((void **)&dcopy, sizeof c));
    CK(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
    const float one = 1, zero = 0;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    bool ok = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n) ==
              CUBLAS_STATUS_SUCCESS;
    CK(cudaMemcpyAsync(dcopy, dc, sizeof c, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    CK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));   /* written after the capture */
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(c, dcopy, sizeof c, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++)   /* column-major: c[i + j n] = sum_k a[i + k n] b[k + j n] */
        for (int i = 0; i < n; i++) {
            float want = 0;
            for (int k = 0; k < n; k++) want += a[i + k * n] * b[k + j * n];
            ok = ok && c[i + j * n] == want;
        }
    report("capture: a cuBLAS GEMM and a device copy replay from the inputs of the launch", ok);
    CK(cudaGraphExecDestroy(exec));
    cublasDestroy(h);
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    CK(cudaFree(dcopy));
}

/* One call CUDA refuses during a capture of a stream: the call's answer, and the capture's
 * end then refusing a graph. */
static void refused(const char *name, cudaError_t want, cudaError_t (*call)(cudaStream_t s, void *arg), void *arg)
{
    cudaStream_t s = new_stream();
    float *x;
    CK(cudaMalloc((void **)&x, 64));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(x, 0, 64, s));
    cudaError_t got = call(s, arg);
    cudaGetLastError();
    cudaGraph_t graph = (cudaGraph_t)1;
    cudaError_t end = cudaStreamEndCapture(s, &graph);
    char d[256];
    snprintf(d, sizeof d, "the call answered %s (want %s), the capture's end %s with %s", cudaGetErrorName(got),
             cudaGetErrorName(want), cudaGetErrorName(end), graph ? "a graph" : "no graph");
    std::string full = std::string("capture refuses ") + name;
    report(full.c_str(), got == want && end == cudaErrorStreamCaptureInvalidated && graph == nullptr, d);
    CK(cudaStreamSynchronize(s));   /* the capture is over: the stream is usable again */
    CK(cudaFree(x));
}

static cudaError_t call_sync(cudaStream_t s, void *) { return cudaStreamSynchronize(s); }
static cudaError_t call_query(cudaStream_t s, void *) { return cudaStreamQuery(s); }
static cudaError_t call_device_sync(cudaStream_t, void *) { return cudaDeviceSynchronize(); }
static cudaError_t call_malloc(cudaStream_t, void *)
{
    void *p = nullptr;
    return cudaMalloc(&p, 256);
}
static cudaError_t call_free(cudaStream_t, void *arg) { return cudaFree(arg); }
static cudaError_t call_memcpy(cudaStream_t, void *arg)
{
    float h[4] = {0};
    return cudaMemcpy(arg, h, sizeof h, cudaMemcpyHostToDevice);
}
static cudaError_t call_memset(cudaStream_t, void *arg) { return cudaMemset(arg, 0, 16); }
static cudaError_t call_pageable_up(cudaStream_t s, void *arg)
{
    static float h[4];
    return cudaMemcpyAsync(arg, h, sizeof h, cudaMemcpyHostToDevice, s);
}
static cudaError_t call_pageable_down(cudaStream_t s, void *arg)
{
    static float h[4];
    return cudaMemcpyAsync(h, arg, sizeof h, cudaMemcpyDeviceToHost, s);
}
static cudaError_t call_captured_event_sync(cudaStream_t s, void *)
{
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaEventRecord(e, s));
    return cudaEventSynchronize(e);
}
static cudaError_t call_captured_event_query(cudaStream_t s, void *)
{
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaEventRecord(e, s));
    return cudaEventQuery(e);
}
static cudaError_t call_outside_event_wait(cudaStream_t s, void *arg)
{
    return cudaStreamWaitEvent(s, (cudaEvent_t)arg, 0);
}

/* An event recorded in the capture and waited for by the same stream is part of it: the
 * capture stays valid. */
static void test_captured_event_wait()
{
    cudaStream_t s = new_stream();
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaEventRecord(e, s));
    cudaError_t w = cudaStreamWaitEvent(s, e, 0);
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(s, &graph);
    report("capture: an event recorded and waited for in the same capture keeps it valid",
           w == cudaSuccess && end == cudaSuccess && graph);
    if (graph) CK(cudaGraphDestroy(graph));
    CK(cudaEventSynchronize(e));   /* the capture is over: the event may be waited for */
}

int main()
{
    test_frozen_arguments();
    test_library_capture();
    test_captured_event_wait();
    void *dev;
    CK(cudaMalloc(&dev, 256));
    cudaEvent_t outside;
    cudaStream_t other = new_stream();
    CK(cudaEventCreate(&outside));
    CK(cudaEventRecord(outside, other));
    refused("cudaStreamSynchronize of the capturing stream", cudaErrorStreamCaptureUnsupported, call_sync, nullptr);
    refused("cudaStreamQuery of the capturing stream", cudaErrorStreamCaptureUnsupported, call_query, nullptr);
    refused("cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported, call_device_sync, nullptr);
    refused("cudaMalloc from the capturing thread", cudaErrorStreamCaptureUnsupported, call_malloc, nullptr);
    refused("cudaFree from the capturing thread", cudaErrorStreamCaptureUnsupported, call_free, dev);
    refused("a synchronous cudaMemcpy", cudaErrorStreamCaptureUnsupported, call_memcpy, dev);
    refused("a synchronous cudaMemset", cudaErrorStreamCaptureUnsupported, call_memset, dev);
    refused("cudaMemcpyAsync from pageable memory", cudaErrorStreamCaptureUnsupported, call_pageable_up, dev);
    refused("cudaMemcpyAsync to pageable memory", cudaErrorStreamCaptureUnsupported, call_pageable_down, dev);
    refused("cudaEventSynchronize of an event recorded in the capture", cudaErrorCapturedEvent,
            call_captured_event_sync, nullptr);
    refused("cudaEventQuery of an event recorded in the capture", cudaErrorCapturedEvent, call_captured_event_query,
            nullptr);
    refused("a wait for an event recorded outside the capture", cudaErrorStreamCaptureIsolation,
            call_outside_event_wait, outside);
    CK(cudaFree(dev));
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}

/* backend/cuda_internal: what the CUDA backend's two files share (C++ only): cuda.cu holds
 * the device, memory, streams and marks, the linear layer, the gradient reduction and the
 * backend's table; cuda_conv.cu the convolutions through cuDNN (the twin of cpu_conv.c). */
#ifndef DS_BACKEND_CUDA_INTERNAL_H
#define DS_BACKEND_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cudnn.h>

#include "cuda_check.h"
extern "C" {
#include "backend.h"
}

/* cuDNN 9 keeps a message of its own on the last failure: said with the status. */
#define cudnnCheck(call)                                                                   \
    do {                                                                                   \
        cudnnStatus_t s_ = (call);                                                         \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                  \
            char last_[512] = "";                                                          \
            cudnnGetLastErrorString(last_, sizeof last_);                                  \
            ds_die("%s:%d: %s: %s%s%s", __FILE__, __LINE__, #call, cudnnGetErrorString(s_), \
                   last_[0] ? ": " : "", last_);                                           \
        }                                                                                  \
    } while (0)

#define cublasCheck(call)                                                                  \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            ds_die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
                   cublasGetStatusString(s_));                                             \
    } while (0)

/* The backend's state, one GPU per process: bound once (cuda.cu's bind_device), set by
 * ds_cuda_select. cuda.cu defines it; each file reaches it as g. */
typedef struct {
    int ready, device;
    int graphs;               /* DS_CUDA_GRAPHS: the training step may be recorded as a graph */
    int graphs_said;          /* why it is not, said once (--verbose) */
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *scratch;            /* kernels' reductions, DS_CUDA_SCRATCH_BYTES */
    void *cublas_ws;          /* cuBLAS workspace, fixed so it never allocates mid-step */
    ds_precision precision;
    int deterministic;
    int nccl;                 /* joined the ranks' communicator: gradients are reduced */
    cudaStream_t comm_stream; /* NCCL's stream, beside the compute stream */
    cudaEvent_t produced;     /* recorded on the compute stream as a bucket is started */
    /* --deterministic: the ordered reduction (cuda_reduce_start) in place of ncclAllReduce,
     * its staging (the ranks' copies of this rank's chunk of a bucket) and its per-peer
     * arguments; and the gradient of one micro-batch before it is added (grad_tmp) */
    int ordered;
    float *stage;
    size_t stage_floats;
    float **x_send, **x_recv;
    size_t *x_send_n, *x_recv_n;
    float *grad_tmp;
    size_t grad_tmp_floats;
    cudaStream_t input_stream;  /* upload_async: the next batch crosses beside the compute */
    /* marks: the last DS_MARKS of each stream, an event each (timing ones, for mark_seconds) */
    cudaEvent_t mark_event[2][DS_MARKS];
    int marks[2];
} ds_cuda_state;

extern ds_cuda_state ds_cuda_backend_state;
static ds_cuda_state &g = ds_cuda_backend_state;

/* cuda.cu: the buffer a --deterministic weight gradient is computed into before it is added
 * (at least `floats` of them; see there). */
float *ds_cuda_grad_tmp(size_t floats);

/* cuda_conv.cu: the backend's convolution entries (backend.h), and the convolutions' note of
 * a copied output gradient, which anything that may write device memory drops (dout_copy
 * there). */
size_t ds_cuda_conv_workspace(const ds_conv_desc *d);
void ds_cuda_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws);
void ds_cuda_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                           void *ws);
void ds_cuda_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws);
void ds_cuda_dout_copy_drop(void);

#endif

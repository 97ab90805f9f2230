/* backend: the operations a training engine needs, as one struct of function pointers.
 *
 * backend/cpu.c (OpenMP, own GEMM kernels) is the reference; backend/cuda.cu (cuDNN, cuBLAS,
 * own kernels) implements the same functions and is tested against it op by op. The model
 * (model.c) owns the layer list and the memory plan and calls only these functions, so it
 * never knows which backend runs.
 *
 * Conventions, fixed for every backend:
 *   - Activations are NHWC float32 (the CUDA backend may hold bf16 copies internally).
 *   - Convolution weights are [K, R, S, C] ("OHWI"); the checkpoint converts to PyTorch's
 *     OIHW at the file boundary. Linear weights are [out, in] as PyTorch.
 *   - Pointers are in the backend's memory (host for CPU, device for CUDA); alloc/upload/
 *     download move data across.
 *   - Output first; `d` prefix = gradient. Backward ops that produce parameter gradients
 *     ACCUMULATE into them (+=), so gradient accumulation over micro-batches is free;
 *     gradients of activations are overwritten (=) unless the op says otherwise.
 *   - No op allocates: scratch comes from the workspace the model planned with
 *     conv_workspace.
 *   - Determinism: every CPU op gives bitwise the same result for any OpenMP thread count
 *     (reductions run over fixed chunks summed in a fixed order), so resumed runs and
 *     different rank layouts can be compared bitwise.
 */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n, h, w, c;      /* input  [n, h, w, c] */
    int k, r, s;         /* output channels, kernel height, kernel width */
    int stride, pad;     /* same in both dimensions */
    int p, q;            /* output height, width: (h + 2 pad - r) / stride + 1 */
} ds_conv_desc;

typedef struct {
    int n, h, w, c;      /* input */
    int k, stride, pad;  /* window k x k */
    int p, q;            /* output */
} ds_pool_desc;

typedef struct ds_backend {
    const char *name;    /* "cpu", "cuda" */

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes);                  /* zeroed; NULL on failure */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*sync)(void);                            /* wait for queued work */

    /* ---- convolution ---- */
    size_t (*conv_workspace)(const ds_conv_desc *d);   /* bytes of scratch for the three ops */
    /* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
    void (*conv_fwd)(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws);
    /* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w) */
    void (*conv_bwd_data)(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws);
    /* dw [k,r,s,c] += correlation(in, dout) */
    void (*conv_bwd_weight)(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws);

    /* ---- batch norm over m = n*h*w rows of c channels, fused with an optional residual
     * add and ReLU:  out = relu?( gamma * (in - mean) * invstd + beta + residual? ) ---- */
    /* Training: batch statistics. Writes mean[c], var[c] (biased, divided by m) and
     * invstd[c] = 1/sqrt(var + eps) for the backward pass and the running-stat update. */
    void (*bn_fwd_train)(float *out, float *mean, float *var, float *invstd, const float *in,
                         const float *gamma, const float *beta, const float *residual, int relu,
                         int m, int c, float eps);
    /* Inference: running statistics. */
    void (*bn_fwd_infer)(float *out, const float *in, const float *gamma, const float *beta,
                         const float *running_mean, const float *running_var, const float *residual,
                         int relu, int m, int c, float eps);
    /* Backward of bn_fwd_train. `out` is the forward output (for the ReLU mask when relu);
     * dout is overwritten with the gradient before the ReLU when relu (it is scratch).
     * din = dx (overwritten); dresidual (if non-NULL) = gradient into the residual input
     * (overwritten); dgamma, dbeta += (accumulated). */
    void (*bn_bwd)(float *din, float *dresidual, float *dgamma, float *dbeta, float *dout,
                   const float *out, const float *in, const float *gamma, const float *mean,
                   const float *invstd, int relu, int m, int c);

    /* ---- pooling ---- */
    void (*maxpool_fwd)(float *out, const float *in, const ds_pool_desc *d);
    /* din = 0 then scattered from dout to each window's (first) maximum. */
    void (*maxpool_bwd)(float *din, const float *dout, const float *in, const float *out,
                        const ds_pool_desc *d);
    /* out [n, c] = mean over hw of in [n, hw, c] */
    void (*avgpool_fwd)(float *out, const float *in, int n, int hw, int c);
    void (*avgpool_bwd)(float *din, const float *dout, int n, int hw, int c);

    /* ---- fully connected: out [n, o] = in [n, i] * w[o, i]^T + b[o] ---- */
    void (*linear_fwd)(float *out, const float *in, const float *w, const float *b, int n, int i, int o);
    /* din = dout * w (overwritten, skipped when din is NULL); dw += dout^T in; db += sum dout */
    void (*linear_bwd)(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int n, int i, int o);

    /* ---- loss: softmax cross-entropy with label smoothing eps:
     * target = (1 - eps) * onehot + eps / c. Writes per-sample losses loss[n] and
     * dlogits[n, c] = (softmax - target) * scale (scale = 1 / global batch). A label outside
     * [0, c) marks a padding sample: loss 0, dlogits 0. ---- */
    void (*softmax_xent)(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                         int n, int c, float smoothing, float scale);

    /* ---- optimizer: torch.optim.SGD, dampening 0:
     *   g = grad + wd * w;  buf = momentum * buf + g (buf = g on the first step);
     *   step = nesterov ? g + momentum * buf : buf;  w -= lr * step
     * `first` selects the first-step rule. ---- */
    void (*sgd_step)(float *w, float *buf, const float *grad, size_t n, float lr, float momentum,
                     float wd, int nesterov, int first);

    /* ---- elementwise helpers ---- */
    void (*scale)(float *x, float alpha, size_t n);                     /* x *= alpha */
    void (*axpy)(float *y, float alpha, const float *x, size_t n);      /* y += alpha x */
    /* Input batch: uint8 NHWC [n, H, W, 3] -> float NHWC [n, ch, cw, 3], crop at (y0[i], x0[i]),
     * optional horizontal flip per sample, then (x/255 - mean) / std. */
    void (*normalize_u8)(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                         const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                         const float mean[3], const float std[3]);
} ds_backend;

extern const ds_backend ds_backend_cpu;
#ifdef DS_HAVE_CUDA
extern const ds_backend ds_backend_cuda;
/* Number of visible GPUs (0 when the driver or device is missing, never an error). */
int ds_cuda_device_count(void);
#endif

/* Picks the backend for --device ("cpu", "cuda" or "auto": cuda when a GPU is visible).
 * Returns NULL with a message when cuda is asked for and not available. */
const ds_backend *ds_backend_select(const char *device);

/* Applies a tool's --precision ("fp32", "tf32", "bf16"; NULL keeps the backend's own) and
 * --deterministic to the selected backend. Call it before ds_model_create: the model's
 * planning pass chooses convolution algorithms per precision and determinism. On cuda it
 * also binds the device now (the rank's local index), so a GPU that cannot be used is
 * reported here and NCCL can be set up on the right device afterwards. The CPU backend
 * computes fp32 and is deterministic for any thread count, so both settings are no-ops
 * there. Returns 0, or -1 with a message. */
int ds_backend_configure(const ds_backend *be, const char *precision, int deterministic);

#endif

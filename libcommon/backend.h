/* backend: the operations a training engine needs, as one struct of function pointers.
 *
 * backend/cpu.c (OpenMP, own GEMM kernels) is the reference; backend/cuda.cu (cuDNN, cuBLAS,
 * own kernels; its convolutions in cuda_conv.cu) implements the same functions and is tested
 * against it op by op. The model (model.c) owns the layer list and the memory plan and calls
 * only these functions, so it never knows which backend runs. Adding an op: the files it
 * touches, in order, are listed in docs/DESIGN.md §4.9 ("Adding an op").
 *
 * Conventions, fixed for every backend:
 *   - Activations are NHWC. Their storage type (ds_dtype) is the model's choice, from its
 *     precision (docs/DESIGN.md §4): every op that reads or writes an activation or an
 *     activation's gradient is told its type, in the op's descriptor or as its last argument;
 *     parameters, their gradients, statistics, losses and logits are always float32.
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

/* Storage of a tensor in backend memory. The order is fixed: zero is float32, so a
 * descriptor written without types is all float32. */
typedef enum { DS_F32, DS_BF16 } ds_dtype;

/* Bytes per element; "f32" / "bf16". */
size_t ds_dtype_size(ds_dtype t);
const char *ds_dtype_name(ds_dtype t);

typedef struct {
    int n, h, w, c;      /* input  [n, h, w, c] */
    int k, r, s;         /* output channels, kernel height, kernel width */
    int stride, pad;     /* same in both dimensions */
    int p, q;            /* output height, width: (h + 2 pad - r) / stride + 1 */
    int no_dx;           /* 1: the input needs no gradient (the network's input): conv_bwd_data is
                            never called, and a backend need not plan it */
    ds_dtype in_t;       /* storage of in and din */
    ds_dtype out_t;      /* storage of out and dout */
    ds_dtype w_t;        /* storage of the weights fwd and bwd_data read (dw is float32) */
} ds_conv_desc;

/* The inference batch norm conv_fwd_bn applies to a convolution's output: bn_fwd_infer's
 * arguments over the k output channels (float32), residual of the output's storage. */
typedef struct {
    const float *gamma, *beta, *running_mean, *running_var;
    const void *residual;  /* or NULL */
    int relu;
    float eps;
} ds_conv_bn;

typedef struct {
    int n, h, w, c;      /* input */
    int k, stride, pad;  /* window k x k */
    int p, q;            /* output */
    ds_dtype t;          /* storage of in, out and their gradients */
} ds_pool_desc;

/* maxpool_fwd's argmax byte of a window with no element in the image */
#define DS_POOL_NO_ARGMAX 0xff

/* A training batch norm's ReLU bitmask (bn_fwd_train writes it, bn_bwd reads it): one byte
 * per DS_RELU_MASK_BYTES bytes of the output, the 16 bytes a CUDA vector kernel stores at
 * once, so each byte is one thread's. ds_relu_mask_bytes: its size for m rows of c channels
 * in storage t, 0 where the layer can have none (c not a multiple of a byte's elements). */
#define DS_RELU_MASK_BYTES 16
/* The elements one mask byte covers in storage t (8 bf16, 4 float32). */
static inline int ds_relu_mask_elems(ds_dtype t) { return DS_RELU_MASK_BYTES / (t == DS_BF16 ? 2 : 4); }
static inline size_t ds_relu_mask_bytes(int m, int c, ds_dtype t)
{
    const int v = ds_relu_mask_elems(t);
    return c % v ? 0 : (size_t)m * c / v;
}

/* AUTO is a request only (bf16 on a GPU, fp32 on the CPU); a selected backend's precision
 * is one of the other three. */
typedef enum { DS_PRECISION_FP32, DS_PRECISION_TF32, DS_PRECISION_BF16, DS_PRECISION_AUTO } ds_precision;

/* "fp32", "tf32", "bf16", "auto": the enum's order is the names' order. */
const char *ds_precision_name(ds_precision p);
/* Parses one of those names; returns 0, or -1 with a message naming the choices. */
int ds_precision_parse(const char *name, ds_precision *out);

/* Where to compute (--device). AUTO: cuda when a GPU is visible, else the CPU. */
typedef enum { DS_DEVICE_AUTO, DS_DEVICE_CPU, DS_DEVICE_CUDA } ds_device;

/* "auto", "cpu", "cuda": the enum's order is the names' order. */
const char *ds_device_name(ds_device d);
/* Parses one of those names; returns 0, or -1 with a message naming the choices. */
int ds_device_parse(const char *name, ds_device *out);

/* What a tool asks of the backend it selects. */
typedef struct {
    ds_precision precision;  /* arithmetic of the convolutions (and a GPU's GEMMs): the CPU
                                computes fp32 or bf16, a GPU any of the three; AUTO: bf16 on a
                                GPU, fp32 on the CPU */
    int deterministic;       /* 1: results repeatable bit for bit between runs (GPU: only
                                deterministic cuDNN algorithms; the CPU always is) */
    int data_parallel;       /* 1: the tool reduces gradients over the job's ranks, so the
                                backend joins them now (CUDA: the NCCL communicator) */
} ds_backend_opts;

enum { DS_STREAM_COMPUTE, DS_STREAM_INPUT };
#define DS_MARKS 64   /* marks of each stream a backend holds exactly */

typedef struct ds_clock ds_clock;   /* a backend's own (clock_alloc) */
typedef struct ds_graph ds_graph;   /* a backend's own (graph_end) */

/* A run of the to_bf16 op, in elements: n values from src + src_off to dst + dst_off. */
typedef struct {
    size_t dst_off, src_off, n;
} ds_bf16_run;

struct ds_comm_reduce_record;   /* comm.h */

typedef struct ds_backend {
    const char *name;        /* "cpu", "cuda" */
    int host_memory;         /* 1: its pointers are host memory, readable by the caller */
    /* What the selected backend computes with (set when it is selected). */
    ds_precision precision;
    int deterministic;
    /* 1: bn_fwd_train writes and bn_bwd reads a ReLU bitmask (ds_relu_mask_bytes) when given
     * one, and the memory plan holds one for each training ReLU; 0: the backend masks from
     * the output and the plan holds none. */
    int relu_mask;

    /* ---- memory ---- */
    /* zeroed; NULL on failure. The zeroing is compute-stream work (on a device, queued):
     * work queued on the input stream waits for a compute mark made after the alloc. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*sync)(void);                            /* wait for queued work */

    /* ---- streams and marks: a step queued without waiting for the device ----
     * Work is queued on two streams, each done in its order: DS_STREAM_COMPUTE (every op
     * above and below, upload, download, zero, copy) and DS_STREAM_INPUT (upload_async: the
     * next batch's bytes cross while the current step computes). A mark is a point in one
     * stream's queue: everything queued on it before the mark. Marks are numbered; the last
     * DS_MARKS of each stream stay exact, an older one stands for a later point of its
     * stream (waiting for it waits at least as long, never too little). A backend whose ops
     * are done when they return (the CPU) does everything at once: its marks are times. */
    int (*mark)(int stream);                       /* a mark after the work queued so far */
    void (*mark_wait)(int mark);                   /* host: returns once the mark is passed */
    void (*stream_wait)(int stream, int mark);     /* stream's later work waits for the mark */
    /* Seconds between two passed marks of the compute stream (of the last DS_MARKS); NAN
     * for marks it no longer holds. */
    double (*mark_seconds)(int from, int to);
    /* Clocks time what spans more marks than a backend holds (a step of many micro-batches
     * makes 1 + accum + 1 before its time is read). A clock is a point of the compute stream
     * of its own, held until it is recorded again: clock_record(c) sets it after the work
     * queued so far; clock_seconds(from, to): seconds between two recorded clocks once both
     * are passed (a mark made after them waited for), NAN when one was never recorded. The
     * CPU's clocks are times, as its marks are. clock_alloc: NULL on failure; a backend
     * without clocks (clock_alloc NULL) times nothing. */
    ds_clock *(*clock_alloc)(void);
    void (*clock_free)(ds_clock *c);
    void (*clock_record)(ds_clock *c);
    double (*clock_seconds)(const ds_clock *from, const ds_clock *to);
    /* Host memory the device copies to and from at full speed, without the host's help
     * (CUDA: page-locked); NULL on failure. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Makes [p, p + bytes) of ordinary host memory such memory until host_unregister(p);
     * 0, or -1 (with a warning) when the device refuses: then copy through upload. */
    int (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    /* Queued on DS_STREAM_INPUT: src (host_alloc'd or registered) is read when the copy runs,
     * not before it returns: it must stay as it is until a mark after the copy is passed. */
    void (*upload_async)(void *dst, const void *src_host, size_t bytes);
    /* Queued on DS_STREAM_COMPUTE; dst_host (host_alloc'd) holds the bytes once a mark
     * after it is passed. */
    void (*download_async)(void *dst_host, const void *src, size_t bytes);

    /* ---- a sequence of ops recorded once and replayed (CUDA graphs) ----
     * graph_begin: the ops queued on the compute stream from now until graph_end are
     * recorded, not run; 0, or -1 where the backend will not record (switched off, or a
     * reduction over ranks, which it does not record: said once with --verbose; where it
     * records, reduce_start has nothing to do and a recording leaves it out). Between the two
     * only compute-stream ops (those above and below, but none of upload, download, sync,
     * marks, clocks, the async copies or the reduction) may be called. graph_end: the
     * recording, or NULL (with a message) when it failed; the recorded ops never ran either
     * way, so the caller queues them again as calls. graph_launch queues the recorded ops on
     * the compute stream, each with the arguments it had when recorded: what differs from
     * one launch to the next must be read from backend memory, written before the launch
     * (sgd_step's lr). Capture after the ops have run once as calls: a first call may choose
     * (a convolution's algorithm) or grow (a scratch buffer) on the host. All four NULL where
     * the backend has no graphs (the CPU): the caller queues the ops each time. */
    int (*graph_begin)(void);
    ds_graph *(*graph_end)(void);
    void (*graph_launch)(ds_graph *g);
    void (*graph_free)(ds_graph *g);

    /* ---- convolution ---- */
    /* Bytes of scratch for the three ops at d's shape (two with d->no_dx; backward-data's
     * for either value of accumulate), and enough for every run of the same convolution
     * with n, h and w no larger (p, q following): a model planned at its largest batch and
     * input runs smaller ones in the same workspace.
     * SIZE_MAX, with a message, when the backend cannot compute an op d needs (a GPU
     * library with no algorithm for it, or storage types its precision does not take).
     * The types of in, out and w are d's in_t, out_t and w_t. */
    size_t (*conv_workspace)(const ds_conv_desc *d);
    /* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
    void (*conv_fwd)(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws);
    /* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w) with accumulate = 0; with 1,
     * din += that result (an input with two consumers: the second adds its part), as
     * computing it into another buffer and calling add would: the result rounded to din's
     * storage, then added, a bf16 sum rounded once more (the CPU's bits; a GPU may add
     * within the convolution, rounding once). */
    void (*conv_bwd_data)(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                          void *ws);
    /* dw [k,r,s,c] += correlation(in, dout); dw float32 */
    void (*conv_bwd_weight)(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws);
    /* Inference's convolution and batch norm in one pass: out = bn_fwd_infer (below) of
     * conv_fwd's result, applied while the convolution's output is still in cache, to the
     * bit (the convolution's stored values, d->out_t, are what batch norm reads); out must
     * not overlap in or bn->residual. Optional: NULL where a backend has none, and the model
     * calls the two ops. */
    void (*conv_fwd_bn)(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                        const ds_conv_bn *bn);

    /* ---- batch norm over m = n*h*w rows of c channels, fused with an optional residual
     * add and ReLU:  out = relu?( gamma * (in - mean) * invstd + beta + residual? ).
     * t is the storage of out, in, residual and their gradients (arithmetic is float32, a
     * bf16 result rounded once); gamma, beta and the statistics are float32. ---- */
    /* Training: batch statistics. Writes mean[c], var[c] (biased, divided by m) and
     * invstd[c] = 1/sqrt(var + eps) for the backward pass. mean_sum and var_sum (both or
     * neither; NULL: none), the running statistics' sums over micro-batches, get
     * mean_sum += 1 * mean and var_sum += (float)(m / (m - 1.0)) * var (the unbiased
     * variance, m > 1), each the product rounded, then the sum: axpy's bits, without its
     * launches.
     * mask (NULL: none) is the ReLU's bitmask, for bn_bwd to read instead of out: one byte
     * per DS_RELU_MASK_BYTES (16) bytes of out, V = 16 / (size of t) elements a byte (8 for
     * bf16, 4 for float32): byte g covers elements [g V, g V + V) of the flat [m, c] tensor,
     * bit k set when element g V + k as stored is > 0 (float32's `out > 0` on the stored
     * value: NaN, -0, +0 and negatives give 0), ds_relu_mask_bytes in all. Given only with
     * relu and c a multiple of V, and by the model only to a backend with relu_mask set; the
     * CUDA backend stops with an error on any other call, the CPU backend ignores it (its
     * backward masks from out). */
    void (*bn_fwd_train)(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                         float *var_sum, const void *in, const float *gamma, const float *beta, const void *residual,
                         int relu, int m, int c, float eps, ds_dtype t);
    /* Inference: running statistics. */
    void (*bn_fwd_infer)(void *out, const void *in, const float *gamma, const float *beta,
                         const float *running_mean, const float *running_var, const void *residual,
                         int relu, int m, int c, float eps, ds_dtype t);
    /* Backward of bn_fwd_train. `out` is the forward output (for the ReLU mask when relu);
     * mask (NULL: none) the bitmask bn_fwd_train wrote with it, which a backend may read
     * instead of out (the CUDA backend does; out is still given). din = dx (overwritten);
     * dresidual (if non-NULL) = gradient into the residual input, dout masked by the ReLU
     * (overwritten); dgamma, dbeta += (accumulated). Either din or dresidual may be dout.
     * dout is scratch: when relu it may be overwritten with the gradient before the ReLU
     * (the CPU backend does, and the CUDA backend without a mask), and where dresidual is
     * dout it is that gradient; otherwise nothing may read it afterwards. */
    void (*bn_bwd)(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout,
                   const void *out, const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                   const float *invstd, int relu, int m, int c, ds_dtype t);

    /* ---- pooling ---- */
    /* Storage d->t for in, out and their gradients. out: each window's maximum (a NaN never
     * wins, as with x > y from -inf). argmax (NULL when no backward follows) [n, p, q, c]
     * bytes: the window index r k + s (k <= 15) of the element maxpool_bwd gives the window's
     * gradient to, by backward's rule: the first element in the image seeds, a later one
     * replaces it only when strictly greater (so a NaN seen first keeps it, and a window of
     * -inf has its first); DS_POOL_NO_ARGMAX for a window wholly in the padding. */
    void (*maxpool_fwd)(void *out, uint8_t *argmax, const void *in, const ds_pool_desc *d);
    /* din = 0 then scattered from dout to each window's first maximum (the rule above);
     * argmax is what maxpool_fwd wrote for this in: a backend gathers by it (CUDA) or finds
     * the maxima in `in` again (the CPU), with the same result. */
    void (*maxpool_bwd)(void *din, const void *dout, const void *in, const void *out, const uint8_t *argmax,
                        const ds_pool_desc *d);
    /* out [n, c] (float32) = mean over hw of in [n, hw, c] (storage in_t, as din) */
    void (*avgpool_fwd)(float *out, const void *in, int n, int hw, int c, ds_dtype in_t);
    void (*avgpool_bwd)(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t);

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
     * `first` selects the first-step rule. lr is one float in backend memory, read when the
     * update runs (not when it is queued): the one argument that changes from step to step,
     * so that a step recorded once and replayed (graph_begin) takes each step's rate. ---- */
    void (*sgd_step)(float *w, float *buf, const float *grad, size_t n, const float *lr, float momentum,
                     float wd, int nesterov, int first);

    /* ---- elementwise helpers ---- */
    void (*scale)(float *x, float alpha, size_t n);                     /* x *= alpha */
    void (*axpy)(float *y, float alpha, const float *x, size_t n);      /* y += alpha x */
    /* y += x for n elements of storage t (activation gradients from two consumers); a bf16
     * sum is rounded once */
    void (*add)(void *y, const void *x, size_t n, ds_dtype t);
    /* For each of the nruns runs, dst[dst_off + i] = src[src_off + i] rounded to bf16 (i <
     * n), to nearest even (the CPU also flushes denormals to zero: cpu_bf16.h's rule): the
     * model's bf16 copy of its convolution weights, made once per step, every tensor a run
     * of one call (CUDA: one launch for up to DS_CUDA_BF16_RUNS runs). Runs must not
     * overlap in dst. */
    void (*to_bf16)(void *dst, const float *src, const ds_bf16_run *runs, int nruns);
    /* Input batch: uint8 NHWC [n, H, W, 3] -> float NHWC [n, ch, cw, 3], crop at (y0[i], x0[i]),
     * optional horizontal flip per sample, then (x/255 - mean) / std. */
    void (*normalize_u8)(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                         const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                         const float mean[3], const float std[3]);
    /* Input batch with a resampled box per sample (RandomResizedCrop): uint8 NHWC [n, H, W, 3]
     * -> float NHWC [n, ch, cw, 3]. Sample i's box, rows [y0, y0 + bh) x columns [x0, x0 + bw)
     * (inside the image), is resized to ch x cw by bilinear interpolation with half-pixel
     * centres, as torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
     * antialias=False) on the box's float values 0..255 (its scale in float, in / out; weights
     * and sums in float, rows first); then the optional horizontal flip and (v/255 - mean) / std.
     * A box of exactly ch x cw gives bitwise what normalize_u8 gives. */
    void (*resized_crop_u8)(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                            const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                            const uint8_t *flip, const float mean[3], const float std[3]);

    /* ---- gradient reduction over the job's ranks (comm.h), in pieces ("buckets") ----
     * reduce_start queues the in-place sum over all ranks of buf[0, n) (backend memory),
     * to run once the work queued before it has produced buf, and returns at once: the
     * model starts each bucket while backward still computes the next ones. to_all = 1:
     * every rank gets the sum; 0 (ordered_reduce backends only): the ranks' buffers are
     * added into rank 0's, in rank order, and the others' are left as they are (a step that
     * reduces each of its micro-batches as it ends: see model.h). reduce_wait returns when
     * every started sum is complete; ops queued after it see the sums. Every rank starts
     * the same buckets in the same order. In a world of one both do nothing. Between start
     * and wait the buffers are not touched and no other comm call is made. */
    void (*reduce_start)(float *buf, size_t n, int to_all);
    void (*reduce_wait)(void);
    /* 1: the sum is formed in rank order, ((b0 + b1) + b2) + ..., as one process
     * accumulating micro-batches adds them (the CPU's, through comm, on rank 0; CUDA under
     * --deterministic, each chunk on the rank that owns it): W ranks give bitwise what
     * --accum W gives in one, and to_all = 0 is available. 0: the library's order (NCCL). */
    int ordered_reduce;
    /* What the reduction's queue has seen (comm.h: the buckets queued, the events of the
     * latest round's first being queued and begun), which --verbose sets beside backward's
     * own to show the reduction overlapping it; NULL where the library reduces inside its
     * streams (NCCL) and nothing is seen from the host. */
    void (*reduce_stats)(struct ds_comm_reduce_record *rec);

    /* The set of kernels computing (the CPU's "avx512", "avx2+fma", "plain": cpu_isa.h), for
     * start-up lines; NULL where the backend has no such choice. */
    const char *(*kernel_set)(void);
    /* What sums the gradients over micro-batches and ranks, for the start-up line and the
     * checkpoint's /reduction: "ordered" (ordered_reduce, and the micro-batches of one rank
     * added in the same order), "nccl-allreduce" (NCCL's order), "accumulate" (one GPU: the
     * libraries add each micro-batch in their own way). */
    const char *(*reduction)(void);
} ds_backend;

/* The CPU backends: always there; host memory, deterministic for any thread count; fp32, and
 * bf16 (convolutions on bf16 operands with float32 sums; a model over it stores its
 * activations in bf16). Both compute every other op on either storage. */
extern const ds_backend ds_backend_cpu;
extern const ds_backend ds_backend_cpu_bf16;

/* Picks and starts the backend for --device ("cpu", "cuda" or "auto": cuda when a GPU is
 * visible), configured with opts (NULL: fp32, not deterministic, not data-parallel). The
 * CUDA backend binds its GPU (the rank's index on its node) and, for data_parallel under a
 * launcher, joins the ranks' NCCL communicator now, so a GPU that cannot be used is an
 * error here and not at the first op; every rank then calls it. One process drives one
 * GPU: selecting cuda again reconfigures the same backend (tests compare precisions). On
 * the CPU, fp32 and bf16 are two backends and tf32 is an error (a tensor-core format: the
 * CPU has no such arithmetic, and a silent fp32 would be a lie in the run's record).
 * Returns NULL with a message when the device is unavailable, or cannot compute in the
 * precision asked. */
const ds_backend *ds_backend_select(ds_device device, const ds_backend_opts *opts);

/* What computes, as the tools' start-up lines say it: "cpu in fp32 (2 threads, avx512
 * kernels)", "cuda in bf16 (16 threads)". Returns buf. */
const char *ds_backend_describe(const ds_backend *be, int threads, char *buf, size_t len);

#endif

/* model: ResNets as a flat list of layers over a backend, with memory planned once.
 *
 * A model is built from a small table per architecture (torchvision's resnet18/34/50/101,
 * v1.5 with the stride on the bottleneck's 3x3, and `resnet20`, the CIFAR-style network:
 * 3x3 stem of 16 channels, no max pool, 3 stages of 3 basic blocks with 16/32/64 channels,
 * projection shortcuts where the shape changes). Forward walks the list, backward walks it
 * in reverse; batch norm is fused with the residual add and the ReLU that follow it.
 *
 * Memory: five backend allocations (six under bf16), each sized by a planning pass at create
 * time, nothing allocated afterwards:
 *   parameters   every learnable tensor, then the BN running mean / var buffers
 *   weight copy  bf16 runs: the convolution weights rounded to bf16, which the convolutions
 *                read; made when they change (after each SGD step, init or a tensor load)
 *   reduction    gradients (same order as the learnables), then per BN layer the sums of
 *                micro-batch mean and unbiased variance: ONE buffer, so data-parallel
 *                training reduces gradients and BN statistics in a single allreduce
 *   momentum     SGD momentum buffers (same order as the learnables)
 *   activations  the input batch, every layer's output (kept for backward), BN batch
 *                statistics, the gradient ping-pong buffers, logits, labels, losses. Each
 *                activation and its gradient is stored as the plan's table says
 *                (docs/DESIGN.md §4): bf16 under --precision bf16, except the input, the
 *                pooled features and the logits, which are float32 in every run
 *   workspace    the largest convolution scratch any layer asks for
 * An inference-only model (training = 0) has no reduction or momentum buffers and keeps
 * only the two largest activations alive at a time.
 *
 * Tensors are named and shaped as PyTorch's state_dict (conv1.weight [O, I, H, W],
 * layer1.0.bn1.running_mean, fc.weight [classes, features], bn1.num_batches_tracked int64);
 * ds_model_tensor_get/set convert between PyTorch's OIHW and the engine's OHWI.
 *
 * One training step for world W ranks and A accumulation steps of micro-batch B:
 *     ds_model_zero_reduction(m);
 *     for each micro-batch: write the input (ds_model_input), ds_model_forward(m, n, 1),
 *                           loss += ds_model_backward(m, labels, n, 1.0f / G, smoothing),
 *                           the last one ds_model_backward_reduce(..., DS_REDUCE_TO_ALL);
 *     ds_model_reduce_wait(m);   (the reduction buffer is now summed over the ranks)
 *     ds_model_step(m, &sgd, A * W);
 * With W > 1, A > 1 and a backend whose reduction is ordered (be->ordered_reduce, the CPU's),
 * each micro-batch is reduced as it ends instead, so that rank 0 adds them one by one in
 * the order one process accumulating W x A micro-batches adds them (m = a W + r): before
 * micro-batch a > 0, ds_model_reduce_wait(m) and, on ranks other than 0,
 * ds_model_zero_reduction(m); after it, ds_model_backward_reduce(..., DS_REDUCE_TO_ROOT),
 * the last one DS_REDUCE_TO_ALL. A step of W ranks x A micro-batches is then bitwise one of
 * W x A micro-batches in one process.
 *
 * Data-parallel reduction overlaps the last backward: the reduction buffer is cut into
 * buckets of whole tensors (about bucket_bytes each), taken from its end, where the last
 * layers' gradients and the BN statistics live, towards conv1 at its start. A bucket is
 * handed to the backend's reduce_start as soon as backward has written every tensor at or
 * above its start, so the first ones travel while the early layers are still computed.
 */
#ifndef DS_MODEL_H
#define DS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define DS_BN_EPS 1e-5f
#define DS_BN_MOMENTUM 0.1f

typedef struct ds_model ds_model;

typedef struct {
    const char *arch;      /* "resnet18", "resnet34", "resnet50", "resnet101", "resnet20" */
    int num_classes;
    int max_batch;         /* largest micro-batch forward/backward will be given */
    int height, width;     /* largest input size (memory is planned for it; see
                              ds_model_set_input_size) */
    int training;          /* 0: inference only (no gradients, momentum or backward) */
    size_t bucket_bytes;   /* training: gradient reduction bucket size (0: DS_BUCKET_BYTES) */
} ds_model_config;

/* Buckets of about 25 MiB, as PyTorch's DistributedDataParallel: large enough that a
 * transfer runs at full speed, small enough that the first starts early in backward. */
#define DS_BUCKET_BYTES ((size_t)25 << 20)

/* Architecture names, ", "-separated, for --help and error messages. */
const char *ds_arch_names(void);
/* 1 when name is a known architecture. */
int ds_arch_known(const char *name);

/* Builds the layer list, plans and allocates memory. Parameters are zero until
 * ds_model_init or a checkpoint load fills them. Returns NULL with a message on an unknown
 * architecture, a size too small for the network, or an allocation failure. */
ds_model *ds_model_create(const ds_backend *be, const ds_model_config *cfg);
void ds_model_free(ds_model *m);

/* Runs forward / backward at input h x w from now on (1 <= h <= cfg height, likewise w; the
 * aspect may differ): every layer's shape is recomputed, nothing is reallocated, the
 * activations sit in the regions planned for the largest input. A model starts at its
 * cfg size. The convolutions run in the workspace planned at the largest size, which holds
 * any smaller one (backend.h's conv_workspace). The result at h x w is bitwise that of a
 * model created at h x w on the CPU. Returns -1 with a message for a size out of range or
 * too small for the network (the size is then unchanged). */
int ds_model_set_input_size(ds_model *m, int h, int w);
void ds_model_input_size(const ds_model *m, int *h, int *w);

const ds_backend *ds_model_backend(const ds_model *m);
const ds_model_config *ds_model_config_of(const ds_model *m);   /* arch points into m */

/* Parameters from the seed, as torchvision initialises a ResNet: convolutions Kaiming
 * normal (fan_out, ReLU gain), BN weight 1 / bias 0 / running mean 0 / var 1, linear
 * weight and bias uniform in +-1/sqrt(fan_in). Each tensor draws from its own Philox
 * stream (DS_RNG_INIT, id = tensor index), so the result does not depend on threads.
 * Also resets momentum, the optimizer's first-step state and num_batches_tracked. */
void ds_model_init(ds_model *m, uint64_t seed);

/* ---- sizes ---- */
size_t ds_model_param_count(const ds_model *m);       /* learnable scalars (resnet50: 25,557,032) */
/* Bytes of each planned allocation (0 for those an inference model does not have). */
typedef struct {
    size_t params, weight_copy, reduction, momentum, activations, workspace;
} ds_model_memory;
ds_model_memory ds_model_memory_plan(const ds_model *m);

/* ---- compute ---- */

/* The input batch [max_batch, height, width, 3] (the current input size) float NHWC, normalised, in backend memory:
 * write it with be->normalize_u8 or be->upload. */
float *ds_model_input(ds_model *m);

/* Forward pass on the first n (<= max_batch) images of the input. training = 1: BN uses
 * the batch statistics and adds this micro-batch's mean and unbiased variance to the
 * reduction buffer's statistics; training = 0: BN uses the running statistics (eval mode).
 * Returns the logits [n, num_classes] in backend memory (valid until the next forward). */
const float *ds_model_forward(ds_model *m, int n, int training);

/* Softmax cross-entropy of the last forward's logits against labels (host, [n]).
 * Returns the sum over the n samples of each sample's loss (not divided by anything). */
double ds_model_loss(ds_model *m, const int32_t *labels, int n, float smoothing);

/* Loss, then backward through the last forward (which must have been training = 1 with
 * the same n): parameter gradients of (loss summed over the micro-batch) x scale are ADDED
 * to the reduction buffer. scale is 1 / global batch (docs/DESIGN.md §3). Returns the summed loss
 * as ds_model_loss does. Training models only. */
double ds_model_backward(ds_model *m, const int32_t *labels, int n, float scale, float smoothing);

/* What the buckets of a reducing backward are summed into (backend.h's reduce_start). */
typedef enum {
    DS_REDUCE_TO_ALL = 1,   /* every rank gets the sum over the ranks: a step's last micro-batch */
    DS_REDUCE_TO_ROOT = 0,  /* added into rank 0's buffer in rank order, the others' left as they are */
} ds_reduce_round;

/* ds_model_backward, and meanwhile each bucket of the reduction buffer handed to the
 * backend's reduce_start as soon as backward completes it (see above; in a world of one the
 * backend does nothing with them). Every rank runs it at the same point. Follow it with
 * ds_model_reduce_wait before reading or writing the buffer. */
double ds_model_backward_reduce(ds_model *m, const int32_t *labels, int n, float scale, float smoothing,
                                ds_reduce_round round);
/* ---- the loss read late ----
 * Reading a loss waits for everything queued before it: on a GPU, a wait in each step
 * during which nothing new is queued. ds_model_defer_loss(m, micro) makes backward queue a
 * copy of its per-sample losses into host memory and return 0 at once (NaN still when it
 * refuses the labels); ds_model_end_step closes the step (at most `micro` backward calls)
 * and returns its mark (backend.h: a point of the compute stream);
 * ds_model_step_loss(m, mark) waits for that step alone and returns what its backward
 * calls would have returned, added in order (NaN when one refused). A training loop ends
 * step k, queues step k + 1, then reads step k's loss: the device is never left without
 * work. Two steps may be ended and not yet read; reading a third is an error (-1 / NaN). */
int ds_model_defer_loss(ds_model *m, int micro);
int ds_model_end_step(ds_model *m);
double ds_model_step_loss(ds_model *m, int mark);
/* Timing a step on the device: ds_model_begin_step before the step's first op (its first
 * micro-batch's input) opens it and records its start; ds_model_step_seconds(m, mark), for
 * an ended step whose loss is not read yet, waits for it and returns the seconds from that
 * start to its end. The points are the backend's clocks, two per step slot, not its marks:
 * a step of any number of micro-batches is timed, however many marks it and the step after
 * it make. NAN for a step not begun so, or on a backend without clocks. begin_step: 0, or
 * -1 when a step is open already or two ended steps are unread. */
int ds_model_begin_step(ds_model *m);
double ds_model_step_seconds(ds_model *m, int mark);

/* Waits until the buckets' sums over the ranks are complete. */
void ds_model_reduce_wait(ds_model *m);
/* When (ds_now()) the last ds_model_backward_reduce began its last layer, the one after
 * which only conv1's bucket is left to start (tests and --verbose set the first bucket's
 * start beside it). */
double ds_model_last_layer_time(const ds_model *m);
/* The event (ds_event_seq) taken at that moment: orders it against other threads' events. */
uint64_t ds_model_last_layer_event(const ds_model *m);

/* The bucket plan, in the order the buckets are started: returns how many there are, and
 * sets bucket i's range of the reduction buffer, [lo, hi) in floats (i out of range: left
 * alone). Together they cover the buffer once. */
int ds_model_bucket(const ds_model *m, int i, size_t *lo, size_t *hi);

/* ---- optimizer ---- */

/* The reduction buffer (backend memory) and its length in floats. */
float *ds_model_reduction(ds_model *m, size_t *count);
void ds_model_zero_reduction(ds_model *m);

typedef struct {
    float lr, momentum, weight_decay;
    int nesterov;
    int bn_bias_decay;     /* 1: weight decay on every parameter, as torch.optim.SGD; 0: none on
                              the BN weights and biases and fc.bias (every one-dimensional
                              parameter), as NVIDIA's ResNet-50 recipe */
} ds_sgd;

/* Whether PARAM tensor i gets sgd's weight decay (0 for other kinds). */
int ds_model_param_decays(const ds_model *m, int i, const ds_sgd *sgd);

/* torch.optim.SGD (dampening 0) on every learnable tensor (weight decay as
 * ds_model_param_decays says: a run of tensors alike per sgd_step call) with the gradients in the
 * reduction buffer, and the BN running-stat update from its statistics:
 *     running = (1 - 0.1) running + 0.1 * (sum of micro-batch stats) / micro_batches
 * (running_var from the unbiased variance, as PyTorch), num_batches_tracked += 1.
 * The first call after init (or after loading a checkpoint without momentum buffers) uses
 * SGD's first-step rule buf = g. Does not zero the reduction buffer. */
void ds_model_step(ds_model *m, const ds_sgd *sgd, int micro_batches);

/* A whole training step of one micro-batch a rank (accumulation 1): what
 *     ds_model_zero_reduction; ds_model_forward(m, n, 1);
 *     loss = ds_model_backward_reduce(m, labels, n, scale, smoothing, DS_REDUCE_TO_ALL);
 *     ds_model_reduce_wait(m); ds_model_step(m, sgd, micro_batches);
 * do, with the same bits, and returns that loss. Where the backend records graphs
 * (backend.h's graph_begin) the ops between the step's writes (labels, learning rate) and
 * its loss are recorded on the second step of each shape (batch n, input size and the
 * values the ops take by value: scale, smoothing, sgd but its lr, micro_batches) and
 * replayed from then on: one launch a step. The first step of a shape, a step before the
 * momentum has started, a step with a label out of range, and every step of a backend that
 * records nothing (the CPU, several CUDA ranks, DS_CUDA_GRAPHS=0) run as the calls. */
double ds_model_train_step(ds_model *m, const int32_t *labels, int n, float scale, float smoothing,
                           const ds_sgd *sgd, int micro_batches);

/* Whether momentum buffers hold state (at least one step was taken since init). The
 * checkpoint saves momentum only then, and loading momentum sets it. */
int ds_model_momentum_started(const ds_model *m);
void ds_model_set_momentum_started(ds_model *m, int started);

/* ---- tensors by state_dict name (checkpoints, tests) ---- */

typedef enum { DS_TENSOR_PARAM, DS_TENSOR_BUFFER, DS_TENSOR_COUNTER } ds_tensor_kind;

typedef struct {
    char name[64];         /* "layer1.0.downsample.1.running_var" */
    ds_tensor_kind kind;   /* PARAM: learnable (has gradient and momentum); BUFFER: BN running
                              mean/var; COUNTER: num_batches_tracked (int64, 0-dim) */
    int ndim;              /* 0 for COUNTER */
    int64_t shape[4];      /* PyTorch's shape */
    size_t count;          /* elements (1 for COUNTER) */
} ds_tensor_info;

int ds_model_tensor_count(const ds_model *m);
const ds_tensor_info *ds_model_tensor(const ds_model *m, int i);
/* Index of the tensor with this name, or -1. */
int ds_model_tensor_find(const ds_model *m, const char *name);
/* Copy a tensor to / from host memory in PyTorch's layout: float[count] for PARAM and
 * BUFFER, int64_t[1] for COUNTER. */
void ds_model_tensor_get(ds_model *m, int i, void *host);
void ds_model_tensor_set(ds_model *m, int i, const void *host);
/* Gradient (from the reduction buffer) and momentum buffer of a PARAM tensor, PyTorch
 * layout, float[count]. Return -1 with a message for other kinds or inference models. */
int ds_model_grad_get(ds_model *m, int i, float *host);
int ds_model_momentum_get(ds_model *m, int i, float *host);
int ds_model_momentum_set(ds_model *m, int i, const float *host);

/* ---- the ReLU decisions of the last forward (tests) ---- */

/* The layers that end in a ReLU (batch norm fused with it), in forward order, which is the
 * order of PyTorch's ReLU calls: how many, and a copy of layer i's output [n, h, w, c]
 * (host; n = the last forward's batch; host NULL: size only). Returns the element count, 0
 * for an index out of range. A zero is where the ReLU cut: what backward masks with. */
int ds_model_relu_count(const ds_model *m);
size_t ds_model_relu_output(ds_model *m, int i, float *host);

#endif

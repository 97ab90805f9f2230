/* ops_cases.h: the op cases of every backend test, written once (ggml's test-backend-ops is
 * the model). Four programs walk them:
 *   - test_ops: the CPU backends against plain double loops (and finite differences on the
 *     smallest), bf16 against exact sums of rounded products, and the bitwise promises
 *     (threads, kernel sets: --bits);
 *   - test_cuda_ops: the CUDA backend against the CPU backend, in fp32, tf32 and bf16
 *     arithmetic and bf16 storage (on the emulated device in every make check, on a GPU
 *     when one is there);
 *   - test_cuda_bodies: the CUDA kernels' bodies replayed on the CPU, thread by thread over
 *     their grids, against the CPU backend, with no GPU (every make test); the convolutions
 *     are cuDNN's, so it takes no convolution rows;
 *   - bench/ops_bench: the network rows, timed.
 * A row's `use` names the walks that take it, so a shape is written once however many walks
 * take it. A few fields are read by test_cuda_bodies only (`bodies`: its tests that take the
 * row; `data`, `dres`, `scale`, `n`, ...): each is 0 in the ordinary case, so the other
 * walks' rows need not name them. A new op gets its rows here and a member row in
 * ops_members below; test_ops's every_backend_op_has_a_case fails while a member of
 * ds_backend has no row there, or an op's family has no case, and test_cuda_ops's
 * cuda_backend_op_has_a_case while the CUDA table lacks a member its row does not excuse, or
 * the family has no row for the GPU walks; test_cuda_bodies fails while a family whose
 * kernels have bodies has no OPS_BODIES row.
 * The whole path of a new op: docs/DESIGN.md §4.9. */
#ifndef DS_OPS_CASES_H
#define DS_OPS_CASES_H

#include "backend.h"

#include <stddef.h>

enum {
    /* test_ops */
    OPS_FD = 1 << 0,           /* against finite differences of the double loops too (small) */
    OPS_REF = 1 << 1,          /* fp32 against the double loops */
    OPS_BF16 = 1 << 2,         /* bf16 arithmetic on float32 storage, against exact sums */
    OPS_BF16_IO = 1 << 3,      /* bf16 activations and weights */
    OPS_ACC = 1 << 4,          /* backward-data accumulating into din, every CPU backend and storage */
    OPS_BITS = 1 << 5,         /* the results compared bitwise across threads and kernel sets */
    /* test_cuda_ops */
    OPS_GPU = 1 << 6,          /* every arithmetic (fp32, tf32, bf16) against the CPU backend */
    OPS_GPU_BF16_IO = 1 << 7,  /* bf16 storage against the CPU's bf16 backend, every arithmetic */
    /* bench/ops_bench */
    OPS_RESNET20 = 1 << 8,     /* a layer of resnet20 at 32x32, batch 128 */
    OPS_RESNET50 = 1 << 9,     /* a layer of resnet50 at 224x224, batch 16 */
    /* flags of a row, for the walks that take it */
    OPS_NO_DX = 1 << 10,       /* the input needs no gradient (conv1): backward-data neither planned nor run */
    OPS_F32_IN = 1 << 11,      /* under bf16 storage the input stays float32 (the stem) */
    /* test_ops, again */
    OPS_FUSED = 1 << 12,       /* conv_fwd_bn against conv_fwd then bn_fwd_infer, bitwise, every CPU backend */
    /* test_cuda_bodies */
    OPS_BODIES = 1 << 13,      /* the CUDA kernels' bodies replayed on the CPU against the CPU backend */
    /* bench/ops_bench, again */
    OPS_RESNET18 = 1 << 14,    /* a layer of resnet18 at 224x224, batch 16 */
};

/* A convolution: run at n x h x w x c, k filters r x s, stride, pad. The device walk plans it
 * for plan_n x plan_h x plan_w (0: the size it runs at) and runs it at its own size, as the
 * model plans for its largest batch and input and runs shorter batches and smaller crops. */
typedef struct {
    int n, h, w, c, k, r, s, stride, pad;
    unsigned use;
    int plan_n, plan_h, plan_w;
    const char *name;  /* the nets' rows: the layer */
    int count;         /* the nets' rows: how many times the network has it */
} ops_conv;

#define OPS_CONV(n_, h_, w_, c_, k_, r_, s_, stride_, pad_) \
    .n = n_, .h = h_, .w = w_, .c = c_, .k = k_, .r = r_, .s = s_, .stride = stride_, .pad = pad_
#define OPS_PLAN(n_, h_, w_) .plan_n = n_, .plan_h = h_, .plan_w = w_
#define OPS_LAYER(name_, n, h, w, c, k, r, stride, pad, count_, net) \
    {OPS_CONV(n, h, w, c, k, r, r, stride, pad), .use = net, .name = name_, .count = count_}

static const ops_conv ops_convs[] = {
    /* the smallest: every kernel/stride/pad kind ResNets use, and a 3x1 window */
    {OPS_CONV(2, 5, 5, 3, 4, 3, 3, 1, 1), .use = OPS_FD | OPS_REF | OPS_GPU},
    {OPS_CONV(2, 6, 7, 3, 4, 3, 3, 2, 1), .use = OPS_FD | OPS_REF | OPS_GPU},
    {OPS_CONV(2, 5, 5, 3, 4, 1, 1, 2, 0), .use = OPS_FD | OPS_REF | OPS_GPU},
    {OPS_CONV(2, 4, 4, 5, 3, 1, 1, 1, 0), .use = OPS_FD | OPS_REF | OPS_GPU},
    {OPS_CONV(1, 9, 8, 2, 3, 7, 7, 2, 3), .use = OPS_FD | OPS_REF | OPS_GPU},
    {OPS_CONV(2, 6, 5, 2, 3, 3, 1, 1, 0), .use = OPS_FD | OPS_REF | OPS_GPU},
    /* odd sizes, several batch sizes, several chunks; the stem */
    {OPS_CONV(3, 15, 13, 3, 8, 7, 7, 2, 3), .use = OPS_REF | OPS_BITS | OPS_GPU | OPS_FUSED},
    {OPS_CONV(5, 11, 11, 16, 16, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_GPU | OPS_FUSED},
    {OPS_CONV(8, 12, 12, 64, 32, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_GPU},
    {OPS_CONV(12, 16, 16, 64, 16, 3, 3, 1, 1), .use = OPS_REF | OPS_BF16 | OPS_BITS},  /* more chunks than weight groups */
    {OPS_CONV(4, 9, 9, 32, 64, 3, 3, 2, 1), .use = OPS_REF | OPS_BF16 | OPS_BF16_IO | OPS_BITS | OPS_GPU},
    {OPS_CONV(4, 16, 16, 256, 16, 1, 1, 1, 0), .use = OPS_REF | OPS_BF16 | OPS_BF16_IO},
    {OPS_CONV(3, 9, 9, 24, 48, 1, 1, 2, 0), .use = OPS_REF | OPS_BF16 | OPS_BF16_IO | OPS_ACC | OPS_BITS | OPS_GPU | OPS_FUSED},
    {OPS_CONV(1, 7, 7, 8, 8, 5, 5, 1, 2), .use = OPS_REF | OPS_BF16 | OPS_BITS | OPS_GPU},
    {OPS_CONV(2, 8, 8, 4, 4, 3, 3, 1, 0), .use = OPS_REF | OPS_GPU},
    {OPS_CONV(6, 12, 12, 16, 32, 3, 3, 2, 1), .use = OPS_BITS | OPS_GPU},
    {OPS_CONV(6, 12, 12, 256, 24, 1, 1, 1, 0), .use = OPS_BITS},
    /* wide windows and many channels: im2col, blocked reductions, transposed weight tiles */
    {OPS_CONV(2, 6, 6, 160, 20, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_GPU},
    {OPS_CONV(2, 7, 7, 144, 24, 3, 3, 2, 1), .use = OPS_REF | OPS_BITS | OPS_GPU},
    {OPS_CONV(2, 5, 5, 300, 260, 1, 1, 1, 0), .use = OPS_REF | OPS_BF16 | OPS_BF16_IO | OPS_BITS | OPS_GPU | OPS_FUSED},
    {OPS_CONV(2, 5, 5, 40, 1200, 1, 1, 2, 0), .use = OPS_REF | OPS_BITS | OPS_GPU},
    {OPS_CONV(1, 14, 14, 128, 24, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_FUSED},  /* wide window, one row at a time */
    {OPS_CONV(2, 24, 24, 288, 8, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_FUSED},   /* im2col: more chunks than groups */
    {OPS_CONV(2, 7, 7, 600, 40, 3, 3, 1, 1), .use = OPS_BF16 | OPS_BF16_IO | OPS_BITS},
    /* Winograd F(2x2, 3x3) (3x3 stride 1 pad 1, 64+ channels, 8x8+ outputs): odd sizes (edge
     * tiles past the output), channels not a multiple of a vector, more tiles than a block and
     * blocks than weight groups, a reduction longer than 512 (blocked), the smallest output */
    {OPS_CONV(2, 15, 14, 64, 64, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_GPU | OPS_FUSED},
    {OPS_CONV(1, 17, 19, 70, 66, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS | OPS_ACC | OPS_FUSED},
    {OPS_CONV(24, 14, 14, 64, 72, 3, 3, 1, 1), .use = OPS_BITS},
    /* two blocks, so backward-weight's two groups summed (in order) before G^T dU G, against
     * the reference; 72 output channels, 64 and 8 in that pass */
    {OPS_CONV(4, 14, 14, 64, 72, 3, 3, 1, 1), .use = OPS_REF},
    {OPS_CONV(1, 14, 15, 520, 64, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS},
    {OPS_CONV(3, 8, 8, 64, 64, 3, 3, 1, 1), .use = OPS_REF | OPS_BITS},
    /* bf16: implicit (rows of 14 or more), gathered (1x1, small outputs), the stem's odd
     * channel count padded, stride-1 backward-data as a forward, strided scatters */
    {OPS_CONV(2, 16, 16, 16, 32, 3, 3, 1, 1), .use = OPS_BF16 | OPS_BF16_IO | OPS_ACC | OPS_GPU | OPS_FUSED},
    {OPS_CONV(2, 30, 30, 3, 16, 7, 7, 2, 3), .use = OPS_BF16 | OPS_BF16_IO | OPS_F32_IN | OPS_FUSED},
    {OPS_CONV(2, 15, 15, 5, 6, 3, 3, 1, 1), .use = OPS_BF16 | OPS_BF16_IO | OPS_GPU},
    {OPS_CONV(3, 28, 28, 8, 16, 3, 3, 2, 1), .use = OPS_BF16 | OPS_BF16_IO | OPS_FUSED},
    {OPS_CONV(3, 9, 7, 24, 100, 1, 1, 1, 0), .use = OPS_BF16 | OPS_BF16_IO | OPS_GPU | OPS_FUSED},  /* 1x1 expansion: the input transposed */
    {OPS_CONV(2, 6, 5, 3, 7, 3, 1, 1, 0), .use = OPS_BF16 | OPS_BF16_IO},
    {OPS_CONV(2, 20, 20, 64, 300, 1, 1, 1, 0), .use = OPS_BF16_IO | OPS_FUSED},  /* bf16 output in column blocks */
    {OPS_CONV(1, 7, 300, 8, 8, 3, 3, 1, 1), .use = OPS_BF16_IO | OPS_FUSED},     /* rows wider than the tile */
    /* bf16 backward-weight of a gradient split in tiles (over 65,536 elements), each run again
     * over several packs (test_ops's OPS_PACK): images of windows (odd rows), and chunks of 1x1
     * pixels (strided, the input transposed, a short odd last chunk) */
    {OPS_CONV(7, 9, 11, 64, 128, 3, 3, 1, 1), .use = OPS_BF16 | OPS_BITS},
    {OPS_CONV(1, 93, 97, 200, 330, 1, 1, 2, 0), .use = OPS_BF16 | OPS_BITS},
    /* backward-data accumulating: pointwise; stride 1 as a flipped forward (implicit, im2col
     * for a long reduction, bf16's gathered rows under 14 wide); strided 3x3 scattered */
    {OPS_CONV(2, 6, 6, 32, 24, 1, 1, 1, 0), .use = OPS_ACC | OPS_GPU},
    {OPS_CONV(2, 6, 6, 16, 300, 3, 3, 1, 1), .use = OPS_ACC | OPS_GPU},
    {OPS_CONV(2, 9, 8, 16, 24, 3, 3, 1, 1), .use = OPS_ACC | OPS_GPU},
    {OPS_CONV(2, 9, 9, 16, 32, 3, 3, 2, 1), .use = OPS_ACC | OPS_GPU},
    /* the device: short batches and smaller inputs than planned, each size twice (its slot
     * set up, then reused), conv1 without backward-data */
    {OPS_CONV(2, 9, 7, 16, 24, 3, 3, 1, 1), .use = OPS_GPU | OPS_GPU_BF16_IO},
    {OPS_CONV(3, 8, 8, 32, 16, 1, 1, 2, 0), .use = OPS_GPU},
    {OPS_CONV(3, 8, 8, 32, 16, 1, 1, 2, 0), .use = OPS_GPU_BF16_IO, OPS_PLAN(4, 8, 8)},
    {OPS_CONV(2, 15, 15, 3, 8, 7, 7, 2, 3), .use = OPS_GPU},
    {OPS_CONV(1, 6, 5, 64, 64, 3, 3, 2, 1), .use = OPS_GPU},
    {OPS_CONV(40, 8, 8, 16, 16, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(64, 8, 8)},
    {OPS_CONV(1, 8, 8, 16, 16, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(64, 8, 8)},
    {OPS_CONV(40, 8, 8, 16, 16, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(64, 8, 8)},
    {OPS_CONV(64, 8, 8, 16, 16, 3, 3, 1, 1), .use = OPS_GPU},
    {OPS_CONV(5, 15, 15, 3, 8, 7, 7, 2, 3), .use = OPS_GPU, OPS_PLAN(7, 15, 15)},
    {OPS_CONV(5, 11, 9, 16, 24, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(7, 15, 15)},
    {OPS_CONV(5, 11, 9, 16, 24, 3, 3, 2, 1), .use = OPS_GPU, OPS_PLAN(7, 15, 15)},
    {OPS_CONV(7, 15, 15, 16, 24, 3, 3, 1, 1), .use = OPS_GPU},
    /* resnet20's convolutions planned for crop 16 and run at 12 (a crop ramp's start) */
    {OPS_CONV(16, 12, 12, 16, 16, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(16, 16, 16)},
    {OPS_CONV(16, 6, 6, 32, 64, 3, 3, 2, 1), .use = OPS_GPU, OPS_PLAN(16, 8, 8)},
    {OPS_CONV(16, 3, 3, 64, 64, 3, 3, 1, 1), .use = OPS_GPU, OPS_PLAN(16, 4, 4)},
    /* conv1 of an ImageNet ResNet at a small size: 3 channels, 7x7/2, no backward-data */
    {OPS_CONV(4, 32, 32, 3, 64, 7, 7, 2, 3), .use = OPS_GPU | OPS_GPU_BF16_IO | OPS_NO_DX | OPS_F32_IN, OPS_PLAN(8, 40, 40)},
    {OPS_CONV(8, 40, 40, 3, 64, 7, 7, 2, 3), .use = OPS_GPU | OPS_NO_DX | OPS_F32_IN},
    /* the networks' layers (ops_bench) */
    OPS_LAYER("stem 3x3 3->16", 128, 32, 32, 3, 16, 3, 1, 1, 1, OPS_RESNET20),
    OPS_LAYER("s1 3x3 16->16", 128, 32, 32, 16, 16, 3, 1, 1, 6, OPS_RESNET20),
    OPS_LAYER("s2 3x3/2 16->32", 128, 32, 32, 16, 32, 3, 2, 1, 1, OPS_RESNET20),
    OPS_LAYER("s2 proj 1x1/2 16->32", 128, 32, 32, 16, 32, 1, 2, 0, 1, OPS_RESNET20),
    OPS_LAYER("s2 3x3 32->32", 128, 16, 16, 32, 32, 3, 1, 1, 5, OPS_RESNET20),
    OPS_LAYER("s3 3x3/2 32->64", 128, 16, 16, 32, 64, 3, 2, 1, 1, OPS_RESNET20),
    OPS_LAYER("s3 proj 1x1/2 32->64", 128, 16, 16, 32, 64, 1, 2, 0, 1, OPS_RESNET20),
    OPS_LAYER("s3 3x3 64->64", 128, 8, 8, 64, 64, 3, 1, 1, 5, OPS_RESNET20),
    OPS_LAYER("stem 7x7/2 3->64", 16, 224, 224, 3, 64, 7, 2, 3, 1, OPS_RESNET50 | OPS_RESNET18),
    OPS_LAYER("l1 1x1 64->64", 16, 56, 56, 64, 64, 1, 1, 0, 1, OPS_RESNET50),
    OPS_LAYER("l1 3x3 64->64", 16, 56, 56, 64, 64, 3, 1, 1, 3, OPS_RESNET50),
    OPS_LAYER("l1 1x1 64->256", 16, 56, 56, 64, 256, 1, 1, 0, 4, OPS_RESNET50),
    OPS_LAYER("l1 1x1 256->64", 16, 56, 56, 256, 64, 1, 1, 0, 2, OPS_RESNET50),
    OPS_LAYER("l2 1x1 256->128", 16, 56, 56, 256, 128, 1, 1, 0, 1, OPS_RESNET50),
    OPS_LAYER("l2 3x3/2 128->128", 16, 56, 56, 128, 128, 3, 2, 1, 1, OPS_RESNET50),
    OPS_LAYER("l2 proj 1x1/2 256->512", 16, 56, 56, 256, 512, 1, 2, 0, 1, OPS_RESNET50),
    OPS_LAYER("l2 1x1 128->512", 16, 28, 28, 128, 512, 1, 1, 0, 4, OPS_RESNET50),
    OPS_LAYER("l2 1x1 512->128", 16, 28, 28, 512, 128, 1, 1, 0, 3, OPS_RESNET50),
    OPS_LAYER("l2 3x3 128->128", 16, 28, 28, 128, 128, 3, 1, 1, 3, OPS_RESNET50),
    OPS_LAYER("l3 1x1 512->256", 16, 28, 28, 512, 256, 1, 1, 0, 1, OPS_RESNET50),
    OPS_LAYER("l3 3x3/2 256->256", 16, 28, 28, 256, 256, 3, 2, 1, 1, OPS_RESNET50),
    OPS_LAYER("l3 proj 1x1/2 512->1024", 16, 28, 28, 512, 1024, 1, 2, 0, 1, OPS_RESNET50),
    OPS_LAYER("l3 1x1 256->1024", 16, 14, 14, 256, 1024, 1, 1, 0, 6, OPS_RESNET50),
    OPS_LAYER("l3 1x1 1024->256", 16, 14, 14, 1024, 256, 1, 1, 0, 5, OPS_RESNET50),
    OPS_LAYER("l3 3x3 256->256", 16, 14, 14, 256, 256, 3, 1, 1, 5, OPS_RESNET50),
    OPS_LAYER("l4 1x1 1024->512", 16, 14, 14, 1024, 512, 1, 1, 0, 1, OPS_RESNET50),
    OPS_LAYER("l4 3x3/2 512->512", 16, 14, 14, 512, 512, 3, 2, 1, 1, OPS_RESNET50),
    OPS_LAYER("l4 proj 1x1/2 1024->2048", 16, 14, 14, 1024, 2048, 1, 2, 0, 1, OPS_RESNET50),
    OPS_LAYER("l4 1x1 512->2048", 16, 7, 7, 512, 2048, 1, 1, 0, 3, OPS_RESNET50),
    OPS_LAYER("l4 1x1 2048->512", 16, 7, 7, 2048, 512, 1, 1, 0, 2, OPS_RESNET50),
    OPS_LAYER("l4 3x3 512->512", 16, 7, 7, 512, 512, 3, 1, 1, 2, OPS_RESNET50),
    OPS_LAYER("l1 3x3 64->64", 16, 56, 56, 64, 64, 3, 1, 1, 4, OPS_RESNET18),
    OPS_LAYER("l2 3x3/2 64->128", 16, 56, 56, 64, 128, 3, 2, 1, 1, OPS_RESNET18),
    OPS_LAYER("l2 proj 1x1/2 64->128", 16, 56, 56, 64, 128, 1, 2, 0, 1, OPS_RESNET18),
    OPS_LAYER("l2 3x3 128->128", 16, 28, 28, 128, 128, 3, 1, 1, 3, OPS_RESNET18),
    OPS_LAYER("l3 3x3/2 128->256", 16, 28, 28, 128, 256, 3, 2, 1, 1, OPS_RESNET18),
    OPS_LAYER("l3 proj 1x1/2 128->256", 16, 28, 28, 128, 256, 1, 2, 0, 1, OPS_RESNET18),
    OPS_LAYER("l3 3x3 256->256", 16, 14, 14, 256, 256, 3, 1, 1, 3, OPS_RESNET18),
    OPS_LAYER("l4 3x3/2 256->512", 16, 14, 14, 256, 512, 3, 2, 1, 1, OPS_RESNET18),
    OPS_LAYER("l4 proj 1x1/2 256->512", 16, 14, 14, 256, 512, 1, 2, 0, 1, OPS_RESNET18),
    OPS_LAYER("l4 3x3 512->512", 16, 7, 7, 512, 512, 3, 1, 1, 3, OPS_RESNET18),
};

/* The row's descriptor at the size it runs at (planned: at its planned size), float32 storage. */
static inline ds_conv_desc ops_conv_desc(const ops_conv *t, int planned)
{
    int n = planned && t->plan_n ? t->plan_n : t->n, h = planned && t->plan_n ? t->plan_h : t->h,
        w = planned && t->plan_n ? t->plan_w : t->w;
    ds_conv_desc d = {.n = n, .h = h, .w = w, .c = t->c, .k = t->k, .r = t->r, .s = t->s, .stride = t->stride,
                      .pad = t->pad, .no_dx = !!(t->use & OPS_NO_DX), .in_t = DS_F32, .out_t = DS_F32,
                      .w_t = DS_F32};
    d.p = (h + 2 * t->pad - t->r) / t->stride + 1;
    d.q = (w + 2 * t->pad - t->s) / t->stride + 1;
    return d;
}

/* Batch norm over m rows of c channels, with a residual added and a ReLU after or not; the
 * input offset + spread * N(0, 1) (a large offset breaks a naive E[x^2] - E[x]^2). */
typedef struct {
    int m, c, residual, relu;
    double offset, spread;
    unsigned use;
    /* test_cuda_bodies only */
    unsigned bodies;  /* its tests that take the row (OPS_BN_TRAIN, ...) */
    int data;         /* their data (OPS_BN_NORMAL: the offset and spread above) */
    int dres;         /* bn_bwd's dresidual there (OPS_DRES_NONE; `residual` is the forward's) */
} ops_bn;

#define OPS_BN(m_, c_, residual_, relu_, offset_, spread_) \
    .m = m_, .c = c_, .residual = residual_, .relu = relu_, .offset = offset_, .spread = spread_

/* test_cuda_bodies's tests of a batch-norm row (its `bodies`) */
enum {
    OPS_BN_TRAIN = 1 << 0,       /* bn_fwd_train: statistics, running sums, out */
    OPS_BN_BWD = 1 << 1,         /* bn_bwd: dgamma, dbeta, din, dresidual */
    OPS_BN_INFER = 1 << 2,       /* bn_fwd_infer */
    OPS_BN_VEC = 1 << 3,         /* the vector bodies give the scalar ones' bits: partial sums, apply, dx */
    OPS_BN_MASK_APPLY = 1 << 4,  /* the ReLU bitmask the apply writes, against its definition */
    OPS_BN_MASK_BWD = 1 << 5,    /* the backward reading the bitmask gives the bits of the one reading out */
};

/* A batch-norm row's data in test_cuda_bodies (its `data`) */
enum {
    OPS_BN_NORMAL,     /* offset + spread * N(0, 1) forward, N(0.3, 1.5) backward: the statistics
                          and gradients within a bound computed from the data */
    OPS_BN_EXACT,      /* small integers (and quarters backward: dy integers, x and the mean
                          quarters): every sum exact in any order, the whole op bitwise */
    OPS_BN_FULL_RUNS,  /* forward only: -1, 0, 1 and every 16th or 17th row 2560: exact in the
                          CPU's float runs and in the kernels', but 3 large rows make a 49-row
                          chunk's sum of squares pass 2^24, so a chunk summed in float instead
                          of in double runs would round */
};

/* bn_bwd's dresidual in test_cuda_bodies (a row's `dres`) */
enum {
    OPS_DRES_NONE,  /* NULL: no residual */
    OPS_DRES_OWN,   /* a buffer of its own */
    OPS_DRES_DOUT,  /* dout itself (no copy: dout must end masked) */
};

static const ops_bn ops_bns[] = {
    {OPS_BN(24, 5, 0, 0, 0, 1), .use = OPS_REF | OPS_GPU},
    {OPS_BN(24, 5, 1, 1, 0, 1), .use = OPS_REF | OPS_GPU},
    {OPS_BN(30, 4, 0, 1, 0, 1), .use = OPS_REF | OPS_GPU},
    {OPS_BN(17, 3, 1, 0, 0, 1), .use = OPS_REF | OPS_GPU},
    {OPS_BN(4096, 70, 1, 1, 0, 1), .use = OPS_REF | OPS_GPU},
    {OPS_BN(6, 300, 1, 1, 0, 1), .use = OPS_REF | OPS_GPU},      /* more channels than one reduction pass takes */
    {OPS_BN(2000, 8, 0, 0, 10, 0.1), .use = OPS_REF | OPS_GPU},  /* mean/std up to 800 */
    {OPS_BN(300, 48, 1, 1, 3.5, 0.9), .use = OPS_GPU | OPS_GPU_BF16_IO},
    {OPS_BN(1000, 70, 0, 0, 3.5, 0.9), .use = OPS_GPU},
    {OPS_BN(97, 8, 0, 1, 3.5, 0.9), .use = OPS_GPU | OPS_GPU_BF16_IO},
    /* bf16 channel counts the vector width (8) does not divide: the scalar kernels on the
     * device, 12 half a vector past one, 70 odd (vec_ok must refuse both) */
    {OPS_BN(300, 12, 1, 1, 3.5, 0.9), .use = OPS_GPU_BF16_IO},
    {OPS_BN(200, 70, 1, 0, 3.5, 0.9), .use = OPS_GPU_BF16_IO},
    /* bf16 storage in test_ops: m = 2 images of 12 rows (pooled 3x3/2 there too) */
    {OPS_BN(2 * 12 * 10, 70, 1, 1, 0, 2), .use = OPS_BF16_IO},
    {OPS_BN(2 * 12 * 3, 300, 1, 1, 0, 2), .use = OPS_BF16_IO},
    /* the bitwise runs: 6 images of 12 x 12 */
    {OPS_BN(6 * 12 * 12, 64, 1, 1, 0, 2), .use = OPS_BITS},
    /* the kernels' bodies, in float32 and bf16 storage. ResNet-like: layer1 at batch 8 (784
     * chunks), layer3 at batch 4, layer4 at batch 8 (the CPU's 16 chunks), the stem at batch
     * 2 (2048 chunks, the most) */
    {.m = 8 * 56 * 56, .c = 64, .relu = 1, .offset = 0.5, .spread = 2, .dres = OPS_DRES_OWN, .use = OPS_BODIES,
     .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 4 * 14 * 14, .c = 256, .residual = 1, .relu = 1, .offset = 0.5, .spread = 2, .use = OPS_BODIES,
     .bodies = OPS_BN_TRAIN},
    {.m = 4 * 14 * 14, .c = 256, .dres = OPS_DRES_DOUT, .use = OPS_BODIES, .bodies = OPS_BN_BWD},
    {.m = 8 * 7 * 7, .c = 2048, .residual = 1, .relu = 1, .offset = 0.5, .spread = 2, .dres = OPS_DRES_OWN,
     .use = OPS_BODIES, .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 2 * 224 * 224, .c = 64, .relu = 1, .offset = 0.1, .spread = 1, .use = OPS_BODIES,
     .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    /* edges: c not a multiple of 32, m not a multiple of the chunks, m below the chunk count
     * (empty chunks), one row; |mean| >> std */
    {.m = 300, .c = 100, .residual = 1, .spread = 1, .use = OPS_BODIES, .bodies = OPS_BN_TRAIN},
    {.m = 300, .c = 100, .relu = 1, .dres = OPS_DRES_OWN, .use = OPS_BODIES, .bodies = OPS_BN_BWD},
    {.m = 7, .c = 33, .residual = 1, .relu = 1, .spread = 1, .dres = OPS_DRES_OWN, .use = OPS_BODIES,
     .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 1, .c = 3, .spread = 1, .use = OPS_BODIES, .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 1000, .c = 5, .offset = 300, .spread = 0.1, .use = OPS_BODIES, .bodies = OPS_BN_TRAIN},
    /* exact sums: the whole op bitwise */
    {.m = 2 * 28 * 28, .c = 96, .residual = 1, .relu = 1, .data = OPS_BN_EXACT, .dres = OPS_DRES_OWN,
     .use = OPS_BODIES, .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 333, .c = 37, .data = OPS_BN_EXACT, .use = OPS_BODIES, .bodies = OPS_BN_TRAIN | OPS_BN_BWD},
    {.m = 2 * 224 * 224, .c = 8, .data = OPS_BN_FULL_RUNS, .use = OPS_BODIES, .bodies = OPS_BN_TRAIN},
    {.m = 4 * 28 * 28, .c = 128, .residual = 1, .relu = 1, .use = OPS_BODIES, .bodies = OPS_BN_INFER},
    {.m = 5, .c = 33, .use = OPS_BODIES, .bodies = OPS_BN_INFER},
    /* the vector bodies: shapes of ResNet-50 (many chunks, one row per chunk) and short ones;
     * the ReLU bitmask: a layer1-like shape, short ones, one row of one byte */
    {.m = 8 * 28 * 28, .c = 64, .use = OPS_BODIES, .bodies = OPS_BN_VEC},
    {.m = 2 * 7 * 7, .c = 2048, .use = OPS_BODIES, .bodies = OPS_BN_VEC},
    {.m = 37, .c = 16, .use = OPS_BODIES, .bodies = OPS_BN_VEC | OPS_BN_MASK_APPLY | OPS_BN_MASK_BWD},
    {.m = 1, .c = 8, .use = OPS_BODIES, .bodies = OPS_BN_VEC | OPS_BN_MASK_APPLY | OPS_BN_MASK_BWD},
    {.m = 4 * 28 * 28, .c = 64, .use = OPS_BODIES, .bodies = OPS_BN_MASK_APPLY | OPS_BN_MASK_BWD},
    {.m = 300, .c = 24, .use = OPS_BODIES, .bodies = OPS_BN_MASK_BWD},
};

/* Max pooling k x k / stride, pad, over n x h x w x c; the average pool over each image. */
typedef struct {
    int n, h, w, c, k, stride, pad;
    unsigned use;
    /* test_cuda_bodies only */
    unsigned bodies;  /* its tests that take the row (OPS_POOL_MAX, ...) */
    int data;         /* their data (OPS_POOL_NORMAL: N(0, 1)) */
} ops_pool;

#define OPS_POOL(n_, h_, w_, c_, k_, stride_, pad_) \
    .n = n_, .h = h_, .w = w_, .c = c_, .k = k_, .stride = stride_, .pad = pad_

/* test_cuda_bodies's tests of a pool row (its `bodies`) */
enum {
    OPS_POOL_MAX = 1 << 0,      /* maxpool forward (out, argmax) and backward */
    OPS_POOL_MAX_VEC = 1 << 1,  /* maxpool's vector bodies give the scalar ones' bits */
    OPS_POOL_AVG = 1 << 2,      /* the average pool over each image's h x w (the window unused) */
};

/* A pool row's data in test_cuda_bodies (its `data`) */
enum {
    OPS_POOL_NORMAL,   /* N(0, 1) */
    OPS_POOL_TIES,     /* integers in [-2, 2]: many ties, the first maximum must win */
    OPS_POOL_NAN_INF,  /* N(0, 1) with NaN, -NaN and -inf among them (a NaN or a -inf first in a
                          window: the argmax is the backward's first maximum, not the forward's
                          maximum) */
};

static const ops_pool ops_pools[] = {
    {OPS_POOL(2, 9, 9, 3, 3, 2, 1), .use = OPS_REF | OPS_GPU},
    {OPS_POOL(1, 8, 7, 4, 2, 2, 0), .use = OPS_REF | OPS_GPU},
    {OPS_POOL(2, 5, 5, 2, 3, 1, 1), .use = OPS_REF | OPS_GPU},
    {OPS_POOL(3, 10, 10, 7, 3, 2, 1), .use = OPS_REF | OPS_GPU},
    {OPS_POOL(3, 13, 11, 8, 3, 2, 1), .use = OPS_GPU | OPS_GPU_BF16_IO},
    {OPS_POOL(4, 7, 7, 40, 3, 2, 1), .use = OPS_GPU | OPS_GPU_BF16_IO},
    {OPS_POOL(3, 9, 9, 12, 3, 2, 1), .use = OPS_GPU_BF16_IO},   /* bf16 past the vector width: the scalar kernels */
    {OPS_POOL(2, 7, 7, 70, 3, 2, 1), .use = OPS_GPU_BF16_IO},
    /* bf16 channels not a multiple of 8: the scalar kernels (float32's vector one at 12);
     * the kernels' bodies on the first with NaN and -inf */
    {OPS_POOL(2, 9, 9, 12, 3, 2, 1), .use = OPS_GPU | OPS_GPU_BF16_IO | OPS_BODIES, .bodies = OPS_POOL_MAX,
     .data = OPS_POOL_NAN_INF},
    {OPS_POOL(3, 7, 6, 3, 3, 2, 1), .use = OPS_GPU | OPS_GPU_BF16_IO},
    {OPS_POOL(6, 12, 12, 64, 3, 2, 1), .use = OPS_BITS},
    /* the kernels' bodies, in float32 and bf16 storage: the stem's pool, odd sizes, windows of
     * 2 and of 1 row's stride, ties, NaN and -inf; the average pool over ResNet-50's last 7 x 7
     * and over 5 rows of an odd channel count */
    {OPS_POOL(2, 56, 56, 64, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX | OPS_POOL_MAX_VEC},
    {OPS_POOL(2, 7, 5, 3, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX, .data = OPS_POOL_TIES},
    {OPS_POOL(3, 9, 9, 33, 2, 2, 0), .use = OPS_BODIES, .bodies = OPS_POOL_MAX, .data = OPS_POOL_TIES},
    {OPS_POOL(1, 6, 8, 5, 3, 1, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX, .data = OPS_POOL_TIES},
    {OPS_POOL(3, 9, 9, 16, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX | OPS_POOL_MAX_VEC,
     .data = OPS_POOL_TIES},
    {OPS_POOL(2, 8, 7, 16, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX, .data = OPS_POOL_NAN_INF},
    {OPS_POOL(2, 8, 7, 5, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX, .data = OPS_POOL_NAN_INF},
    {OPS_POOL(2, 8, 6, 8, 2, 2, 0), .use = OPS_BODIES, .bodies = OPS_POOL_MAX_VEC, .data = OPS_POOL_TIES},
    {OPS_POOL(3, 9, 7, 16, 3, 2, 1), .use = OPS_BODIES, .bodies = OPS_POOL_MAX_VEC, .data = OPS_POOL_NAN_INF},
    {.n = 8, .h = 7, .w = 7, .c = 2048, .use = OPS_BODIES, .bodies = OPS_POOL_AVG},
    {.n = 3, .h = 5, .w = 1, .c = 33, .use = OPS_BODIES, .bodies = OPS_POOL_AVG},
};

/* The row's descriptor in storage `type` (a row with a window: OPS_POOL_AVG's alone have none). */
static inline ds_pool_desc ops_pool_desc(const ops_pool *t, ds_dtype type)
{
    ds_pool_desc d = {t->n, t->h, t->w, t->c, t->k, t->stride, t->pad, 0, 0, type};
    d.p = (t->h + 2 * t->pad - t->k) / t->stride + 1;
    d.q = (t->w + 2 * t->pad - t->k) / t->stride + 1;
    return d;
}

/* The fully connected layer: n rows of i inputs to o outputs (test_cuda_bodies: the bias
 * kernels, added to the product and summed into db). */
typedef struct {
    int n, i, o;
    unsigned use;
} ops_linear;

#define OPS_LINEAR(n_, i_, o_) .n = n_, .i = i_, .o = o_

static const ops_linear ops_linears[] = {
    {OPS_LINEAR(5, 9, 7), .use = OPS_REF | OPS_GPU},
    {OPS_LINEAR(3, 140, 260), .use = OPS_REF | OPS_GPU},
    {OPS_LINEAR(5, 70, 33), .use = OPS_GPU},
    {OPS_LINEAR(40, 300, 600), .use = OPS_BITS},
    /* the kernels' bodies: 1000 outputs (ImageNet's classes) at batch 8, a short odd one */
    {OPS_LINEAR(8, 64, 1000), .use = OPS_BODIES},
    {OPS_LINEAR(3, 5, 33), .use = OPS_BODIES},
};

/* Softmax cross-entropy over n rows of c classes, label smoothing; a label of -1 (padding)
 * every `pad_every` rows from the fourth (0: none). test_cuda_bodies pads rows 1 and 2 of its
 * rows (-1 and c) where there are more than 2, whatever `pad_every`. */
typedef struct {
    int n, c;
    float smoothing;
    int pad_every;
    unsigned use;
    float scale;  /* test_cuda_bodies only: the gradient's scale (0: 1 / n, the batch's mean) */
} ops_xent;

#define OPS_XENT(n_, c_, smoothing_, pad_every_) .n = n_, .c = c_, .smoothing = smoothing_, .pad_every = pad_every_

/* 1: row r of the case is a padding sample (label -1) */
static inline int ops_xent_padding(const ops_xent *t, int r)
{
    return t->pad_every && r >= 3 && (r - 3) % t->pad_every == 0;
}

static const ops_xent ops_xents[] = {
    {OPS_XENT(7, 11, 0, 4), .use = OPS_REF | OPS_GPU},
    {OPS_XENT(7, 11, 0.1f, 4), .use = OPS_REF | OPS_GPU},
    {OPS_XENT(6, 1000, 0, 3), .use = OPS_GPU},
    {OPS_XENT(6, 1000, 0.1f, 3), .use = OPS_GPU},
    {OPS_XENT(40, 600, 0.1f, 7), .use = OPS_BITS},
    /* the kernels' bodies: ImageNet's 1000 classes at batch 8, odd counts, a scale of 1, one class */
    {.n = 8, .c = 1000, .smoothing = 0.1f, .use = OPS_BODIES},
    {.n = 5, .c = 300, .use = OPS_BODIES},
    {.n = 4, .c = 10, .smoothing = 0.1f, .scale = 1, .use = OPS_BODIES},
    {.n = 1, .c = 1, .scale = 1, .use = OPS_BODIES},
};

/* One SGD step's rule: momentum, weight decay, Nesterov, the first step (the buffer set). The
 * elementwise ops (scale, axpy, add, to_bf16: their family is walked with these rows) take
 * rows of their own in test_cuda_bodies, the rule left 0. */
typedef struct {
    float lr, momentum, wd;
    int nesterov, first;
    unsigned use;
    /* test_cuda_bodies only */
    unsigned bodies;  /* its tests that take the row (OPS_SGD_STEP, ...) */
    size_t n;         /* the length of the vectors the step and the elementwise ops run on */
    int bf16_runs;    /* OPS_SGD_TO_BF16: how many runs, laid out as the model's weight copy */
} ops_sgd;

#define OPS_SGD(lr_, momentum_, wd_, nesterov_, first_) \
    .lr = lr_, .momentum = momentum_, .wd = wd_, .nesterov = nesterov_, .first = first_

/* test_cuda_bodies's tests of an SGD row (its `bodies`) */
enum {
    OPS_SGD_STEP = 1 << 0,         /* sgd_step by the row's rule on n values */
    OPS_SGD_ELEMENTWISE = 1 << 1,  /* scale, axpy, add (float32, bf16), to_bf16 and back, on n values */
    OPS_SGD_TO_BF16 = 1 << 2,      /* to_bf16 over bf16_runs runs (gaps kept, runs of no values) */
};

static const ops_sgd ops_sgds[] = {
    {OPS_SGD(0.1f, 0.9f, 0, 0, 0), .use = OPS_REF},
    {OPS_SGD(0.1f, 0.9f, 1e-4f, 1, 0), .use = OPS_REF | OPS_BODIES, .bodies = OPS_SGD_STEP, .n = 100003},
    {OPS_SGD(0.1f, 0.9f, 5e-4f, 0, 0), .use = OPS_REF},
    {OPS_SGD(0.1f, 0, 1e-4f, 0, 0), .use = OPS_REF | OPS_BODIES, .bodies = OPS_SGD_STEP, .n = 1000},
    /* one sequence on one tensor: the first step, then each rule */
    {OPS_SGD(0.1f, 0.9f, 1e-4f, 0, 1), .use = OPS_GPU | OPS_BITS},
    {OPS_SGD(0.1f, 0.9f, 5e-4f, 1, 0), .use = OPS_GPU | OPS_BITS},
    {OPS_SGD(0.05f, 0.9f, 0, 0, 0), .use = OPS_GPU},
    {OPS_SGD(0.01f, 0, 1e-4f, 0, 0), .use = OPS_GPU},
    /* the kernels' bodies (and two rows above): the rules at odd lengths; the elementwise ops;
     * to_bf16 over one run, resnet50's convolutions' runs (one launch), three launches' */
    {OPS_SGD(0.1f, 0.9f, 1e-4f, 0, 0), .use = OPS_BODIES, .bodies = OPS_SGD_STEP, .n = 100003},
    {OPS_SGD(0.1f, 0.9f, 0, 0, 1), .use = OPS_BODIES, .bodies = OPS_SGD_STEP, .n = 1000},
    {OPS_SGD(0.1f, 0, 0, 0, 0), .use = OPS_BODIES, .bodies = OPS_SGD_STEP, .n = 777},
    {.n = 100003, .use = OPS_BODIES, .bodies = OPS_SGD_ELEMENTWISE},
    {.n = 17, .use = OPS_BODIES, .bodies = OPS_SGD_ELEMENTWISE},
    {.bf16_runs = 1, .use = OPS_BODIES, .bodies = OPS_SGD_TO_BF16},
    {.bf16_runs = 53, .use = OPS_BODIES, .bodies = OPS_SGD_TO_BF16},
    {.bf16_runs = 150, .use = OPS_BODIES, .bodies = OPS_SGD_TO_BF16},
};

/* The input ops: n images of H x W bytes to ch x cw crops (normalize_u8) and boxes resized to
 * that size (resized_crop_u8). */
typedef struct {
    int n, H, W, ch, cw;
    unsigned use;
    int no_flip;  /* test_cuda_bodies only: no flips (NULL); 0: every other sample flipped */
} ops_input;

#define OPS_INPUT(n_, H_, W_, ch_, cw_) .n = n_, .H = H_, .W = W_, .ch = ch_, .cw = cw_

static const ops_input ops_inputs[] = {
    {OPS_INPUT(4, 20, 17, 12, 9), .use = OPS_GPU},
    {OPS_INPUT(5, 21, 26, 12, 9), .use = OPS_GPU},
    {OPS_INPUT(4, 256, 256, 224, 224), .use = OPS_GPU},   /* RandomResizedCrop at ImageNet sizes */
    {OPS_INPUT(4, 20, 18, 16, 16), .use = OPS_BITS},
    /* the kernels' bodies: 32 x 32 crops, odd sizes without flips */
    {OPS_INPUT(4, 40, 36, 32, 32), .use = OPS_BODIES},
    {OPS_INPUT(3, 17, 23, 9, 11), .use = OPS_BODIES, .no_flip = 1},
};

/* The families of cases, and the members of ds_backend that are not ops. */
typedef enum {
    OPS_FAMILY_NONE,     /* a field, not a function */
    OPS_FAMILY_CONV,
    OPS_FAMILY_BN,
    OPS_FAMILY_POOL,
    OPS_FAMILY_LINEAR,
    OPS_FAMILY_XENT,
    OPS_FAMILY_SGD,
    OPS_FAMILY_ELEMENTWISE,  /* walked with the SGD rows (scale, axpy, add) and the bf16 storage rows */
    OPS_FAMILY_INPUT,
    OPS_FAMILY_HOST,     /* memory, streams, marks, clocks, page-locked copies: the named tests */
    OPS_FAMILY_GRAPH,    /* recorded ops replayed: the named tests; NULL on a backend without graphs (the CPU) */
} ops_family;

/* Every member of ds_backend, in the struct's order, with the family whose cases exercise it
 * (and, for the members that are not ops, where they are tested). cuda_none: why the CUDA
 * backend has none (the member is optional there); NULL where it must have one. */
typedef struct {
    const char *member;
    size_t offset, size;
    ops_family family;
    const char *tested_by;
    const char *cuda_none;
} ops_member;

#define OPS_MEMBER(m, family, by) {#m, offsetof(ds_backend, m), sizeof(((ds_backend *)0)->m), family, by, NULL}
#define OPS_MEMBER_NOT_CUDA(m, family, by, why) \
    {#m, offsetof(ds_backend, m), sizeof(((ds_backend *)0)->m), family, by, why}

static const ops_member ops_members[] = {
    OPS_MEMBER(name, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER(host_memory, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER(precision, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER(deterministic, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER(relu_mask, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER(alloc, OPS_FAMILY_HOST, "every case; test_ops backend selection (aligned, zeroed)"),
    OPS_MEMBER(free, OPS_FAMILY_HOST, "every case"),
    OPS_MEMBER(upload, OPS_FAMILY_HOST, "every test_cuda_ops case; upload's source reused at once"),
    OPS_MEMBER(download, OPS_FAMILY_HOST, "every test_cuda_ops case"),
    OPS_MEMBER(zero, OPS_FAMILY_HOST, "test_cuda_ops sgd and elementwise"),
    OPS_MEMBER(copy, OPS_FAMILY_HOST, "test_cuda_ops sgd and elementwise"),
    OPS_MEMBER(sync, OPS_FAMILY_HOST, "test_cuda_ops streams and marks"),
    OPS_MEMBER(mark, OPS_FAMILY_HOST, "test_cuda_ops streams and marks"),
    OPS_MEMBER(mark_wait, OPS_FAMILY_HOST, "test_cuda_ops streams and marks"),
    OPS_MEMBER(stream_wait, OPS_FAMILY_HOST, "test_cuda_ops streams and marks"),
    OPS_MEMBER(mark_seconds, OPS_FAMILY_HOST, "test_cuda_ops streams and marks"),
    OPS_MEMBER(clock_alloc, OPS_FAMILY_HOST, "test_model's step clocks; test_emu_train --accum 32"),
    OPS_MEMBER(clock_free, OPS_FAMILY_HOST, "test_model's step clocks; test_emu_train --accum 32"),
    OPS_MEMBER(clock_record, OPS_FAMILY_HOST, "test_model's step clocks; test_emu_train --accum 32"),
    OPS_MEMBER(clock_seconds, OPS_FAMILY_HOST, "test_model's step clocks; test_emu_train --accum 32"),
    OPS_MEMBER(host_alloc, OPS_FAMILY_HOST, "test_cuda_ops feed; test_feed"),
    OPS_MEMBER(host_free, OPS_FAMILY_HOST, "test_cuda_ops feed; test_feed"),
    OPS_MEMBER(host_register, OPS_FAMILY_HOST, "test_cuda_ops feed; test_feed"),
    OPS_MEMBER(host_unregister, OPS_FAMILY_HOST, "test_cuda_ops feed; test_feed"),
    OPS_MEMBER(upload_async, OPS_FAMILY_HOST, "test_cuda_ops streams, feed"),
    OPS_MEMBER(download_async, OPS_FAMILY_HOST, "test_cuda_ops losses read a step late"),
    OPS_MEMBER(graph_begin, OPS_FAMILY_GRAPH, "test_emu_graph.sh (the step, graphs against calls); test_emu_graph (capture, replay, refusals)"),
    OPS_MEMBER(graph_end, OPS_FAMILY_GRAPH, "test_emu_graph.sh (the step, graphs against calls); test_emu_graph (capture, replay, refusals)"),
    OPS_MEMBER(graph_launch, OPS_FAMILY_GRAPH, "test_emu_graph.sh (the step, graphs against calls); test_emu_graph (capture, replay, refusals)"),
    OPS_MEMBER(graph_free, OPS_FAMILY_GRAPH, "test_emu_graph.sh (the step, graphs against calls); test_emu_graph (capture, replay, refusals)"),
    OPS_MEMBER(conv_workspace, OPS_FAMILY_CONV, NULL),
    OPS_MEMBER(conv_fwd, OPS_FAMILY_CONV, NULL),
    OPS_MEMBER(conv_bwd_data, OPS_FAMILY_CONV, NULL),
    OPS_MEMBER(conv_bwd_weight, OPS_FAMILY_CONV, NULL),
    OPS_MEMBER_NOT_CUDA(conv_fwd_bn, OPS_FAMILY_CONV, NULL, "the model runs conv_fwd, then bn_fwd_infer"),
    OPS_MEMBER(bn_fwd_train, OPS_FAMILY_BN, NULL),
    OPS_MEMBER(bn_fwd_infer, OPS_FAMILY_BN, NULL),
    OPS_MEMBER(bn_bwd, OPS_FAMILY_BN, NULL),
    OPS_MEMBER(maxpool_fwd, OPS_FAMILY_POOL, NULL),
    OPS_MEMBER(maxpool_bwd, OPS_FAMILY_POOL, NULL),
    OPS_MEMBER(avgpool_fwd, OPS_FAMILY_POOL, NULL),
    OPS_MEMBER(avgpool_bwd, OPS_FAMILY_POOL, NULL),
    OPS_MEMBER(linear_fwd, OPS_FAMILY_LINEAR, NULL),
    OPS_MEMBER(linear_bwd, OPS_FAMILY_LINEAR, NULL),
    OPS_MEMBER(softmax_xent, OPS_FAMILY_XENT, NULL),
    OPS_MEMBER(sgd_step, OPS_FAMILY_SGD, NULL),
    OPS_MEMBER(scale, OPS_FAMILY_ELEMENTWISE, NULL),
    OPS_MEMBER(axpy, OPS_FAMILY_ELEMENTWISE, NULL),
    OPS_MEMBER(add, OPS_FAMILY_ELEMENTWISE, NULL),
    OPS_MEMBER(to_bf16, OPS_FAMILY_ELEMENTWISE, NULL),
    OPS_MEMBER(normalize_u8, OPS_FAMILY_INPUT, NULL),
    OPS_MEMBER(resized_crop_u8, OPS_FAMILY_INPUT, NULL),
    OPS_MEMBER(reduce_start, OPS_FAMILY_HOST, "test_model's gradient buckets; test_dstrain_mpi.sh; test_emu_train's np 2"),
    OPS_MEMBER(reduce_wait, OPS_FAMILY_HOST, "test_model's gradient buckets; test_dstrain_mpi.sh; test_emu_train's np 2"),
    OPS_MEMBER(ordered_reduce, OPS_FAMILY_NONE, NULL),
    OPS_MEMBER_NOT_CUDA(reduce_stats, OPS_FAMILY_HOST, "test_dstrain_mpi.sh (--verbose's account of the overlap)",
                        "NCCL reduces inside its streams: the host sees no queue"),
    OPS_MEMBER_NOT_CUDA(kernel_set, OPS_FAMILY_HOST, "test_cpu_kernels.sh (the start-up line and the checkpoint's /kernels)",
                        "the CPU's kernel sets only"),
    OPS_MEMBER(reduction, OPS_FAMILY_HOST, "test_emu_deterministic.sh (the start-up line and checkpoint)"),
};

#define OPS_COUNT(a) (sizeof(a) / sizeof *(a))

/* How many rows a family has (HOST and NONE: the named tests, not rows). */
static inline size_t ops_family_rows(ops_family f)
{
    switch (f) {
    case OPS_FAMILY_CONV: return OPS_COUNT(ops_convs);
    case OPS_FAMILY_BN: return OPS_COUNT(ops_bns);
    case OPS_FAMILY_POOL: return OPS_COUNT(ops_pools);
    case OPS_FAMILY_LINEAR: return OPS_COUNT(ops_linears);
    case OPS_FAMILY_XENT: return OPS_COUNT(ops_xents);
    case OPS_FAMILY_SGD: case OPS_FAMILY_ELEMENTWISE: return OPS_COUNT(ops_sgds);
    case OPS_FAMILY_INPUT: return OPS_COUNT(ops_inputs);
    case OPS_FAMILY_HOST: case OPS_FAMILY_GRAPH: case OPS_FAMILY_NONE: return 0;
    }
    return 0;
}

/* The walks that take a family's rows (the OR of their `use`; HOST, GRAPH and NONE: 0). */
static inline unsigned ops_family_use(ops_family f)
{
    unsigned u = 0;
    switch (f) {
    case OPS_FAMILY_CONV: for (size_t i = 0; i < OPS_COUNT(ops_convs); i++) u |= ops_convs[i].use; break;
    case OPS_FAMILY_BN: for (size_t i = 0; i < OPS_COUNT(ops_bns); i++) u |= ops_bns[i].use; break;
    case OPS_FAMILY_POOL: for (size_t i = 0; i < OPS_COUNT(ops_pools); i++) u |= ops_pools[i].use; break;
    case OPS_FAMILY_LINEAR: for (size_t i = 0; i < OPS_COUNT(ops_linears); i++) u |= ops_linears[i].use; break;
    case OPS_FAMILY_XENT: for (size_t i = 0; i < OPS_COUNT(ops_xents); i++) u |= ops_xents[i].use; break;
    case OPS_FAMILY_SGD: case OPS_FAMILY_ELEMENTWISE:
        for (size_t i = 0; i < OPS_COUNT(ops_sgds); i++) u |= ops_sgds[i].use;
        break;
    case OPS_FAMILY_INPUT: for (size_t i = 0; i < OPS_COUNT(ops_inputs); i++) u |= ops_inputs[i].use; break;
    case OPS_FAMILY_HOST: case OPS_FAMILY_GRAPH: case OPS_FAMILY_NONE: break;
    }
    return u;
}

#endif

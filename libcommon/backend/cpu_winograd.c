/* cpu_winograd: fp32 3x3 stride-1 convolutions (pad 1) by Winograd's minimal filtering
 * F(2x2, 3x3) (Lavin and Gray, 2016), 2.25 times fewer multiplications than the direct
 * product.
 *
 * The output is cut into 2x2 tiles, each read from a 4x4 tile of the input (zero past its
 * edges); with the transforms
 *     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *     G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *     A^T = [1 1 1 0; 0 1 -1 -1]
 * a tile of output channel k is A^T [ sum over c of (G g[k,c] G^T) . (B^T d[c] B) ] A, so
 * for each of the 16 positions xi of a transformed tile the sum over input channels is a
 * GEMM, M[xi] (tiles, k) = V[xi] (tiles, c) * U[xi] (c, k), on ds_sgemm_small:
 *   - Forward: V from the input, U from the weights, the output from M. Tiles are taken in
 *     blocks of a fixed count (by the shape), one block per task, so V and M stay in L2.
 *   - Backward-data is the forward of the flipped, transposed weights over dout (pad 1 again).
 *   - Backward-weight is the adjoint of the forward: dU[xi] (c, k) = V[xi]^T (c, tiles) *
 *     dM[xi] (tiles, k) with dM = A dy A^T, summed over the tiles in per-group partials
 *     (groups of blocks, added in group order, as cpu_conv.c's), then dw += G^T dU G.
 * The transforms are additions and halvings written in a fixed order (no multiply-add can
 * change them: a halving is exact), the GEMMs follow ds_sgemm_small's sum rule, and blocks and
 * groups depend on the shape alone, so the results are bitwise the same for any thread count
 * on every kernel set (docs/DESIGN.md §7). */
#include "cpu_conv.h"
#include "cpu_kernels.h"
#include "cpu_sgemm.h"

#include <omp.h>
#include <string.h>

/* The shapes it is taken for, by the shape alone: 64 or more channels in and out and outputs
 * of 8x8 or more. Measured with the AVX2 kernels (bench/ENGINE.md): 1.4-2.7 times faster
 * than the direct product on resnet50's layers at 56x56 to 14x14, and 1.1-1.4 times on
 * resnet20's 64-channel layers at 8x8; slower at 7x7 (nearly a quarter of the 8x8 the tiles
 * cover is past the edge) and on 16 channels, whose direct products run near the FMA peak
 * while the transforms cost as much as the products saved. */
int ds_cpu_wino_ok(const ds_conv_desc *d)
{
    return d->r == 3 && d->s == 3 && d->stride == 1 && d->pad == 1 && d->c >= 64 && d->k >= 64 && d->p >= 8 && d->q >= 8;
}

static long tiles_of(const ds_conv_desc *d) { return (long)d->n * ((d->p + 1) / 2) * ((d->q + 1) / 2); }

/* Tiles per block (multiples of 12: the register tiles' heights divide them). Measured on
 * resnet50's layers with the AVX2 kernels (bench/ENGINE.md): the forward at 120 (its V and M
 * from 0.9 MiB at 64 channels to 3.8 at 256), 48 and 96 as fast or slower; backward-weight,
 * which reads and writes the (16, c, k) partials once per block, with blocks long against
 * them, 6 c k / (c + k) tiles, within 192 (fastest at 64 channels) and 384. */
#define BLOCK_TILES 120

static long wblock_tiles(const ds_conv_desc *d)
{
    long t = 6L * d->c * d->k / (d->c + d->k) / 12 * 12;
    return t < 192 ? 192 : t > 384 ? 384 : t;
}

/* Floats from one position xi of a block's V, M or dM to the next: a cache line more than
 * the block, so that the transforms' 16 streams do not fall in one of L1's sets. */
static long pos_stride(long t, int ch) { return ds_round16(t * ch) + 16; }

/* Output channels backward-weight's last pass (the groups' sum and G^T dU G) takes at a time. */
#define WINO_KB 64

static int weight_groups(const ds_conv_desc *d)
{
    long blocks = (tiles_of(d) + wblock_tiles(d) - 1) / wblock_tiles(d), per = 16 * ds_round16((long)d->c * d->k);
    long g = blocks < DS_CONV_GROUPS ? blocks : DS_CONV_GROUPS;
    while (g > 1 && g * per > DS_CONV_GROUP_FLOATS) g /= 2;
    return g < 1 ? 1 : (int)g;
}

/* One slot per processor: V and M (or dM) of a block, and a row of zeros and a sink, c or k
 * floats each, that the transforms read and write past the edges. */
static long slot_floats(const ds_conv_desc *d, long t)
{
    long w = d->c > d->k ? d->c : d->k;
    return 16 * pos_stride(t, d->c) + 16 * pos_stride(t, d->k) + 2 * ds_round16(w);
}

static long weights_floats(const ds_conv_desc *d)
{
    long u = 16 * ds_round16((long)d->c * ds_conv_row_ld(d->k)), ut = 16 * ds_round16((long)d->k * ds_conv_row_ld(d->c));
    long part = (long)weight_groups(d) * 16 * ds_round16((long)d->c * d->k);
    long a = u > ut ? u : ut;
    return a > part ? a : part;
}

size_t ds_cpu_wino_workspace(const ds_conv_desc *d)
{
    ds_conv_desc t;
    long s = slot_floats(d, wblock_tiles(d));
    if (ds_cpu_conv_flipped(d, &t) && slot_floats(&t, BLOCK_TILES) > s) s = slot_floats(&t, BLOCK_TILES);
    return (size_t)(weights_floats(d) + ds_cpu_conv_slots() * s) * sizeof(float);
}

/* U[xi] (c, k), rows ldu apart, = G g G^T of the weights w [K, 3, 3, C]; flipped: the
 * weights of the flipped, transposed convolution (c runs over K, k over C, g[r][s] =
 * w[c][2-r][2-s][k]), for backward-data. */
static void transform_weights(float *U, long ldu, const float *w, int K, int C, int flipped)
{
    const int rows = flipped ? K : C, cols = flipped ? C : K;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float g[3][3], t[4][3];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    g[r][s] = flipped ? w[(((long)i * 3 + 2 - r) * 3 + 2 - s) * C + j] : w[(((long)j * 3 + r) * 3 + s) * C + i];
            for (int s = 0; s < 3; s++) {
                t[0][s] = g[0][s];
                t[1][s] = (g[0][s] + g[1][s] + g[2][s]) * 0.5f;
                t[2][s] = (g[0][s] - g[1][s] + g[2][s]) * 0.5f;
                t[3][s] = g[2][s];
            }
            for (int x = 0; x < 4; x++) {
                float *u = U + (long)x * 4 * rows * ldu + (long)i * ldu + j;
                const long step = (long)rows * ldu;
                u[0] = t[x][0];
                u[step] = (t[x][0] + t[x][1] + t[x][2]) * 0.5f;
                u[2 * step] = (t[x][0] - t[x][1] + t[x][2]) * 0.5f;
                u[3 * step] = t[x][2];
            }
        }
}

/* Tile t of the convolution: image n, output rows 2 ty, 2 ty + 1, columns 2 tx, 2 tx + 1. */
static void tile_at(const ds_conv_desc *d, long t, int *n, int *ty, int *tx)
{
    const long th = (d->p + 1) / 2, tw = (d->q + 1) / 2;
    *n = (int)(t / (th * tw));
    *ty = (int)(t % (th * tw) / tw);
    *tx = (int)(t % tw);
}

/* The offsets in an output (or dout) [n, p, q, k] of tile t's 2x2 pixels, -1 for those past
 * its edge. */
static void output_pixels(long at[4], const ds_conv_desc *d, long t)
{
    int n, ty, tx;
    tile_at(d, t, &n, &ty, &tx);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int py = 2 * ty + a, qx = 2 * tx + b;
            at[a * 2 + b] = py >= d->p || qx >= d->q ? -1 : (((long)n * d->p + py) * d->q + qx) * d->k;
        }
}

/* V[xi] rows 0 .. tn-1 (positions st apart) = B^T d B of tiles t0 .. t0+tn-1 of x [n, h, w,
 * ch], the 4x4 tile at (2 ty - 1, 2 tx - 1), zeros (the row `zero`) past the image. */
static void transform_input(float *V, long st, const float *x, const float *zero, const ds_conv_desc *d,
                            int ch, long t0, long tn)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    for (long i = 0; i < tn; i++) {
        int n, ty, tx;
        tile_at(d, t0 + i, &n, &ty, &tx);
        const float *p[16];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                int y = 2 * ty - 1 + a, xx = 2 * tx - 1 + b;
                p[a * 4 + b] = y < 0 || y >= d->h || xx < 0 || xx >= d->w ? zero
                                                                          : x + (((long)n * d->h + y) * d->w + xx) * ch;
            }
        L->wino_in(V + i * ch, st, p, ch);
    }
}

/* y [n, p, q, k] tiles t0 .. t0+tn-1 = A^T M A, the parts past the output's edge written to
 * the row `sink`. */
static void transform_output(float *y, const float *M, long st, float *sink, const ds_conv_desc *d, long t0,
                             long tn, const ds_cpu_conv_bn *bn)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    const int K = d->k;
    for (long i = 0; i < tn; i++) {
        long at[4];
        output_pixels(at, d, t0 + i);
        float *o[4];
        for (int j = 0; j < 4; j++) o[j] = at[j] < 0 ? sink : y + at[j];
        L->wino_out(o, M + i * K, st, K);
        for (int j = 0; j < 4 && bn; j++)
            if (at[j] >= 0) ds_cpu_conv_bn_f32(y, at[j] / K, 0, 1, K, d, bn);
    }
}

/* dM[xi] rows 0 .. tn-1 = A dy A^T of the 2x2 tiles of dout [n, p, q, k] (zeros past its
 * edge). */
static void transform_dout(float *D, long st, const float *dy, const float *zero, const ds_conv_desc *d,
                           long t0, long tn)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    const int K = d->k;
    for (long i = 0; i < tn; i++) {
        long at[4];
        output_pixels(at, d, t0 + i);
        const float *p[4];
        for (int j = 0; j < 4; j++) p[j] = at[j] < 0 ? zero : dy + at[j];
        L->wino_dout(D + i * K, st, p, K);
    }
}

/* The forward with U already transformed (rows ldu apart): blocks of T tiles, one per task. */
static void wino_fwd(float *out, const float *in, const float *U, long ldu, const ds_conv_desc *d, float *slots,
                     const ds_cpu_conv_bn *bn)
{
    const long T = BLOCK_TILES, nt = tiles_of(d), blocks = (nt + T - 1) / T, slot = slot_floats(d, T);
    const long w = d->c > d->k ? d->c : d->k;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (long b = 0; b < blocks; b++) {
        const long vs = pos_stride(T, d->c), ms = pos_stride(T, d->k);
        float *V = slots + omp_get_thread_num() * slot, *M = V + 16 * vs, *zero = M + 16 * ms, *sink = zero + ds_round16(w);
        memset(zero, 0, (size_t)d->c * sizeof *zero);
        const long t0 = b * T, tn = nt - t0 < T ? nt - t0 : T;
        transform_input(V, vs, in, zero, d, d->c, t0, tn);
        for (int x = 0; x < 16; x++)  // M[xi] (tn, k) = V[xi] (tn, c) * U[xi] (c, k)
            ds_sgemm_small(tn, d->k, d->c, V + x * vs, d->c, 1, U + x * (long)d->c * ldu, ldu, M + x * ms, d->k, 0);
        transform_output(out, M, ms, sink, d, t0, tn, bn);
    }
}

void ds_cpu_wino_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws,
                     const ds_cpu_conv_bn *bn)
{
    float *U = ws, *slots = U + weights_floats(d);
    const long ldu = ds_conv_row_ld(d->k);
    transform_weights(U, ldu, w, d->k, d->c, 0);
    wino_fwd(out, in, U, ldu, d, slots, bn);
}

void ds_cpu_wino_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws)
{
    ds_conv_desc t;
    ds_cpu_conv_flipped(d, &t);  // 3x3, stride 1, pad 1: always
    float *U = ws, *slots = U + weights_floats(d);
    const long ldu = ds_conv_row_ld(t.k);
    transform_weights(U, ldu, w, d->k, d->c, 1);
    wino_fwd(din, dout, U, ldu, &t, slots, NULL);
}

void ds_cpu_wino_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws)
{
    const long T = wblock_tiles(d), nt = tiles_of(d), blocks = (nt + T - 1) / T, slot = slot_floats(d, T);
    const long ck = (long)d->c * d->k, part_stride = 16 * ds_round16(ck), w = d->c > d->k ? d->c : d->k;
    const int groups = weight_groups(d), C = d->c, K = d->k;
    float *part = ws, *slots = part + weights_floats(d);
    if (nt == 0) return;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        const long vs = pos_stride(T, C), ds = pos_stride(T, K);
        float *V = slots + omp_get_thread_num() * slot, *D = V + 16 * vs, *zero = D + 16 * ds;
        float *pg = part + g * part_stride;
        memset(zero, 0, (size_t)w * sizeof *zero);
        const long b0 = g * blocks / groups, b1 = (g + 1) * blocks / groups;
        for (long b = b0; b < b1; b++) {
            const long t0 = b * T, tn = nt - t0 < T ? nt - t0 : T;
            transform_input(V, vs, in, zero, d, C, t0, tn);
            transform_dout(D, ds, dout, zero, d, t0, tn);
            for (int x = 0; x < 16; x++)  // dU[xi] (c, k) (+)= V[xi]^T (c, tn) * dM[xi] (tn, k)
                ds_sgemm_small(C, K, tn, V + x * vs, 1, C, D + x * ds, K, pg + x * ds_round16(ck), K, b != b0);
        }
    }
    // dU = the groups' partials added in group order, then dw += G^T dU G: for each input
    // channel, output channels WINO_KB at a time, the same operations on each element in
    // turn, the partials read along their rows (k) rather than a cache line an element.
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (int c = 0; c < C; c++)
        for (int k0 = 0; k0 < K; k0 += WINO_KB) {
            const int kn = K - k0 < WINO_KB ? K - k0 : WINO_KB;
            float u[16][WINO_KB], t[3][4][WINO_KB];
            for (int x = 0; x < 16; x++) {
                const float *p0 = part + x * ds_round16(ck) + (long)c * K + k0;
                for (int j = 0; j < kn; j++) u[x][j] = p0[j];
                for (int g = 1; g < groups; g++)
                    for (int j = 0; j < kn; j++) u[x][j] += p0[g * part_stride + j];
            }
            for (int i = 0; i < 4; i++)  // G^T dU: the rows
                for (int j = 0; j < kn; j++) {
                    t[0][i][j] = u[i][j] + (u[4 + i][j] + u[8 + i][j]) * 0.5f;
                    t[1][i][j] = (u[4 + i][j] - u[8 + i][j]) * 0.5f;
                    t[2][i][j] = (u[4 + i][j] + u[8 + i][j]) * 0.5f + u[12 + i][j];
                }
            for (int j = 0; j < kn; j++) {  // (G^T dU) G: the columns
                float *o = dw + (long)(k0 + j) * 9 * C + c;
                for (int r = 0; r < 3; r++) {
                    o[(r * 3 + 0) * C] += t[r][0][j] + (t[r][1][j] + t[r][2][j]) * 0.5f;
                    o[(r * 3 + 1) * C] += (t[r][1][j] - t[r][2][j]) * 0.5f;
                    o[(r * 3 + 2) * C] += (t[r][1][j] + t[r][2][j]) * 0.5f + t[r][3][j];
                }
            }
        }
}

/* engine_ref: drives the engine for tests/ref/test_engine_resnet.py.
 *
 *   engine_ref [--device cpu|cuda] [--precision fp32|tf32|bf16] CKPT INPUT.h5 OUT.h5 [OUT_CKPT.h5]
 *
 * (--device cuda: the same on the CUDA backend, --deterministic, so that the CPU's and the
 * GPU's steps can be compared tensor by tensor; the default is the CPU.)
 * Loads CKPT (a ds checkpoint written by scripts/torchvision_to_ds.py), reads INPUT.h5
 *   /x float32 [n, H, W, 3] (normalised, NHWC), /labels int32 [n],
 *   root attributes lr, momentum, wd, smoothing (double), nesterov, steps (int)
 * and writes OUT.h5:
 *   /eval_logits [n, C]   eval mode (running statistics)
 *   /train_logits [n, C]  training mode (batch statistics), first step
 *   and for k = 0 .. steps-1, training on the same batch:
 *   /w<k>/<name>          every float tensor before step k+1 (BN running stats included;
 *                         /w<steps> after the last)
 *   /loss<k>              summed cross-entropy of step k+1's forward
 *   /g<k>/<name>          gradient of loss / n for every parameter (PyTorch layout)
 *   /m<k+1>/<name>        momentum buffers after step k+1
 *   /relu<k>/<i>          uint8, flat NHWC: 1 where the i-th ReLU of step k+1's forward
 *                         passed its input (the engine's decision, which its backward used)
 * and, when given, OUT_CKPT.h5: the model after `steps` steps as a ds checkpoint. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "fsutil.h"
#include "log.h"
#include "model.h"

#define H5_OK(call)                                                    \
    do {                                                                 \
        if ((call) < 0) ds_die("%s:%d: HDF5 call failed: %s", __FILE__, __LINE__, #call); \
    } while (0)

static double attr_double(hid_t f, const char *name)
{
    double v;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) ds_die("input: attribute %s missing", name);
    H5_OK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
    H5_OK(H5Aclose(a));
    return v;
}

/* A dataset of `rank` dims (0: a scalar) stored as file_type, written from mem_type. */
static void write_data(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *v, int rank,
                       const hsize_t *dims)
{
    hid_t sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    H5_OK(sp);
    hid_t d = H5Dcreate2(loc, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(d);
    H5_OK(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v));
    H5_OK(H5Dclose(d));
    H5_OK(H5Sclose(sp));
}

static void write_floats(hid_t loc, const char *name, const float *v, int rank, const hsize_t *dims)
{
    write_data(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v, rank, dims);
}

/* Writes every PARAM (which = 'g': gradient, 'm': momentum) or every float tensor ('w'). */
static void write_group(hid_t f, const char *group, ds_model *m, char which)
{
    hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    for (int i = 0; i < ds_model_tensor_count(m); i++) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        if (t->kind == DS_TENSOR_COUNTER || (which != 'w' && t->kind != DS_TENSOR_PARAM)) continue;
        float *v = ds_xmalloc(t->count * sizeof *v);
        if (which == 'g' && ds_model_grad_get(m, i, v)) ds_die("gradient of %s", t->name);
        if (which == 'm' && ds_model_momentum_get(m, i, v)) ds_die("momentum of %s", t->name);
        if (which == 'w') ds_model_tensor_get(m, i, v);
        hsize_t dims[4];
        for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
        write_floats(g, t->name, v, t->ndim, dims);
        free(v);
    }
    H5_OK(H5Gclose(g));
}

/* The ReLU decisions of the last forward, one flat uint8 dataset per ReLU ("0", "1", ...). */
static void write_relu_masks(hid_t f, const char *group, ds_model *m)
{
    hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    for (int i = 0; i < ds_model_relu_count(m); i++) {
        size_t count = ds_model_relu_output(m, i, NULL);
        float *v = ds_xmalloc(count * sizeof *v);
        uint8_t *mask = ds_xmalloc(count);
        ds_model_relu_output(m, i, v);
        for (size_t j = 0; j < count; j++) mask[j] = v[j] > 0;
        char name[16];
        snprintf(name, sizeof name, "%d", i);
        hsize_t dims[1] = {count};
        write_data(g, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, mask, 1, dims);
        free(v);
        free(mask);
    }
    H5_OK(H5Gclose(g));
}

int main(int argc, char **argv)
{
    ds_log_init("engine_ref");
    ds_backend_opts opts = {.precision = DS_PRECISION_FP32, .deterministic = 1};
    ds_device device = DS_DEVICE_CPU;
    for (;;) {
        if (argc > 2 && !strcmp(argv[1], "--precision")) {
            if (ds_precision_parse(argv[2], &opts.precision)) return 2;
        } else if (argc > 2 && !strcmp(argv[1], "--device")) {
            if (ds_device_parse(argv[2], &device)) return 2;
        } else {
            break;
        }
        argc -= 2, argv += 2;
    }
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: engine_ref [--device cpu|cuda] [--precision fp32|tf32|bf16] CKPT INPUT.h5 OUT.h5 "
                        "[OUT_CKPT.h5]\n");
        return 2;
    }
    ds_ckpt_meta meta;
    if (ds_ckpt_read_meta(argv[1], &meta)) return 1;

    hid_t in = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
    if (in < 0) ds_die("%s: cannot open", argv[2]);
    hid_t dx = H5Dopen2(in, "x", H5P_DEFAULT), dl = H5Dopen2(in, "labels", H5P_DEFAULT);
    H5_OK(dx);
    H5_OK(dl);
    hid_t sp = H5Dget_space(dx);
    hsize_t xd[4];
    if (H5Sget_simple_extent_ndims(sp) != 4 || H5Sget_simple_extent_dims(sp, xd, NULL) != 4 || xd[3] != 3)
        ds_die("%s: /x is not [n, H, W, 3]", argv[2]);
    H5_OK(H5Sclose(sp));
    int n = (int)xd[0], H = (int)xd[1], W = (int)xd[2], C = meta.num_classes;
    float *x = ds_xmalloc((size_t)n * H * W * 3 * sizeof *x);
    int32_t *labels = ds_xmalloc((size_t)n * sizeof *labels);
    H5_OK(H5Dread(dx, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
    H5_OK(H5Dread(dl, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels));
    ds_sgd sgd = {.lr = (float)attr_double(in, "lr"), .momentum = (float)attr_double(in, "momentum"),
                  .weight_decay = (float)attr_double(in, "wd"), .nesterov = (int)attr_double(in, "nesterov"),
                  .bn_bias_decay = 1};
    float smoothing = (float)attr_double(in, "smoothing");
    int steps = (int)attr_double(in, "steps");
    H5_OK(H5Dclose(dx));
    H5_OK(H5Dclose(dl));
    H5_OK(H5Fclose(in));

    const ds_backend *be = ds_backend_select(device, &opts);
    if (!be) return 2;
    ds_model_config cfg = {.arch = meta.arch, .num_classes = C, .max_batch = n, .height = H,
                           .width = W, .training = 1};
    ds_model *m = ds_model_create(be, &cfg);
    if (!m || ds_ckpt_load(argv[1], m, NULL, DS_CKPT_OPTIMIZER)) return 1;
    be->upload(ds_model_input(m), x, (size_t)n * H * W * 3 * sizeof *x);

    hid_t out = H5Fcreate(argv[3], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(out);
    hsize_t ld[2] = {(hsize_t)n, (hsize_t)C};
    float *logits = ds_xmalloc((size_t)n * C * sizeof *logits);

    const float *y = ds_model_forward(m, n, 0);
    if (!y) return 1;
    be->download(logits, y, (size_t)n * C * sizeof *logits);
    write_floats(out, "eval_logits", logits, 2, ld);

    char name[32];
    for (int s = 0; s < steps; s++) {
        snprintf(name, sizeof name, "w%d", s);
        write_group(out, name, m, 'w');
        ds_model_zero_reduction(m);
        if (!(y = ds_model_forward(m, n, 1))) return 1;
        snprintf(name, sizeof name, "relu%d", s);
        write_relu_masks(out, name, m);
        float loss = (float)ds_model_backward(m, labels, n, 1.0f / n, smoothing);
        snprintf(name, sizeof name, "loss%d", s);
        write_floats(out, name, &loss, 0, NULL);
        if (s == 0) {
            be->download(logits, y, (size_t)n * C * sizeof *logits);
            write_floats(out, "train_logits", logits, 2, ld);
        }
        snprintf(name, sizeof name, "g%d", s);
        write_group(out, name, m, 'g');
        ds_model_step(m, &sgd, 1);
        snprintf(name, sizeof name, "m%d", s + 1);
        write_group(out, name, m, 'm');
    }
    snprintf(name, sizeof name, "w%d", steps);
    write_group(out, name, m, 'w');
    H5_OK(H5Fclose(out));

    if (argc == 5) {
        meta.step = steps;
        if (ds_ckpt_save(argv[4], m, &meta)) return 1;
    }
    ds_model_free(m);
    ds_ckpt_meta_free(&meta);
    free(x);
    free(labels);
    free(logits);
    return 0;
}

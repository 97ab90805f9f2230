/* engine_bench: images/s of the engine on synthetic data, for bench/engine_bench.sh (CPU)
 * and bench/gpu.sh (the "synthetic on device" column).
 *
 *   engine_bench [--device cpu|cuda|auto] [--precision fp32|tf32|bf16] [--deterministic]
 *                [--warmup N] [--verbose] ARCH SIZE BATCH train|infer STEPS
 *
 * The batch is made once on the host and uploaded once into the model's input, so the
 * timed loop measures the engine alone (no loader, no host-to-device copies). A training
 * step is zero gradients, forward, loss + backward, SGD, its loss read after the next step
 * is queued, as dstrain reads it (model.h: the loss read late); an inference step is one
 * forward in eval mode. N warm-up steps (default 1; on a GPU the
 * first steps also pay for cuDNN's lazy set-up) run before the clock starts, and the queue
 * is drained with the backend's sync before each clock reading.
 * Prints one line "ARCH SIZE BATCH MODE images/s" on stdout and the planned memory on
 * stderr; bench/engine_bench.sh reads peak host memory (VmHWM) from /proc itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fsutil.h"
#include "log.h"
#include "model.h"

/* A step's loss, read a step late: a benchmark of steps that compute no number is none. */
static int read_loss(ds_model *m, int mark)
{
    double loss = ds_model_step_loss(m, mark);
    return isfinite(loss) ? 0 : ds_err("a training step's loss is %g", loss);
}

static int usage(void)
{
    fprintf(stderr, "usage: engine_bench [--device cpu|cuda|auto] [--precision fp32|tf32|bf16] [--deterministic]\n"
                    "                    [--warmup N] [--verbose] ARCH SIZE BATCH train|infer STEPS\n");
    return 2;
}

int main(int argc, char **argv)
{
    ds_log_init("engine_bench");
    const char *device = "cpu", *precision = NULL;
    ds_device dev;
    int deterministic = 0, warmup = 1, a = 1;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        if (!strcmp(argv[a], "--deterministic")) deterministic = 1;
        else if (!strcmp(argv[a], "--verbose")) ds_verbosity = 1;   /* the backend's plans */
        else if (a + 1 >= argc) return usage();
        else if (!strcmp(argv[a], "--device")) device = argv[++a];
        else if (!strcmp(argv[a], "--precision")) precision = argv[++a];
        else if (!strcmp(argv[a], "--warmup")) warmup = atoi(argv[++a]);
        else return usage();
    }
    if (argc - a != 5 || warmup < 0) return usage();
    char **arg = argv + a;
    const char *arch = arg[0], *mode = arg[3];
    int size = atoi(arg[1]), batch = atoi(arg[2]), train = !strcmp(mode, "train"), steps = atoi(arg[4]);
    if (size <= 0 || batch <= 0 || steps <= 0 || (!train && strcmp(mode, "infer"))) return usage();

    ds_backend_opts bo = {.precision = DS_PRECISION_FP32, .deterministic = deterministic};
    if (precision && ds_precision_parse(precision, &bo.precision)) return usage();
    if (ds_device_parse(device, &dev)) return usage();
    const ds_backend *be = ds_backend_select(dev, &bo);
    if (!be) return 1;
    ds_model_config cfg = {.arch = arch, .num_classes = !strcmp(arch, "resnet20") ? 10 : 1000,
                           .max_batch = batch, .height = size, .width = size, .training = train};
    ds_model *m = ds_model_create(be, &cfg);
    if (!m) return 1;
    ds_model_init(m, 1);
    ds_model_memory mem = ds_model_memory_plan(m);
    ds_info("%s on %s%s%s: planned %.0f MiB (parameters %.0f, reduction %.0f, momentum %.0f, activations %.0f, "
            "workspace %.0f)", arch, be->name, be->host_memory ? "" : " ", be->host_memory ? "" : ds_precision_name(be->precision),
            (double)(mem.params + mem.reduction + mem.momentum + mem.activations + mem.workspace) / (1 << 20),
            (double)mem.params / (1 << 20), (double)mem.reduction / (1 << 20), (double)mem.momentum / (1 << 20),
            (double)mem.activations / (1 << 20), (double)mem.workspace / (1 << 20));

    size_t count = (size_t)batch * size * size * 3;  /* input [batch, size, size, 3] */
    float *x = ds_xmalloc(count * sizeof *x);
    int32_t *labels = ds_xmalloc((size_t)batch * sizeof *labels);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < batch; i++) labels[i] = i % cfg.num_classes;
    be->upload(ds_model_input(m), x, count * sizeof *x);
    ds_sgd sgd = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 0, .bn_bias_decay = 1};
    if (train && ds_model_defer_loss(m, 1)) return 1;
    int last = -1;   /* the step whose loss is not read yet */
    double t0 = ds_now();
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            be->sync();
            t0 = ds_now();
        }
        if (train) {
            ds_model_zero_reduction(m);
            if (!ds_model_forward(m, batch, 1)) return 1;
            ds_model_backward(m, labels, batch, 1.0f / batch, 0);
            ds_model_step(m, &sgd, 1);
            int now = ds_model_end_step(m);
            if (now < 0 || (last >= 0 && read_loss(m, last))) return 1;
            last = now;
        } else if (!ds_model_forward(m, batch, 0)) {
            return 1;
        }
    }
    if (last >= 0 && read_loss(m, last)) return 1;
    be->sync();
    double dt = ds_now() - t0;
    printf("%s %d %d %s %.2f\n", arch, size, batch, mode, steps * batch / dt);
    ds_model_free(m);
    free(x);
    free(labels);
    return 0;
}

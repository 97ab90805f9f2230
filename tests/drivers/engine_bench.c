/* engine_bench: images/s of the engine on random data, for bench/engine_bench.sh.
 *
 *   engine_bench ARCH SIZE BATCH train|infer STEPS
 *
 * Prints one line "ARCH SIZE BATCH MODE images/s" after a warm-up step; the caller reads
 * peak memory (VmHWM) from /proc itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"
#include "model.h"

int main(int argc, char **argv)
{
    ds_log_init("engine_bench");
    if (argc != 6) {
        fprintf(stderr, "usage: engine_bench ARCH SIZE BATCH train|infer STEPS\n");
        return 2;
    }
    int size = atoi(argv[2]), batch = atoi(argv[3]), train = !strcmp(argv[4], "train"), steps = atoi(argv[5]);
    const ds_backend *be = &ds_backend_cpu;
    ds_model_config cfg = {.arch = argv[1], .num_classes = argv[1][6] == '2' ? 10 : 1000,
                           .max_batch = batch, .height = size, .width = size, .training = train};
    ds_model *m = ds_model_create(be, &cfg);
    if (!m) return 1;
    ds_model_init(m, 1);
    size_t count = (size_t)batch * size * size * 3;
    float *x = malloc(count * sizeof *x);
    int32_t *labels = malloc((size_t)batch * sizeof *labels);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < batch; i++) labels[i] = i % cfg.num_classes;
    be->upload(ds_model_input(m), x, count * sizeof *x);
    ds_sgd sgd = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 0};
    double t0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) t0 = ds_now();
        if (train) {
            ds_model_zero_reduction(m);
            if (!ds_model_forward(m, batch, 1)) return 1;
            ds_model_backward(m, labels, batch, 1.0f / batch, 0);
            ds_model_step(m, &sgd, 1);
        } else if (!ds_model_forward(m, batch, 0)) {
            return 1;
        }
        be->sync();
    }
    double dt = ds_now() - t0;
    printf("%s %d %d %s %.2f\n", argv[1], size, batch, argv[4], steps * batch / dt);
    ds_model_free(m);
    free(x);
    free(labels);
    return 0;
}

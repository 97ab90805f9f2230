/* What the emulator's own tests share: PASS/FAIL lines in the suite's format, a check of a
 * CUDA runtime call that ends the test on an error, and a launch through the emulator (the
 * tests call emu::launch_kernel directly: they are not compiled by nvcc). */
#ifndef EMU_TEST_H
#define EMU_TEST_H

#include <cstdio>
#include <cstdlib>
#include <string>

static int failures = 0;

static bool report(const char *name, bool ok, const std::string &detail = "")
{
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, ok || detail.empty() ? "" : ": ", ok ? "" : detail.c_str());
    fflush(stdout);
    if (!ok) failures++;
    return ok;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::emu::launch_kernel(#kernel, grid, block, shmem, stream, [](auto... a_) { kernel(a_...); }, __VA_ARGS__)

#endif

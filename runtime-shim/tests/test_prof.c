/* Tests of the profiling runtime (klaraptor_prof.c) without a GPU. Driven by
 * tests/runtime_shim.rs, which compiles this file with the shim (klaraptor_rt.c,
 * klaraptor_prof.c) and tests/fake_cudart.c, and runs it as
 *
 *   test_prof <n> [<n> ...]
 *
 * under the KLARAPTOR_PROFILE_* / KLARAPTOR_COLLECTOR / KLARAPTOR_PROGRESS settings the
 * caller chooses: for each n, one launch of the 1-D kernel `vadd` (grid n/block) as the
 * instrumented program makes it (klaraptor_select, then the launch entry point, which the
 * profiling variant wraps). The launch entry point the wrapper reaches is faked here: it
 * counts launches per block size and fails (cudaErrorInvalidConfiguration, 9) for blocks of
 * 96 threads, a shape the shim accepts but "the GPU" refuses. Prints the program's own
 * launches and the counts.
 *
 * fake_collector.c (built as a shared library by the caller) stands in for the CUPTI
 * collector at its C interface: it launches each shape once and reports progress.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klaraptor.h"

int __wrap___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                              uint64_t block_xy, uint32_t block_z, void **args, size_t shmem,
                              void *stream);
int __real___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                              uint64_t block_xy, uint32_t block_z, void **args, size_t shmem,
                              void *stream);

extern int fake_cudart_last_error;

static int g_launches[2049];

int __real___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                              uint64_t block_xy, uint32_t block_z, void **args, size_t shmem,
                              void *stream) {
  (void)kernel;
  (void)grid_xy;
  (void)grid_z;
  (void)args;
  (void)shmem;
  (void)stream;
  uint64_t threads = (block_xy & 0xffffffffu) * (block_xy >> 32) * block_z;
  if (threads <= 2048) g_launches[threads]++;
  if (threads == 96) {
    fake_cudart_last_error = 9;
    return 9;
  }
  return 0;
}

static int grid_1d(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  if (d[0] <= 0) return 1;
  g[0] = (uint32_t)((d[0] + b[0] - 1) / b[0]);
  g[1] = g[2] = 1;
  return 0;
}

static const char *const n_names[] = {"n"};
static const klaraptor_kernel k_vadd = {
    KLARAPTOR_ABI_VERSION, "_Z4vaddPfi", "vadd", 1, n_names, 1, grid_1d, NULL, -1, -1, NULL,
    NULL, NULL};

__attribute__((constructor)) static void register_kernels(void) { klaraptor_register(&k_vadd); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_prof <n> [<n> ...]\n");
    return 2;
  }
  for (int a = 1; a < argc; a++) {
    int64_t n = strtoll(argv[a], NULL, 10);
    uint32_t block = 256;
    uint64_t grid_xy = (uint64_t)((n + block - 1) / block) | (1ull << 32);
    uint32_t grid_z = 1;
    uint64_t block_xy = block | (1ull << 32);
    uint32_t block_z = 1;
    klaraptor_select(k_vadd.id, 1, &n, &grid_xy, &grid_z, &block_xy, &block_z);
    int rc = __wrap___cudaLaunchKernel((void *)&k_vadd, grid_xy, grid_z, block_xy, block_z, NULL,
                                       0, NULL);
    printf("vadd n=%" PRId64 " block=%" PRIu64 " rc=%d\n", n, block_xy & 0xffffffffu, rc);
  }
  printf("launches:");
  for (int t = 0; t <= 2048; t++)
    if (g_launches[t]) printf(" %d=%d", t, g_launches[t]);
  printf("\n");
  return 0;
}

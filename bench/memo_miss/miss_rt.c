/* A memo miss through the whole runtime: klaraptor_select (runtime-shim/src/klaraptor_rt.c,
 * built with -DKLARAPTOR_NO_CUDART and device hooks that describe an NVIDIA H200) for a
 * kernel descriptor of the matmul sample's mm, with the generated rational program of mm
 * linked in (it registers itself with the runtime). Each size is decided once (a miss: memo
 * lookup, device, every candidate evaluated, grid, memo insertion), then asked again (a hit).
 *
 *   miss_rt N...     prints "miss <N> <ns> <bx> <by> <bz>" per size, then "hit <N> <ns>"
 *
 * Used by bench/memo_miss/run.sh.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "klaraptor.h"
#include "klaraptor_internal.h"

static int current(int *o) {
  *o = 0;
  return 0;
}

/* The H200 as the driver describes it (model/devices/nvidia-h200.toml). */
static int query(int ordinal, klaraptor_device *d, char *err, size_t n) {
  (void)err;
  (void)n;
  memset(d, 0, sizeof *d);
  d->ordinal = ordinal;
  strcpy(d->name, "NVIDIA H200");
  d->sm_count = 132;
  d->warp_size = 32;
  d->max_threads_per_block = 1024;
  d->max_block_dim[0] = d->max_block_dim[1] = 1024;
  d->max_block_dim[2] = 64;
  d->max_grid_dim[0] = 2147483647;
  d->max_grid_dim[1] = d->max_grid_dim[2] = 65535;
  d->max_threads_per_sm = 2048;
  d->max_blocks_per_sm = 32;
  d->regs_per_sm = 65536;
  d->regs_per_block = 65536;
  d->smem_per_block = 49152;
  d->smem_per_block_optin = 232448;
  d->smem_per_sm = 233472;
  d->cc_major = 9;
  d->cc_minor = 0;
  return 0;
}

/* mm's descriptor as klaraptor-cc generates it for `#pragma klaraptor kernel(mm) data(N=n)
 * dim(2)`: grid ceil(N, bx) x ceil(N, by), no constraints, 32 registers. */
static int grid(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  int64_t x = (d[0] + b[0] - 1) / b[0], y = (d[0] + b[1] - 1) / b[1];
  if (d[0] < 1 || x > 2147483647 || y > 2147483647) return 1;
  g[0] = (uint32_t)x;
  g[1] = (uint32_t)y;
  g[2] = 1;
  return 0;
}
static const char *const names[] = {"N"};
static const klaraptor_kernel mm = {KLARAPTOR_ABI_VERSION, "_Z2mmPKfS0_Pfi", "mm", 1, names,
                                    2, grid, NULL, 32, 0, NULL, NULL, NULL};

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s N...\n", argv[0]);
    return 2;
  }
  klaraptor__set_device_query(current, query);
  klaraptor_register(&mm);
  int n = argc - 1;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < n; i++) {
      int64_t data[1] = {strtoll(argv[1 + i], NULL, 10)};
      /* The program's own launch: 16x16 blocks. */
      uint64_t gxy = 1, bxy = 16 | ((uint64_t)16 << 32);
      uint32_t gz = 1, bz = 1;
      size_t before = klaraptor__memo_size();
      double t0 = now_ns();
      klaraptor_select(mm.id, 1, data, &gxy, &gz, &bxy, &bz);
      double t1 = now_ns();
      size_t after = klaraptor__memo_size();
      if (pass == 0) {
        if (after != before + 1) {
          fprintf(stderr, "miss_rt: N=%lld was not a new memo entry (%zu -> %zu)\n",
                  (long long)data[0], before, after);
          return 1;
        }
        printf("miss %lld %.0f %u %u %u\n", (long long)data[0], t1 - t0, (uint32_t)bxy,
               (uint32_t)(bxy >> 32), bz);
      } else {
        printf("hit %lld %.0f\n", (long long)data[0], t1 - t0);
      }
    }
  }
  return 0;
}

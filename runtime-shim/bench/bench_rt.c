/* Cost of a memo hit of klaraptor_launch_begin: the call every instrumented launch makes once
 * its (kernel, data, device) has been decided (settled, when the runtime refined it; a settled
 * hit and a plain one take the same path, one acquire load apart). Built with -DKLARAPTOR_NO_CUDART and a fake
 * "current device" hook that returns 0 at once, so the figure is the shim's own cost; in a
 * real program add the cost of cudaGetDevice (see README.md). Run with run.sh.
 * `bench_rt <calls> cudart` uses the real device hooks instead (build the shim without
 * -DKLARAPTOR_NO_CUDART, compile this file with -DBENCH_CUDART and link the CUDA runtime;
 * needs a GPU): the figure then includes cudaGetDevice, with a context current in each
 * thread as in a program that has allocated memory. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "klaraptor.h"
#include "klaraptor_internal.h"

static int cur(int *o) {
  *o = 0;
  return 0;
}
static int query(int ordinal, klaraptor_device *d, char *err, size_t n) {
  (void)err;
  (void)n;
  memset(d, 0, sizeof *d);
  d->ordinal = ordinal;
  strcpy(d->name, "NVIDIA H200");
  d->warp_size = 32;
  d->max_threads_per_block = 1024;
  d->max_block_dim[0] = d->max_block_dim[1] = 1024;
  d->max_block_dim[2] = 64;
  d->max_grid_dim[0] = 2147483647;
  d->max_grid_dim[1] = d->max_grid_dim[2] = 65535;
  d->regs_per_block = 65536;
  d->smem_per_block = 49152;
  return 0;
}
static int grid(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  g[0] = (uint32_t)((d[0] + b[0] - 1) / b[0]);
  g[1] = (uint32_t)((d[1] + b[1] - 1) / b[1]);
  g[2] = 1;
  return 0;
}
static int sel(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)d;
  (void)dev;
  b[0] = 32;
  b[1] = 4;
  b[2] = 1;
  return 0;
}
static const char *const names[] = {"m", "n", "k"};
static const klaraptor_kernel mm = {KLARAPTOR_ABI_VERSION, "_Z2mmPKfS0_Pfiii", "mm", 3, names,
                                    2, grid, NULL, 32, 0, sel, "NVIDIA H200", NULL};

#define KEYS 16
static int64_t g_data[KEYS][3];
static volatile uint64_t g_sink;
static int g_real;

#ifdef BENCH_CUDART
extern int cudaFree(void *); /* as a program would have: a context current in each thread */
#define CONTEXT() (g_real ? (void)cudaFree(NULL) : (void)0)
#else
#define CONTEXT() ((void)0)
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns per call over `iters` calls cycling through `keys` decided keys. */
static double loop(long iters, int keys) {
  uint64_t sink = 0;
  double t0 = now();
  for (long i = 0; i < iters; i++) {
    uint64_t gxy = 1, bxy = 1;
    uint32_t gz = 1, bz = 1;
    sink += klaraptor_launch_begin(mm.id, 3, g_data[i % keys], &gxy, &gz, &bxy, &bz, 0, NULL);
    sink += gxy + bxy;
  }
  double t1 = now();
  g_sink += sink;
  return (t1 - t0) / (double)iters;
}

typedef struct targ {
  long iters;
  int keys;
  double ns;
} targ;
static pthread_barrier_t g_bar;
static void *thread_main(void *p) {
  targ *a = p;
  CONTEXT();
  pthread_barrier_wait(&g_bar);
  a->ns = loop(a->iters, a->keys);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Runs `reps` rounds; per round, the slowest thread's ns/call. Prints best and median. */
static void measure(const char *label, int nthreads, long iters, int keys, int reps) {
  double r[16];
  for (int k = 0; k < reps; k++) {
    pthread_t th[8];
    targ a[8];
    pthread_barrier_init(&g_bar, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
      a[i].iters = iters;
      a[i].keys = keys;
      pthread_create(&th[i], NULL, thread_main, &a[i]);
    }
    double worst = 0;
    for (int i = 0; i < nthreads; i++) {
      pthread_join(th[i], NULL);
      if (a[i].ns > worst) worst = a[i].ns;
    }
    pthread_barrier_destroy(&g_bar);
    r[k] = worst;
  }
  qsort(r, (size_t)reps, sizeof r[0], cmp_double);
  printf("  %-22s best %5.1f ns/call, median %5.1f ns/call\n", label, r[0], r[reps / 2]);
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000000;
  /* "cudart": the default device hooks (a build linked with the CUDA runtime, on a GPU) */
  int real = argc > 2 && strcmp(argv[2], "cudart") == 0;
  g_real = real;
  if (!real) klaraptor__set_device_query(cur, query);
  CONTEXT();
  klaraptor_register(&mm);
  for (int k = 0; k < KEYS; k++) {
    g_data[k][0] = 1024 + 64 * k;
    g_data[k][1] = 2048;
    g_data[k][2] = 512;
    uint64_t gxy = 1, bxy = 1;
    uint32_t gz = 1, bz = 1;
    klaraptor_select(mm.id, 3, g_data[k], &gxy, &gz, &bxy, &bz); /* decide: memo miss */
  }
  printf("klaraptor_launch_begin memo hit: kernel with 3 data parameters, %ld calls per thread "
         "per round, 7 rounds; with 2 threads, the slower thread's time per call\n",
         iters);
  measure("1 thread,  1 key:", 1, iters, 1, 7);
  measure("1 thread,  16 keys:", 1, iters, KEYS, 7);
  measure("2 threads, 1 key:", 2, iters, 1, 7);
  measure("2 threads, 16 keys:", 2, iters, KEYS, 7);
  printf("memo entries: %zu (%s device hooks)\n", klaraptor__memo_size(),
         real ? "CUDA runtime" : "fake");
  return g_sink == 42; /* keep the work */
}

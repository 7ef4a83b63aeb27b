/* Tests of the klaraptor runtime shim without a GPU. Driven by tests/runtime_shim.rs, which
 * compiles this file with the shim and tests/fake_cudart.c and runs it as
 *
 *   test_rt unit      in-process tests (they set the environment themselves and reset the
 *                     shim between cases); prints "ok <case>" per case, exits nonzero on
 *                     the first failure
 *   test_rt launch    a fixed sequence of launches under the caller's KLARAPTOR_* settings;
 *                     prints the dims each launch ends up with (the caller checks stdout,
 *                     stderr and the log)
 *   test_rt threads   concurrent launches from 8 threads; checks every result against a
 *                     single-threaded reference, the memo size and the number of log lines
 *   test_rt cudart    the default device query, through the fake CUDA runtime
 *   test_rt env_in_main   the variables set (or unset) by main, after the warm-up at
 *                     registration saw the process's own, then the launches of `launch`
 *   test_rt no_launch registration only: the warm-up must leave no trace
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "klaraptor.h"
#include "klaraptor_internal.h"

extern int fake_cudart_device;
extern int fake_cudart_fail_attr;
extern int fake_cudart_last_error;

/* ---------------------------------------------------------------------------------------- */
/* Fake devices (through the hooks)                                                         */

static int g_ordinal = 0;    /* the "current" device; -1: no device */
static int g_queries[4];     /* how often each device was described */
static int g_query_fail = 0; /* describe fails */

static int fake_current(int *ordinal) {
  if (g_ordinal < 0) return 100;
  *ordinal = g_ordinal;
  return 0;
}

static void h200(klaraptor_device *d) {
  memset(d, 0, sizeof *d);
  strcpy(d->name, "NVIDIA H200");
  d->sm_count = 132;
  d->warp_size = 32;
  d->max_threads_per_block = 1024;
  d->max_block_dim[0] = 1024;
  d->max_block_dim[1] = 1024;
  d->max_block_dim[2] = 64;
  d->max_grid_dim[0] = 2147483647;
  d->max_grid_dim[1] = 65535;
  d->max_grid_dim[2] = 65535;
  d->max_threads_per_sm = 2048;
  d->max_blocks_per_sm = 32;
  d->regs_per_sm = 65536;
  d->regs_per_block = 65536;
  d->smem_per_block = 49152;
  d->smem_per_block_optin = 232448;
  d->smem_per_sm = 233472;
  d->cc_major = 9;
  d->cc_minor = 0;
}

static int fake_query(int ordinal, klaraptor_device *d, char *err, size_t errlen) {
  if (ordinal >= 0 && ordinal < 4) g_queries[ordinal]++;
  if (g_query_fail || ordinal < 0 || ordinal > 1) {
    snprintf(err, errlen, "fake query refused device %d", ordinal);
    return -1;
  }
  h200(d);
  if (ordinal == 1) {
    strcpy(d->name, "NVIDIA A100-SXM4-80GB");
    d->sm_count = 108;
    d->max_threads_per_block = 512; /* not an A100: a smaller limit to tell them apart */
  }
  d->ordinal = ordinal;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int grid_2d(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  if (d[0] <= 0) return 1;
  int64_t gx = cdiv(d[0], b[0]), gy = cdiv(d[0], b[1]);
  if (gx > UINT32_MAX || gy > UINT32_MAX) return 1;
  g[0] = (uint32_t)gx;
  g[1] = (uint32_t)gy;
  g[2] = 1;
  return 0;
}

static int grid_1d(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  if (d[0] <= 0) return 1;
  int64_t gx = cdiv(d[0], b[0]);
  if (gx > UINT32_MAX) return 1;
  g[0] = (uint32_t)gx;
  g[1] = g[2] = 1;
  return 0;
}

static int grid_3d(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  if (d[0] <= 0 || d[1] <= 0) return 1;
  g[0] = (uint32_t)cdiv(d[0], b[0]);
  g[1] = (uint32_t)cdiv(d[1], b[1]);
  g[2] = (uint32_t)cdiv(4, b[2]);
  return 0;
}

/* mm: 2-D, at least 64 threads per block; the model picks 32x4 for big n, 16x16 for
 * middling n and 8x1 (a shape its constraints refuse) for tiny n. */
static int mm_allowed(const int64_t *d, const uint32_t b[3]) {
  (void)d;
  return b[0] * b[1] * b[2] >= 64;
}
static int mm_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  if (strcmp(dev->name, "NVIDIA H200") != 0) return 9;
  if (d[0] < 0) return 3;
  b[0] = d[0] >= 1024 ? 32 : d[0] >= 64 ? 16 : 8;
  b[1] = d[0] >= 1024 ? 4 : d[0] >= 64 ? 16 : 1;
  b[2] = 1;
  return 0;
}
static const char *const n_names[] = {"n"};
static const klaraptor_kernel k_mm = {KLARAPTOR_ABI_VERSION, "_Z2mmPKfS0_Pfi", "mm", 1, n_names,
                                      2, grid_2d, mm_allowed, 32, 0, mm_select, "NVIDIA H200", NULL};

static int saxpy_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)d;
  (void)dev;
  b[0] = 512;
  b[1] = b[2] = 1;
  return 0;
}
static const klaraptor_kernel k_saxpy = {
    KLARAPTOR_ABI_VERSION, "_Z5saxpyfPKfPfi", "saxpy", 1, n_names, 1, grid_1d, NULL, -1, -1,
    saxpy_select, "NVIDIA H200", NULL};

static const char *const nm_names[] = {"n", "m"};
static const klaraptor_kernel k_nomodel = {KLARAPTOR_ABI_VERSION,
                                           "_Z7nomodelPfii",
                                           "nomodel",
                                           2,
                                           nm_names,
                                           3,
                                           grid_3d,
                                           NULL,
                                           255,
                                           50000,
                                           NULL,
                                           NULL, NULL};

static int other_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)d;
  (void)dev;
  b[0] = 128;
  b[1] = b[2] = 1;
  return 0;
}
static const klaraptor_kernel k_other = {
    KLARAPTOR_ABI_VERSION, "_Z5otherPfi", "other", 1, n_names, 1, grid_1d, NULL, -1, -1,
    other_select, "NVIDIA A100-SXM4-80GB", NULL};

static int big_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)dev;
  b[0] = d[0] > 0 ? 2048 : 1;
  b[1] = b[2] = 1;
  return d[0] > 0 ? 0 : 1;
}
static const klaraptor_kernel k_big = {
    KLARAPTOR_ABI_VERSION, "_Z3bigPfi", "big", 1, n_names, 1, grid_1d, NULL, -1, -1,
    big_select, "NVIDIA H200", NULL};

static const char *const tmpl_names[] = {"len", NULL};
static const klaraptor_kernel k_tmpl = {
    KLARAPTOR_ABI_VERSION, "_Z4tmplIfLi2EEvPT_ii", "ns::tmpl<float, 2>", 2, tmpl_names, 1,
    grid_1d, NULL, -1, -1, NULL, NULL, NULL};

/* A second descriptor with mm's id and the same annotation (another object's): ignored. One
 * with another annotation would make mm keep the program's own launches (tests/instrument.rs:
 * conflicting_annotations_in_two_objects_keep_the_programs_launch). */
static const klaraptor_kernel k_mm_dup = {
    KLARAPTOR_ABI_VERSION, "_Z2mmPKfS0_Pfi", "mm_duplicate", 1, n_names, 2, grid_2d, mm_allowed,
    32, 0, saxpy_select, "NVIDIA H200", NULL};
/* A descriptor from another ABI: refused. */
static const klaraptor_kernel k_abi2 = {
    3, "_Z4abi2v", "abi2", 1, n_names, 1, grid_1d, NULL, -1, -1, saxpy_select, "NVIDIA H200", NULL};

/* A rational program registered before main, as generated code registers it: the runtime
 * runs its choice and its profiled best once then, on a made-up device of its GPU's kind
 * (warm_model), and the scenario model_warm shows what they were given. */
static int g_warm_select, g_warm_pb, g_warm_sms;
static char g_warm_device[256];
static int warm_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                       double *predicted_us) {
  (void)data;
  g_warm_select++;
  g_warm_sms = dev ? dev->sm_count : -1;
  snprintf(g_warm_device, sizeof g_warm_device, "%s", dev ? dev->name : "(none)");
  block[0] = 128;
  block[1] = block[2] = 1;
  if (predicted_us) *predicted_us = 1.0;
  return 0;
}
static int warm_profiled_best(const int64_t *data, const klaraptor_device *dev,
                              uint32_t block[3]) {
  (void)data;
  (void)dev;
  g_warm_pb++;
  block[0] = 256;
  block[1] = block[2] = 1;
  return 0;
}
static const klaraptor_model m_warm = {KLARAPTOR_MODEL_ABI_VERSION,
                                       "_Z4warmv",
                                       "NVIDIA H200",
                                       warm_select,
                                       "warm.nvidia-h200.c",
                                       NULL,
                                       warm_profiled_best,
                                       "0000000000000000",
                                       132,
                                       NULL};

__attribute__((constructor)) static void register_kernels(void) {
  /* As generated code does: before main. */
  klaraptor_register(&k_mm);
  klaraptor_register(&k_saxpy);
  klaraptor_register_model(&m_warm);
}

static int scenario_model_warm(void) {
  printf("model_warm select=%d profiled_best=%d device=%s sms=%d\n", g_warm_select, g_warm_pb,
         g_warm_device, g_warm_sms);
  return 0;
}

static void register_rest(void) {
  klaraptor_register(&k_nomodel);
  klaraptor_register(&k_other);
  klaraptor_register(&k_big);
  klaraptor_register(&k_tmpl);
  klaraptor_register(&k_mm_dup);
}

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */

typedef struct dims {
  uint32_t g[3], b[3];
} dims;

static dims launch(const char *id, int32_t n, const int64_t *data, dims in) {
  uint64_t gxy = in.g[0] | ((uint64_t)in.g[1] << 32), bxy = in.b[0] | ((uint64_t)in.b[1] << 32);
  uint32_t gz = in.g[2], bz = in.b[2];
  klaraptor_select(id, n, data, &gxy, &gz, &bxy, &bz);
  dims out = {{(uint32_t)gxy, (uint32_t)(gxy >> 32), gz}, {(uint32_t)bxy, (uint32_t)(bxy >> 32), bz}};
  return out;
}

static dims D(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, uint32_t bz) {
  dims d = {{gx, gy, gz}, {bx, by, bz}};
  return d;
}

static const char *fmt(dims d) {
  static char buf[8][96];
  static int i;
  char *b = buf[i++ % 8];
  snprintf(b, 96, "block=%ux%ux%u grid=%ux%ux%u", d.b[0], d.b[1], d.b[2], d.g[0], d.g[1], d.g[2]);
  return b;
}

static int g_failures;
static const char *g_case = "";

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "FAIL %s: %s:%d: %s\n", g_case, __FILE__, __LINE__, #cond);              \
      g_failures++;                                                                           \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

#define CHECK_STR(a, b)                                                                       \
  do {                                                                                        \
    const char *a_ = (a), *b_ = (b);                                                          \
    if (strcmp(a_, b_) != 0) {                                                                \
      fprintf(stderr, "FAIL %s: %s:%d:\n  got:      %s\n  expected: %s\n", g_case, __FILE__,  \
              __LINE__, a_, b_);                                                              \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static char g_logpath[256];

/* Resets the shim and sets the environment for the next case. NULL unsets. */
static void setup(const char *name, const char *force, const char *disable, int log) {
  g_case = name;
  klaraptor__reset_for_tests();
  if (force)
    setenv("KLARAPTOR_FORCE", force, 1);
  else
    unsetenv("KLARAPTOR_FORCE");
  if (disable)
    setenv("KLARAPTOR_DISABLE", disable, 1);
  else
    unsetenv("KLARAPTOR_DISABLE");
  unlink(g_logpath);
  if (log) {
    setenv("KLARAPTOR_LOG", g_logpath, 1);
  } else {
    unsetenv("KLARAPTOR_LOG");
  }
  g_ordinal = 0;
  g_query_fail = 0;
  memset(g_queries, 0, sizeof g_queries);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    char *e = malloc(1);
    *e = 0;
    return e;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t r = fread(s, 1, (size_t)n, f);
  s[r] = 0;
  fclose(f);
  /* Decision lines that changed the dims end with " program_block=AxBxC"; the expected
   * texts here leave it out (tests/runtime_shim.rs checks it). */
  char *w = s;
  for (char *p = s; *p;) {
    if (strncmp(p, " program_block=", 15) == 0) {
      while (*p && *p != '\n') p++;
      continue;
    }
    *w++ = *p++;
  }
  *w = 0;
  return s;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void ok(void) { printf("ok %s\n", g_case); }

/* ---------------------------------------------------------------------------------------- */
/* Unit cases                                                                               */

static const int64_t N2048[] = {2048}, N100[] = {100}, N7[] = {7}, N1M[] = {1000000},
                     N0[] = {0};
static const char *MM = "_Z2mmPKfS0_Pfi";
static const char *SAXPY = "_Z5saxpyfPKfPfi";

static void t_model_and_grid(void) {
  setup("model_and_grid", NULL, NULL, 0);
  dims prog = D(128, 128, 1, 16, 16, 1);
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=32x4x1 grid=64x512x1");
  CHECK_STR(fmt(launch(MM, 1, N100, prog)), "block=16x16x1 grid=7x7x1");
  CHECK_STR(fmt(launch(SAXPY, 1, N1M, D(3907, 1, 1, 256, 1, 1))), "block=512x1x1 grid=1954x1x1");
  /* the model's 8x1 violates mm's constraints: the program's dims stay */
  CHECK_STR(fmt(launch(MM, 1, N7, prog)), "block=16x16x1 grid=128x128x1");
  /* no model at all, and a model for another device: the program's dims stay */
  int64_t nm[] = {100, 50};
  CHECK_STR(fmt(launch("_Z7nomodelPfii", 2, nm, D(4, 4, 4, 32, 16, 1))),
            "block=32x16x1 grid=4x4x4");
  CHECK_STR(fmt(launch("_Z5otherPfi", 1, N100, D(1, 1, 1, 100, 1, 1))),
            "block=100x1x1 grid=1x1x1");
  /* 2048 threads from the model: refused; the model failing: refused */
  CHECK_STR(fmt(launch("_Z3bigPfi", 1, N100, D(1, 1, 1, 100, 1, 1))), "block=100x1x1 grid=1x1x1");
  CHECK_STR(fmt(launch("_Z3bigPfi", 1, N0, D(1, 1, 1, 100, 1, 1))), "block=100x1x1 grid=1x1x1");
  ok();
}

static void t_registry(void) {
  setup("registry", NULL, NULL, 1);
  /* mm_dup was ignored: mm's own model decides, and logs say "mm" */
  CHECK_STR(fmt(launch(MM, 1, N2048, D(1, 1, 1, 1, 1, 1))), "block=32x4x1 grid=64x512x1");
  /* the same id through another pointer (another translation unit) */
  char other_ptr[32];
  strcpy(other_ptr, MM);
  CHECK_STR(fmt(launch(other_ptr, 1, N2048, D(1, 1, 1, 1, 1, 1))), "block=32x4x1 grid=64x512x1");
  /* the refused ABI and an unknown id: unchanged; n_data mismatch: unchanged */
  CHECK_STR(fmt(launch("_Z4abi2v", 1, N100, D(9, 9, 9, 9, 9, 9))), "block=9x9x9 grid=9x9x9");
  CHECK_STR(fmt(launch("_Z4abi2v", 1, N100, D(9, 9, 9, 9, 9, 9))), "block=9x9x9 grid=9x9x9");
  int64_t two[] = {2048, 1};
  CHECK_STR(fmt(launch(MM, 2, two, D(8, 8, 1, 8, 8, 1))), "block=8x8x1 grid=8x8x1");
  CHECK_STR(fmt(launch(MM, 2, two, D(8, 8, 1, 8, 8, 1))), "block=8x8x1 grid=8x8x1");
  CHECK_STR(fmt(launch(MM, 0, NULL, D(8, 8, 1, 8, 8, 1))), "block=8x8x1 grid=8x8x1");
  /* null arguments are ignored */
  klaraptor_select(MM, 1, N2048, NULL, NULL, NULL, NULL);
  klaraptor_select(NULL, 1, N2048, NULL, NULL, NULL, NULL);
  klaraptor_register(NULL);
  char *log = slurp(g_logpath);
  CHECK_STR(log, "klaraptor: mm n=2048 block=32x4x1 grid=64x512x1 source=model device=0:NVIDIA H200\n"
                 "klaraptor: unknown kernel id _Z4abi2v: the launch keeps its dims\n"
                 "klaraptor: mm: the launch passes 2 data values, the descriptor declares 1: the "
                 "launch keeps its dims\n");
  free(log);
  CHECK(klaraptor__memo_size() == 1);
  ok();
}

static void t_force_parse(void) {
  setup("force_parse", NULL, NULL, 0);
  unsigned b[3];
  int found, bad;
  CHECK(klaraptor__parse_force("mm:32x4x2", "mm", b, &found, &bad) == 1);
  CHECK(found && b[0] == 32 && b[1] == 4 && b[2] == 2 && bad == 0);
  CHECK(klaraptor__parse_force("mm:32x4", "mm", b, &found, &bad) == 1);
  CHECK(found && b[0] == 32 && b[1] == 4 && b[2] == 1);
  CHECK(klaraptor__parse_force("mm:256", "mm", b, &found, &bad) == 1);
  CHECK(found && b[0] == 256 && b[1] == 1 && b[2] == 1);
  CHECK(klaraptor__parse_force(" saxpy : 128 , mm:64X2 ", "mm", b, &found, &bad) == 2);
  CHECK(found && b[0] == 64 && b[1] == 2 && bad == 0);
  CHECK(klaraptor__parse_force("mm:8,mm:16x16", "mm", b, &found, &bad) == 2); /* last wins */
  CHECK(found && b[0] == 16 && b[1] == 16);
  CHECK(klaraptor__parse_force("ns::tmpl<float, 2>:32x2,k:1", "ns::tmpl<float, 2>", b, &found,
                               &bad) == 2);
  CHECK(found && b[0] == 32 && b[1] == 2 && b[2] == 1 && bad == 0);
  CHECK(klaraptor__parse_force("mm:32", "saxpy", b, &found, &bad) == 1 && !found);
  /* malformed entries are skipped, the others kept */
  const char *bads[] = {"mm",      "mm:",      ":32",     "mm:0",       "mm:32x0",  "mm:32x",
                        "mm:x32",  "mm:-32",   "mm:+32",  "mm:32x4x2x1", "mm:32y4",  "mm:3 2",
                        "mm:4294967328", "mm:2147483648", "mm:32x4,", ":"};
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    int good = klaraptor__parse_force(bads[i], "mm", b, &found, &bad);
    if (strcmp(bads[i], "mm:32x4,") == 0) {
      CHECK(good == 1 && found && bad == 0); /* a trailing comma is fine */
    } else if (good != 0 || found || bad != 1) {
      fprintf(stderr, "FAIL force_parse: \"%s\" good=%d found=%d bad=%d\n", bads[i], good,
              found, bad);
      exit(1);
    }
  }
  CHECK(klaraptor__parse_force("mm:2147483647", "mm", b, &found, &bad) == 1 && found &&
        b[0] == 2147483647u);
  CHECK(klaraptor__parse_force("bogus,mm:0,saxpy:64", "saxpy", b, &found, &bad) == 1 && found &&
        b[0] == 64 && bad == 2);
  CHECK(klaraptor__parse_force("", "mm", b, &found, &bad) == 0 && !found && bad == 0);
  ok();
}

static void t_force(void) {
  setup("force", "mm:30x7,_Z5saxpyfPKfPfi:128,ns::tmpl<float, 2>:64", NULL, 1);
  dims prog = D(128, 128, 1, 16, 16, 1);
  CHECK_STR(fmt(launch(MM, 1, N100, prog)), "block=30x7x1 grid=4x15x1");
  CHECK_STR(fmt(launch(SAXPY, 1, N1M, prog)), "block=128x1x1 grid=7813x1x1");
  int64_t td[] = {1000, 5};
  CHECK_STR(fmt(launch("_Z4tmplIfLi2EEvPT_ii", 2, td, prog)), "block=64x1x1 grid=16x1x1");
  /* forcing works for kernels without a model and on any device */
  g_ordinal = 1;
  CHECK_STR(fmt(launch(MM, 1, N100, prog)), "block=30x7x1 grid=4x15x1");
  char *log = slurp(g_logpath);
  CHECK_STR(log,
            "klaraptor: mm n=100 block=30x7x1 grid=4x15x1 source=forced device=0:NVIDIA H200\n"
            "klaraptor: saxpy n=1000000 block=128x1x1 grid=7813x1x1 source=forced device=0:NVIDIA "
            "H200\n"
            "klaraptor: ns::tmpl<float, 2> len=1000 d1=5 block=64x1x1 grid=16x1x1 source=forced "
            "device=0:NVIDIA H200\n"
            "klaraptor: mm n=100 block=30x7x1 grid=4x15x1 source=forced "
            "device=1:NVIDIA A100-SXM4-80GB\n");
  free(log);
  ok();
}

/* One forced shape, one launch: the resulting dims and log line. */
static void force_case(const char *force, const char *id, int32_t n, const int64_t *data,
                       const char *want_dims, const char *want_log) {
  setup(force, force, NULL, 1);
  dims prog = D(11, 12, 13, 1, 2, 3);
  CHECK_STR(fmt(launch(id, n, data, prog)), want_dims);
  char *log = slurp(g_logpath);
  CHECK_STR(log, want_log);
  free(log);
}

/* reduce: 1-D, one 64-byte slot of dynamic shared memory per thread besides 1024 bytes of
 * static shared memory; the model picks 1024 threads from n = 1000 (too much shared memory:
 * 66560 bytes), 256 below. */
static int reduce_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)dev;
  b[0] = d[0] >= 1000 ? 1024 : 256;
  b[1] = b[2] = 1;
  return 0;
}
static int64_t reduce_shmem(const int64_t *d, const uint32_t b[3]) {
  return d[0] < 0 ? -1 : (int64_t)b[0] * 64;
}
static const klaraptor_kernel k_reduce = {
    KLARAPTOR_ABI_VERSION, "_Z6reducePfi", "reduce", 1, n_names, 1, grid_1d, NULL, -1, 1024,
    reduce_select, "NVIDIA H200", reduce_shmem};
/* The same as a descriptor of version 1, which ends before shmem: the runtime never reads
 * the field. */
static const klaraptor_kernel k_reduce_v1 = {
    1, "_Z9reduce_v1Pfi", "reduce_v1", 1, n_names, 1, grid_1d, NULL, -1, 1024,
    reduce_select, "NVIDIA H200", reduce_shmem};

/* A launch through klaraptor_select_shmem: "<dims> shmem=<bytes>". */
static const char *launch_shmem(const char *id, int64_t n, dims in, uint64_t shmem) {
  uint64_t gxy = in.g[0] | ((uint64_t)in.g[1] << 32), bxy = in.b[0] | ((uint64_t)in.b[1] << 32);
  uint32_t gz = in.g[2], bz = in.b[2];
  klaraptor_select_shmem(id, 1, &n, &gxy, &gz, &bxy, &bz, &shmem);
  dims out = {{(uint32_t)gxy, (uint32_t)(gxy >> 32), gz}, {(uint32_t)bxy, (uint32_t)(bxy >> 32), bz}};
  static char buf[4][128];
  static int i;
  char *b = buf[i++ % 4];
  snprintf(b, 128, "%s shmem=%" PRIu64, fmt(out), shmem);
  return b;
}

static void t_shmem(void) {
  dims prog = D(8, 1, 1, 128, 1, 1);
  /* The model's 256 threads get 256 x 64 bytes, not the program's 128 x 64. */
  setup("shmem model", NULL, NULL, 1);
  klaraptor_register(&k_reduce);
  klaraptor_register(&k_reduce_v1);
  CHECK_STR(launch_shmem("_Z6reducePfi", 500, prog, 8192), "block=256x1x1 grid=2x1x1 shmem=16384");
  /* Memoized: the same amount on the fast path. */
  CHECK_STR(launch_shmem("_Z6reducePfi", 500, prog, 8192), "block=256x1x1 grid=2x1x1 shmem=16384");
  /* 1024 threads would need 65536 + 1024 bytes: the program's shape and amount. */
  CHECK_STR(launch_shmem("_Z6reducePfi", 5000, prog, 8192), "block=128x1x1 grid=8x1x1 shmem=8192");
  char *log = slurp(g_logpath);
  CHECK_STR(log, "klaraptor: reduce n=500 block=256x1x1 grid=2x1x1 source=model "
                 "device=0:NVIDIA H200\n"
                 "klaraptor: reduce n=5000 block=128x1x1 grid=8x1x1 source=fallback: model block "
                 "1024x1x1 rejected: it needs 66560 bytes of shared memory, the device has 49152 "
                 "per block device=0:NVIDIA H200\n");
  free(log);
  /* A formula that cannot be evaluated: the shape is refused. */
  CHECK_STR(launch_shmem("_Z6reducePfi", -1, prog, 8192), "block=128x1x1 grid=8x1x1 shmem=8192");
  /* Forced shapes are checked the same way: 512 threads fit, 768 (49152 + 1024) do not. */
  setup("shmem forced", "reduce:512", NULL, 0);
  klaraptor_register(&k_reduce);
  CHECK_STR(launch_shmem("_Z6reducePfi", 5000, prog, 8192), "block=512x1x1 grid=10x1x1 shmem=32768");
  setup("shmem forced over", "reduce:768", NULL, 1);
  klaraptor_register(&k_reduce);
  CHECK_STR(launch_shmem("_Z6reducePfi", 5000, prog, 8192), "block=128x1x1 grid=8x1x1 shmem=8192");
  log = slurp(g_logpath);
  CHECK(strstr(log, "forced block 768x1x1 rejected: it needs 50176 bytes of shared memory, the "
                    "device has 49152 per block") != NULL);
  free(log);
  /* Through klaraptor_select (the launch passes its own amount): the shape still fits. */
  setup("shmem select", NULL, NULL, 0);
  klaraptor_register(&k_reduce);
  CHECK_STR(fmt(launch("_Z6reducePfi", 1, (const int64_t[]){5000}, prog)), "block=128x1x1 grid=8x1x1");
  /* Version 1: no formula, the amount stays and the 1024-thread shape is taken. */
  setup("shmem v1", NULL, NULL, 0);
  klaraptor_register(&k_reduce_v1);
  CHECK_STR(launch_shmem("_Z9reduce_v1Pfi", 5000, prog, 8192),
            "block=1024x1x1 grid=5x1x1 shmem=8192");
  g_case = "shmem";
  ok();
}

static void t_limits(void) {
  const char *keep = "block=1x2x3 grid=11x12x13";
  int64_t nm[] = {100, 50}, big[] = {1000000};
  force_case("mm:2048", MM, 1, N100, keep,
             "klaraptor: mm n=100 block=1x2x3 grid=11x12x13 source=fallback: forced block "
             "2048x1x1 rejected: block x 2048 exceeds the device's limit of 1024 "
             "device=0:NVIDIA H200\n");
  force_case("mm:64x32", MM, 1, N100, keep,
             "klaraptor: mm n=100 block=1x2x3 grid=11x12x13 source=fallback: forced block "
             "64x32x1 rejected: 2048 threads per block exceed the device's limit of 1024 "
             "device=0:NVIDIA H200\n");
  force_case("nomodel:1x1x65", "_Z7nomodelPfii", 2, nm, keep,
             "klaraptor: nomodel n=100 m=50 block=1x2x3 grid=11x12x13 source=fallback: forced "
             "block 1x1x65 rejected: block z 65 exceeds the device's limit of 64 "
             "device=0:NVIDIA H200\n");
  force_case("saxpy:32x2", SAXPY, 1, N100, keep,
             "klaraptor: saxpy n=100 block=1x2x3 grid=11x12x13 source=fallback: forced block "
             "32x2x1 rejected: the kernel is 1-dimensional but block y is 2 "
             "device=0:NVIDIA H200\n");
  force_case("mm:16x16x2", MM, 1, N100, keep,
             "klaraptor: mm n=100 block=1x2x3 grid=11x12x13 source=fallback: forced block "
             "16x16x2 rejected: the kernel is 2-dimensional but block z is 2 "
             "device=0:NVIDIA H200\n");
  /* 255 registers: 256 threads fit (8192 per warp x 8 warps), 257 do not */
  force_case("nomodel:256", "_Z7nomodelPfii", 2, nm, keep,
             "klaraptor: nomodel n=100 m=50 block=1x2x3 grid=11x12x13 source=fallback: forced "
             "block 256x1x1 rejected: 50000 bytes of static shared memory exceed the device's "
             "49152 per block device=0:NVIDIA H200\n");
  force_case("nomodel:257", "_Z7nomodelPfii", 2, nm, keep,
             "klaraptor: nomodel n=100 m=50 block=1x2x3 grid=11x12x13 source=fallback: forced "
             "block 257x1x1 rejected: 255 registers per thread x 257 threads need 73728 "
             "registers, the device has 65536 per block device=0:NVIDIA H200\n");
  force_case("mm:32", MM, 1, N0, keep,
             "klaraptor: mm n=0 block=1x2x3 grid=11x12x13 source=fallback: forced block 32x1x1 "
             "rejected: the grid formula cannot be evaluated device=0:NVIDIA H200\n");
  force_case("mm:1", MM, 1, big, keep,
             "klaraptor: mm n=1000000 block=1x2x3 grid=11x12x13 source=fallback: forced block "
             "1x1x1 rejected: grid y 1000000 exceeds the device's limit of 65535 "
             "device=0:NVIDIA H200\n");
  force_case("saxpy:1", SAXPY, 1, big, "block=1x1x1 grid=1000000x1x1",
             "klaraptor: saxpy n=1000000 block=1x1x1 grid=1000000x1x1 source=forced "
             "device=0:NVIDIA H200\n");
  g_case = "limits";
  ok();
}

static void t_model_fallbacks(void) {
  setup("model_fallbacks", NULL, NULL, 1);
  dims prog = D(5, 5, 1, 16, 16, 1);
  launch(MM, 1, N7, prog);
  launch("_Z3bigPfi", 1, N100, prog);
  launch("_Z3bigPfi", 1, N0, prog);
  launch("_Z5otherPfi", 1, N100, prog);
  int64_t nm[] = {100, 50};
  launch("_Z7nomodelPfii", 2, nm, prog);
  g_ordinal = 1; /* mm's model is for the H200 */
  launch(MM, 1, N2048, prog);
  CHECK_STR(fmt(launch("_Z5otherPfi", 1, N100, prog)), "block=128x1x1 grid=1x1x1");
  g_ordinal = -1;
  launch(MM, 1, N2048, prog);
  g_ordinal = 3;
  launch(SAXPY, 1, N100, prog);
  char *log = slurp(g_logpath);
  CHECK_STR(log,
            "klaraptor: mm n=7 block=16x16x1 grid=5x5x1 source=fallback: model block 8x1x1 "
            "rejected: it violates the kernel's constraints device=0:NVIDIA H200\n"
            "klaraptor: big n=100 block=16x16x1 grid=5x5x1 source=fallback: model block 2048x1x1 "
            "rejected: block x 2048 exceeds the device's limit of 1024 device=0:NVIDIA H200\n"
            "klaraptor: big n=0 block=16x16x1 grid=5x5x1 source=fallback: the model failed "
            "(returned 1) device=0:NVIDIA H200\n"
            "klaraptor: other n=100 block=16x16x1 grid=5x5x1 source=fallback: no model for this "
            "device (the model is for NVIDIA A100-SXM4-80GB) device=0:NVIDIA H200\n"
            "klaraptor: nomodel n=100 m=50 block=16x16x1 grid=5x5x1 source=program "
            "device=0:NVIDIA H200\n"
            "klaraptor: mm n=2048 block=16x16x1 grid=5x5x1 source=fallback: no model for this "
            "device (the model is for NVIDIA H200) device=1:NVIDIA A100-SXM4-80GB\n"
            "klaraptor: other n=100 block=128x1x1 grid=1x1x1 source=model "
            "device=1:NVIDIA A100-SXM4-80GB\n"
            "klaraptor: mm n=2048 block=16x16x1 grid=5x5x1 source=fallback: no current device "
            "(error 100) device=-1:unknown\n"
            "klaraptor: saxpy n=100 block=16x16x1 grid=5x5x1 source=fallback: device query "
            "failed: fake query refused device 3 device=3:unknown\n");
  free(log);
  /* a device that cannot be described: asked again for each new key, not cached */
  setup("model_fallbacks_query", NULL, NULL, 1);
  g_query_fail = 1;
  launch(SAXPY, 1, N100, prog);
  launch(SAXPY, 1, N100, prog);
  g_query_fail = 0;
  CHECK_STR(fmt(launch(SAXPY, 1, N7, prog)), "block=512x1x1 grid=1x1x1");
  CHECK(g_queries[0] == 2);
  log = slurp(g_logpath);
  CHECK_STR(log, "klaraptor: saxpy n=100 block=16x16x1 grid=5x5x1 source=fallback: device query "
                 "failed: fake query refused device 0 device=0:unknown\n"
                 "klaraptor: saxpy n=7 block=512x1x1 grid=1x1x1 source=model "
                 "device=0:NVIDIA H200\n");
  free(log);
  g_case = "model_fallbacks";
  ok();
}

static void t_memo(void) {
  setup("memo", NULL, NULL, 1);
  dims prog = D(1, 1, 1, 1, 1, 1);
  for (int rep = 0; rep < 3; rep++) {
    CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=32x4x1 grid=64x512x1");
    CHECK_STR(fmt(launch(MM, 1, N100, prog)), "block=16x16x1 grid=7x7x1");
  }
  CHECK(klaraptor__memo_size() == 2);
  CHECK(g_queries[0] == 1);
  /* a kept decision keeps whatever dims each launch brings */
  CHECK_STR(fmt(launch(MM, 1, N7, D(1, 2, 3, 4, 5, 6))), "block=4x5x6 grid=1x2x3");
  CHECK_STR(fmt(launch(MM, 1, N7, D(6, 5, 4, 3, 2, 1))), "block=3x2x1 grid=6x5x4");
  /* the device is part of the key */
  g_ordinal = 1;
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=1x1x1 grid=1x1x1");
  g_ordinal = 0;
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=32x4x1 grid=64x512x1");
  CHECK(g_queries[0] == 1 && g_queries[1] == 1);
  CHECK(klaraptor__memo_size() == 4);
  /* growth: thousands of keys, all still found with the right answer, one line each */
  for (int64_t n = 1; n <= 5000; n++) {
    int64_t d[] = {n};
    dims r = launch(SAXPY, 1, d, prog);
    CHECK(r.b[0] == 512 && r.g[0] == (uint32_t)((n + 511) / 512));
  }
  for (int64_t n = 5000; n >= 1; n--) {
    int64_t d[] = {n};
    dims r = launch(SAXPY, 1, d, prog);
    CHECK(r.b[0] == 512 && r.g[0] == (uint32_t)((n + 511) / 512));
  }
  CHECK(klaraptor__memo_size() == 5004);
  char *log = slurp(g_logpath);
  CHECK(count_lines(log) == 5004);
  free(log);
  ok();
}

static void t_disable(void) {
  setup("disable", "mm:64", "1", 1);
  dims prog = D(3, 3, 3, 3, 3, 3);
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=3x3x3 grid=3x3x3");
  CHECK_STR(fmt(launch(SAXPY, 1, N100, prog)), "block=3x3x3 grid=3x3x3");
  CHECK(klaraptor__memo_size() == 0 && g_queries[0] == 0);
  char *log = slurp(g_logpath);
  CHECK_STR(log, "klaraptor: KLARAPTOR_DISABLE is set: every launch keeps the program's dims\n");
  free(log);
  /* read once: changing the variable later changes nothing */
  unsetenv("KLARAPTOR_DISABLE");
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=3x3x3 grid=3x3x3");
  setup("disable_0", NULL, "0", 0);
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=32x4x1 grid=64x512x1");
  setup("disable_empty", NULL, "", 0);
  CHECK_STR(fmt(launch(MM, 1, N2048, prog)), "block=32x4x1 grid=64x512x1");
  g_case = "disable";
  ok();
}

static void t_log_append(void) {
  setup("log_append", NULL, NULL, 1);
  FILE *f = fopen(g_logpath, "w");
  fputs("earlier line\n", f);
  fclose(f);
  launch(MM, 1, N2048, D(1, 1, 1, 1, 1, 1));
  launch(MM, 1, N2048, D(1, 1, 1, 1, 1, 1));
  char *log = slurp(g_logpath);
  CHECK_STR(log, "earlier line\nklaraptor: mm n=2048 block=32x4x1 grid=64x512x1 source=model "
                 "device=0:NVIDIA H200\n");
  free(log);
  /* no logging: nothing written */
  setup("log_off", NULL, NULL, 0);
  setenv("KLARAPTOR_LOG", "0", 1);
  launch(MM, 1, N2048, D(1, 1, 1, 1, 1, 1));
  CHECK(access(g_logpath, F_OK) != 0);
  g_case = "log_append";
  ok();
}

/* ---------------------------------------------------------------------------------------- */
/* Threads                                                                                  */

#define T_THREADS 8
#define T_ITERS 20000
#define T_KEYS 97

static dims g_ref[T_KEYS];
static pthread_barrier_t g_barrier;
static int g_mismatch;

static void key_launch(int key, dims *out) {
  int64_t d[] = {(int64_t)key * 37 + 1};
  *out = launch((key & 1) ? MM : SAXPY, 1, d, D(1, 1, 1, 1, 1, 1));
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  pthread_barrier_wait(&g_barrier);
  for (int i = 0; i < T_ITERS; i++) {
    seed = seed * 1103515245u + 12345u;
    int key = (int)((seed >> 8) % T_KEYS);
    dims r;
    key_launch(key, &r);
    if (memcmp(&r, &g_ref[key], sizeof r) != 0) __atomic_fetch_add(&g_mismatch, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

/* Decisions are made concurrently (nothing memoized yet); every thread must see the same
 * answer as a single-threaded run, every key must be decided (and logged) once. */
static void run_threads(const char *logpath) {
  /* reference, then forget it */
  for (int k = 0; k < T_KEYS; k++) key_launch(k, &g_ref[k]);
  klaraptor__reset_for_tests();
  if (logpath) unlink(logpath);
  pthread_barrier_init(&g_barrier, NULL, T_THREADS);
  pthread_t th[T_THREADS];
  for (int i = 0; i < T_THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < T_THREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_barrier);
  CHECK(g_mismatch == 0);
  CHECK(klaraptor__memo_size() == T_KEYS);
  if (logpath) {
    char *log = slurp(logpath);
    CHECK(count_lines(log) == T_KEYS);
    free(log);
  }
}

static void t_threads(void) {
  setup("threads", NULL, NULL, 1);
  run_threads(g_logpath);
  ok();
}

/* ---------------------------------------------------------------------------------------- */
/* Scenarios                                                                                */

static void print_launch(const char *label, const char *id, int32_t n, const int64_t *data,
                         dims in) {
  printf("%s %s\n", label, fmt(launch(id, n, data, in)));
}

static int scenario_launch(void) {
  register_rest();
  klaraptor__set_device_query(fake_current, fake_query);
  dims prog = D(128, 128, 1, 16, 16, 1);
  int64_t nm[] = {100, 50}, td[] = {1000, 5}, two[] = {1, 2};
  print_launch("mm n=2048", MM, 1, N2048, prog);
  print_launch("mm n=2048", MM, 1, N2048, prog);
  print_launch("mm n=100", MM, 1, N100, prog);
  print_launch("mm n=7", MM, 1, N7, prog);
  print_launch("saxpy n=1000000", SAXPY, 1, N1M, D(3907, 1, 1, 256, 1, 1));
  print_launch("nomodel n=100 m=50", "_Z7nomodelPfii", 2, nm, D(4, 4, 4, 32, 16, 1));
  print_launch("tmpl len=1000", "_Z4tmplIfLi2EEvPT_ii", 2, td, D(8, 1, 1, 128, 1, 1));
  print_launch("other n=100", "_Z5otherPfi", 1, N100, D(1, 1, 1, 100, 1, 1));
  print_launch("unknown", "_Z7unknownv", 0, NULL, D(2, 2, 2, 2, 2, 2));
  print_launch("mm n_data=2", MM, 2, two, D(2, 2, 2, 2, 2, 2));
  g_ordinal = 1;
  print_launch("device1 mm n=2048", MM, 1, N2048, prog);
  print_launch("device1 other n=100", "_Z5otherPfi", 1, N100, D(1, 1, 1, 100, 1, 1));
  g_ordinal = 0;
  print_launch("mm n=2048", MM, 1, N2048, prog);
  printf("memo=%zu queries=%d,%d\n", klaraptor__memo_size(), g_queries[0], g_queries[1]);
  return 0;
}

static int scenario_threads(void) {
  register_rest();
  klaraptor__set_device_query(fake_current, fake_query);
  g_case = "threads";
  const char *log = getenv("KLARAPTOR_LOG");
  run_threads(log && strcmp(log, "1") != 0 && strcmp(log, "0") != 0 ? log : NULL);
  printf("threads=%d iterations=%d keys=%d memo=%zu mismatches=%d\n", T_THREADS, T_ITERS, T_KEYS,
         klaraptor__memo_size(), g_mismatch);
  return 0;
}

static const klaraptor_device *g_seen_dev;
static int probe_select(const int64_t *d, const klaraptor_device *dev, uint32_t b[3]) {
  (void)d;
  g_seen_dev = dev;
  b[0] = 96;
  b[1] = b[2] = 1;
  return 0;
}
static const klaraptor_kernel k_probe = {
    KLARAPTOR_ABI_VERSION, "_Z5probev", "probe", 1, n_names, 1, grid_1d, NULL, -1, -1,
    probe_select, "NVIDIA H200", NULL};

static int scenario_cudart(void) {
  klaraptor_register(&k_probe);
  /* default hooks: the fake CUDA runtime */
  print_launch("probe n=1000", "_Z5probev", 1, (const int64_t[]){1000}, D(1, 1, 1, 1, 1, 1));
  const klaraptor_device *d = g_seen_dev;
  if (!d) {
    printf("no device seen\n");
    return 1;
  }
  printf("device %d \"%s\" sms=%d warp=%d threads/block=%d block=%dx%dx%d grid=%dx%dx%d "
         "threads/sm=%d blocks/sm=%d regs/sm=%d regs/block=%d smem/block=%d smem/block-optin=%d "
         "smem/sm=%d cc=%d.%d\n",
         d->ordinal, d->name, d->sm_count, d->warp_size, d->max_threads_per_block,
         d->max_block_dim[0], d->max_block_dim[1], d->max_block_dim[2], d->max_grid_dim[0],
         d->max_grid_dim[1], d->max_grid_dim[2], d->max_threads_per_sm, d->max_blocks_per_sm,
         d->regs_per_sm, d->regs_per_block, d->smem_per_block, d->smem_per_block_optin,
         d->smem_per_sm, d->cc_major, d->cc_minor);
  fake_cudart_device = 1;
  print_launch("device1 probe n=1000", "_Z5probev", 1, (const int64_t[]){1000},
               D(1, 1, 1, 1, 1, 1));
  fake_cudart_device = -1;
  print_launch("no device probe n=1000", "_Z5probev", 1, (const int64_t[]){1000},
               D(1, 1, 1, 1, 1, 1));
  printf("last error after a failed cudaGetDevice: %d\n", fake_cudart_last_error);
  /* an attribute the driver does not know: the device cannot be described */
  klaraptor__reset_for_tests();
  fake_cudart_device = 0;
  fake_cudart_fail_attr = 106;
  print_launch("bad attribute probe n=1000", "_Z5probev", 1, (const int64_t[]){1000},
               D(1, 1, 1, 1, 1, 1));
  printf("last error after a failed attribute: %d\n", fake_cudart_last_error);
  return 0;
}

/* The first registration (the constructor above, before main) warms the first launch's paths
 * with the environment the process started with, and must leave no trace: the runtime obeys
 * what the environment says at the first launch. main sets each KLARAPTOR_<X> to the value of
 * TEST_RT_MAIN_<X>, or unsets it when that is not set, then makes the launches of `launch`. */
static int scenario_env_in_main(void) {
  static const char *const vars[] = {"LOG", "FORCE", "DISABLE", "REFINE", "REFINE_BUDGET",
                                     "CHOICES"};
  printf("warmed=%d\n", klaraptor__warmed_up());
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    char from[64], to[64];
    snprintf(from, sizeof from, "TEST_RT_MAIN_%s", vars[i]);
    snprintf(to, sizeof to, "KLARAPTOR_%s", vars[i]);
    const char *v = getenv(from);
    if (v)
      setenv(to, v, 1);
    else
      unsetenv(to);
  }
  return scenario_launch();
}

/* A program that registers its kernels and never launches: whatever the environment says,
 * nothing is written, opened or printed (the warm-up at registration is silent). */
static int scenario_no_launch(void) {
  register_rest();
  printf("warmed=%d\n", klaraptor__warmed_up());
  return 0;
}

/* A rational program of a newer model ABI than this runtime's: refused with a warning. */
static int never_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                        double *predicted_us) {
  (void)data;
  (void)dev;
  (void)block;
  (void)predicted_us;
  return 1;
}
static const klaraptor_model m_newer = {KLARAPTOR_MODEL_ABI_VERSION + 1,
                                        "_Z5newerv",
                                        "NVIDIA H200",
                                        never_select,
                                        "newer.nvidia-h200.c",
                                        NULL,
                                        NULL,
                                        "0000000000000000",
                                        132,
                                        NULL};

static int scenario_unit(void) {
  register_rest();
  klaraptor_register(&k_abi2);
  klaraptor_register_model(&m_newer);
  klaraptor__set_device_query(fake_current, fake_query);
  snprintf(g_logpath, sizeof g_logpath, "%s/klaraptor-test-%d.log",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  t_model_and_grid();
  t_registry();
  t_force_parse();
  t_force();
  t_limits();
  t_shmem();
  t_model_fallbacks();
  t_memo();
  t_disable();
  t_log_append();
  t_threads();
  unlink(g_logpath);
  printf("all unit cases passed\n");
  return g_failures != 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: test_rt unit|launch|threads|cudart|env_in_main|no_launch|model_warm\n");
    return 2;
  }
  if (strcmp(argv[1], "unit") == 0) return scenario_unit();
  if (strcmp(argv[1], "launch") == 0) return scenario_launch();
  if (strcmp(argv[1], "threads") == 0) return scenario_threads();
  if (strcmp(argv[1], "cudart") == 0) return scenario_cudart();
  if (strcmp(argv[1], "env_in_main") == 0) return scenario_env_in_main();
  if (strcmp(argv[1], "no_launch") == 0) return scenario_no_launch();
  if (strcmp(argv[1], "model_warm") == 0) return scenario_model_warm();
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return 2;
}

/* Tests of the runtime's refinement without a GPU: the shim linked with the fake CUDA runtime
 * (tests/fake_cudart.c), whose streams keep a clock that each fake kernel advances by its
 * length, so that the CUDA events the shim records on a launch's stream measure exactly the
 * time the test gave that shape (plus, where a case sets them, the host's gaps and the
 * launch's latency, as on a GPU). The cases with noise and drift are the launch patterns of
 * real programs that refinement must hold on: kernels alternating with synchronisations,
 * host work between launches, work shrinking with a loop index, keys launched ten times a
 * run. Driven by tests/runtime_shim.rs as
 *
 *   test_refine unit <dir>    in-process cases; prints "ok <case>" per case; <dir> is a
 *                             scratch directory for logs and choices caches
 *   test_refine processes <dir>
 *                             rounds of two processes settling the same key at once and a
 *                             third reading the cache file meanwhile
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h> /* cudaSetDevice: the fake's (tests/fake_cudart.c) */

#include "klaraptor.h"
#include "klaraptor_internal.h"

extern double fake_cudart_gpu_us;
extern int fake_cudart_gpu_follows;
extern int fake_cudart_syncs;
extern int fake_cudart_events_live;
extern int fake_cudart_records;
extern void *fake_cudart_capturing;
extern _Thread_local int fake_cudart_launch_error;
extern int fake_cudart_capture_mode;
static int read_file(const char *path, char *buf, size_t cap);
static int choice_files(const char *dir, char *out, size_t cap, int *tmps);
void fake_cudart_kernel(void *stream, double us);
void fake_cudart_reset_streams(void);
extern double fake_cudart_load_us;
extern int fake_cudart_loads;
void fake_cudart_launch(const void *kernel, void *stream, double us);
void fake_cudart_host(double us);
void fake_cudart_host_sync(void);
double fake_cudart_busy_until(void);
extern double fake_cudart_latency_us;
extern double fake_cudart_latency_jitter_us;
extern int fake_cudart_gate_stuck;
extern int fake_cudart_wait_refused;
extern int fake_cudart_gates;
extern int fake_cudart_registered;
int fake_cudart_gated(void);

static int g_failures;
static const char *g_case = "";
static char g_dir[2048];

#define CHECK(c)                                                                         \
  do {                                                                                   \
    if (!(c)) {                                                                          \
      fprintf(stderr, "FAIL %s: %s:%d: %s\n", g_case, __FILE__, __LINE__, #c);          \
      g_failures++;                                                                      \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* ---------------------------------------------------------------------------------------- */
/* The kernel and its rational program                                                      */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int st_grid(const int64_t *d, const uint32_t b[3], uint32_t g[3]) {
  if (d[0] <= 0) return 1;
  g[0] = (uint32_t)cdiv(d[0], b[0]);
  g[1] = g[2] = 1;
  return 0;
}
static int st_allowed(const int64_t *d, const uint32_t b[3]) {
  (void)d;
  return b[0] % 32 == 0;
}
static const char *const n_names[] = {"n"};
#define ID "_Z7stencilPfi"
static const klaraptor_kernel k_st = {KLARAPTOR_ABI_VERSION, ID, "stencil", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, NULL};

/* The model ranks 256 > 128 > 512 > 64 > the other multiples of 32 up to 1024 (32 shapes). */
static const uint32_t g_order[] = {256, 128, 512, 64};
static int st_rank(const int64_t *data, const klaraptor_device *dev, int k, uint32_t (*blocks)[3],
                   double *us) {
  (void)data;
  (void)dev;
  int n = 0;
  for (int i = 0; i < 4 && n < k; i++) blocks[n++][0] = g_order[i];
  for (uint32_t x = 32; x <= 1024 && n < k; x += 32)
    if (x != 256 && x != 128 && x != 512 && x != 64) blocks[n++][0] = x;
  for (int i = 0; i < n; i++) {
    blocks[i][1] = blocks[i][2] = 1;
    if (us) us[i] = 10.0 + i;
  }
  return 32;
}
static int st_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                     double *us) {
  uint32_t b[1][3];
  st_rank(data, dev, 1, b, us);
  memcpy(block, b[0], sizeof b[0]);
  return 0;
}
static const klaraptor_model m_st = {KLARAPTOR_MODEL_ABI_VERSION, ID, "NVIDIA H200", st_select,
                                     "stencil.NVIDIA_H200.c", st_rank, NULL,
                                     "00c0ffee00c0ffee", 0, NULL};

/* A second kernel, launched between the first's launches on the same stream: its model ranks
 * 256 > 128 > 512; 64 (its program's shape) is its fastest. */
#define ID2 "_Z5otherPfi"
static const klaraptor_kernel k_ot = {KLARAPTOR_ABI_VERSION, ID2, "other", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, NULL};
static const klaraptor_model m_ot = {KLARAPTOR_MODEL_ABI_VERSION, ID2, "NVIDIA H200", st_select,
                                     "other.NVIDIA_H200.c", st_rank, NULL, "00beef0000beef00", 0, NULL};

/* A kernel like gramschm's gs_update on an H100: the model predicts every multiple of 32 up to
 * 1024 within a few per cent and ranks them by width, 1024 > 992 > 960 > ... > 32 (its first
 * three are near-duplicates); the program launches 256; the fastest is 32, two halvings below
 * 128, which is slower than 256 (the walk from 256 stops there). */
#define ID3 "_Z9gs_updatePfi"
static const klaraptor_kernel k_gs = {KLARAPTOR_ABI_VERSION, ID3, "gs_update", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, NULL};
static int gs_rank(const int64_t *data, const klaraptor_device *dev, int k, uint32_t (*blocks)[3],
                   double *us) {
  (void)data;
  (void)dev;
  int n = 0;
  for (uint32_t x = 1024; x >= 32 && n < k; x -= 32, n++) {
    blocks[n][0] = x;
    blocks[n][1] = blocks[n][2] = 1;
    if (us) us[n] = 380.0 + n;
  }
  return 32;
}
static int gs_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                     double *us) {
  uint32_t b[1][3];
  gs_rank(data, dev, 1, b, us);
  memcpy(block, b[0], sizeof b[0]);
  return 0;
}
static const klaraptor_model m_gs = {KLARAPTOR_MODEL_ABI_VERSION, ID3, "NVIDIA H200", gs_select,
                                     "gs_update.NVIDIA_H200.c", gs_rank, NULL,
                                     "0600d0000600d000", 0, NULL};
static double gs_us(uint32_t bx) {
  return bx == 32 ? 200 : bx == 64 ? 250 : bx == 128 ? 420 : bx == 256 ? 400 : 410;
}
/* One launch of gs_update: the program's 256. Returns the block width used. */
static uint32_t run_gs(void *stream, int64_t n) {
  uint64_t gxy = (uint64_t)cdiv(n, 256) | (1ull << 32), bxy = 256 | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID3, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  fake_cudart_kernel(stream, gs_us(bx));
  klaraptor_launch_end(t);
  return bx;
}

static double kernel_us(uint32_t bx);

/* One kernel, rational programs for two GPUs (issue 22): the H200's ranks 256 > 128 > 512 >
 * 64 and 128 is fastest there; the H100 80GB HBM3's (132 SMs) ranks 512 > 1024 > 256 > 128
 * and 1024 is fastest there. A program for "NVIDIA H100" (a part of the H100's name) must
 * not be taken for it. Devices 1 (A100) and 3 (an H100 80GB HBM3 of 114 SMs) have none. */
#define ID4 "_Z5multiPfi"
static const klaraptor_kernel k_md = {KLARAPTOR_ABI_VERSION, ID4, "multi", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, NULL};
static int md_rank(const uint32_t *order, int k, uint32_t (*blocks)[3], double *us) {
  int n = 0;
  for (int i = 0; i < 4 && n < k; i++) blocks[n++][0] = order[i];
  for (uint32_t x = 32; x <= 1024 && n < k; x += 32) {
    int dup = 0;
    for (int i = 0; i < 4; i++) dup |= order[i] == x;
    if (!dup) blocks[n++][0] = x;
  }
  for (int i = 0; i < n; i++) {
    blocks[i][1] = blocks[i][2] = 1;
    if (us) us[i] = 10.0 + i;
  }
  return 32;
}
static const uint32_t g_md_h200[4] = {256, 128, 512, 64}, g_md_h100[4] = {512, 1024, 256, 128};
static int md_rank_h200(const int64_t *data, const klaraptor_device *dev, int k,
                        uint32_t (*blocks)[3], double *us) {
  (void)data;
  if (dev->sm_count != 132 || strcmp(dev->name, "NVIDIA H200") != 0) return -1;
  return md_rank(g_md_h200, k, blocks, us);
}
static int md_rank_h100(const int64_t *data, const klaraptor_device *dev, int k,
                        uint32_t (*blocks)[3], double *us) {
  (void)data;
  if (dev->sm_count != 132 || strcmp(dev->name, "NVIDIA H100 80GB HBM3") != 0) return -1;
  return md_rank(g_md_h100, k, blocks, us);
}
static int md_select_h200(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                          double *us) {
  uint32_t b[1][3];
  if (md_rank_h200(data, dev, 1, b, us) < 0) return 1;
  memcpy(block, b[0], sizeof b[0]);
  return 0;
}
static int md_select_h100(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                          double *us) {
  uint32_t b[1][3];
  if (md_rank_h100(data, dev, 1, b, us) < 0) return 1;
  memcpy(block, b[0], sizeof b[0]);
  return 0;
}
static const klaraptor_model m_md_h200 = {
    KLARAPTOR_MODEL_ABI_VERSION, ID4, "NVIDIA H200", md_select_h200, "multi.nvidia-h200.c",
    md_rank_h200, NULL, "0a0a0a0a0a0a0a0a", 132, NULL};
static const klaraptor_model m_md_h100 = {KLARAPTOR_MODEL_ABI_VERSION,
                                          ID4,
                                          "NVIDIA H100 80GB HBM3",
                                          md_select_h100,
                                          "multi.nvidia-h100-80gb-hbm3.c",
                                          md_rank_h100,
                                          NULL,
                                          "0a0a0a0a0a0a0a0a",
                                          132,
                                          "NVIDIA H200"};
static const klaraptor_model m_md_part = {
    KLARAPTOR_MODEL_ABI_VERSION, ID4, "NVIDIA H100", md_select_h100, "multi.nvidia-h100.c",
    md_rank_h100, NULL, "0a0a0a0a0a0a0a0a", 0, NULL};
/* Kernel time by device and width: 128 fastest on the H200, 1024 on the H100. */
static double md_us(int device, uint32_t bx) {
  if (device == 2) return bx == 1024 ? 30 : bx == 512 ? 40 : bx == 256 ? 45 : 70;
  return kernel_us(bx);
}
/* One launch of multi on `device` (made current for this thread) and `stream`; the program
 * launches 64. Returns the block width used. */
static uint32_t run_md(int device, void *stream, int64_t n) {
  cudaSetDevice(device);
  uint64_t gxy = (uint64_t)cdiv(n, 64) | (1ull << 32), bxy = 64 | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID4, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  fake_cudart_kernel(stream, md_us(device, bx));
  klaraptor_launch_end(t);
  return bx;
}

/* A third kernel, whose dynamic shared memory follows the block: 128 bytes per thread, so
 * that 512 threads (64 KiB) exceed the 48 KiB a block may have; its model ranks as the
 * first's. */
#define ID5 "_Z6sharedPfi"
static int64_t sh_shmem(const int64_t *d, const uint32_t b[3]) {
  (void)d;
  return (int64_t)b[0] * 128;
}
static const klaraptor_kernel k_sh = {KLARAPTOR_ABI_VERSION, ID5, "shared", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, sh_shmem};
static const klaraptor_model m_sh = {KLARAPTOR_MODEL_ABI_VERSION, ID5, "NVIDIA H200", st_select,
                                     "shared.NVIDIA_H200.c", st_rank, NULL, "00feed0000feed00", 0, NULL};

/* A kernel like the first whose model counts its calls: a new key's shapes are evaluated
 * once (issue 41), by the decision, whose ranking refinement's setup reuses. */
#define ID6 "_Z7countedPfi"
static const klaraptor_kernel k_ct = {KLARAPTOR_ABI_VERSION, ID6, "counted", 1, n_names, 1,
                                      st_grid, st_allowed, 32, 0, NULL, NULL, NULL};
static int g_ct_select, g_ct_rank, g_ct_rank_k;
static int ct_rank(const int64_t *data, const klaraptor_device *dev, int k, uint32_t (*blocks)[3],
                   double *us) {
  g_ct_rank++;
  g_ct_rank_k = k;
  return st_rank(data, dev, k, blocks, us);
}
static int ct_select(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                     double *us) {
  g_ct_select++;
  return st_select(data, dev, block, us);
}
static const klaraptor_model m_ct = {KLARAPTOR_MODEL_ABI_VERSION, ID6, "NVIDIA H200", ct_select,
                                     "counted.NVIDIA_H200.c", ct_rank, NULL,
                                     "00c0c0c000c0c0c0", 0, NULL};
/* One launch of counted, as run()'s of stencil: the program's 64. Returns the width used. */
static uint32_t run_ct(void *stream, int64_t n) {
  uint64_t gxy = (uint64_t)cdiv(n, 64) | (1ull << 32), bxy = 64 | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID6, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  fake_cudart_kernel(stream, kernel_us(bx));
  klaraptor_launch_end(t);
  return bx;
}

__attribute__((constructor)) static void register_all(void) {
  klaraptor_register(&k_ct);
  klaraptor_register_model(&m_ct);
  klaraptor_register(&k_st);
  klaraptor_register_model(&m_st);
  klaraptor_register(&k_sh);
  klaraptor_register_model(&m_sh);
  klaraptor_register(&k_ot);
  klaraptor_register_model(&m_ot);
  klaraptor_register(&k_gs);
  klaraptor_register_model(&m_gs);
  klaraptor_register(&k_md);
  klaraptor_register_model(&m_md_h200);
  klaraptor_register_model(&m_md_h100);
  klaraptor_register_model(&m_md_part);
}

/* Kernel times by block width, in microseconds: 128 is fastest, the program's 64 slowest. */
static double g_scale = 1.0;
static double g_outlier_bx = 0; /* the first launch of this width takes 8x */
static int g_valley;    /* the fastest is 32, two halvings from 128 */
static int g_incumbent; /* the program's 64 within 2 % of 128 */
static int g_cliff;     /* the model's first choice (256) takes 100x the program's 64 */
static double (*g_time)(uint32_t bx); /* when set, the time of a launch (noise, drift) */
static double kernel_us(uint32_t bx) {
  if (g_time) return g_time(bx);
  double t = bx == 128 ? 30 : bx == 256 ? 40 : bx == 512 ? 50 : bx == 64 ? 100 : 70;
  if (g_cliff) t = bx == 256 ? 3000 : bx == 64 ? 30 : bx == 128 ? 35 : 70;
  if (g_valley) t = bx == 32 ? 20 : bx == 64 ? 29.5 : t;
  if (g_incumbent && bx == 64) t = 30.6;
  if (g_outlier_bx == bx) {
    g_outlier_bx = 0;
    return 8 * t * g_scale;
  }
  return t * g_scale;
}

/* One launch of the program's work on `stream`: the shim chooses, the fake GPU runs it for
 * kernel_us(width) (nothing when the launch "failed"). Returns the block width used. */
static uint32_t run(void *stream, int64_t n, uint32_t fail_bx) {
  uint32_t prog_bx = 64;
  uint64_t gxy = (uint64_t)cdiv(n, prog_bx) | (1ull << 32), bxy = prog_bx | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  if (bx == fail_bx)
    fake_cudart_launch_error = 9; /* cudaErrorInvalidConfiguration */
  else
    fake_cudart_kernel(stream, kernel_us(bx));
  klaraptor_launch_end(t);
  fake_cudart_launch_error = 0;
  return bx;
}

static void fresh(const char *refine, const char *choices) {
  char log[2200];
  snprintf(log, sizeof log, "%s/log-%s.txt", g_dir, g_case);
  unlink(log);
  setenv("KLARAPTOR_LOG", log, 1);
  if (refine)
    setenv("KLARAPTOR_REFINE", refine, 1);
  else
    unsetenv("KLARAPTOR_REFINE");
  setenv("KLARAPTOR_CHOICES", choices ? choices : "off", 1);
  /* the cases of the order of comparisons run unpaced; the budget's own cases set it */
  setenv("KLARAPTOR_REFINE_BUDGET", "off", 1);
  /* the cases of the schedule take the model's first k shapes; t_span the spanning rule */
  setenv("KLARAPTOR_REFINE_SPAN", "off", 1);
  klaraptor__reset_for_tests();
  fake_cudart_reset_streams();
  cudaSetDevice(0);
  fake_cudart_gpu_follows = 1;
  fake_cudart_capturing = (void *)-1;
  fake_cudart_records = 0;
  fake_cudart_latency_us = 0;
  g_scale = 1.0;
  g_outlier_bx = 0;
  g_valley = 0;
  g_incumbent = 0;
  g_cliff = 0;
  g_time = NULL;
}

/* The same with the default budget (KLARAPTOR_REFINE_BUDGET unset: 1 %). */
static void fresh_paced(const char *choices) {
  fresh(NULL, choices);
  unsetenv("KLARAPTOR_REFINE_BUDGET");
}

static const char *log_text(void);

/* Runs of a program with the choices cache `dir` (each a fresh process: fresh(), `launches`
 * launches, exit), until a key is decided or `max_runs`; `setup` (may be NULL) sets the
 * launch pattern again after each fresh(). Returns the runs made; *last the last block. */
static int g_launch_t; /* the step of the program's loop in its run (for drifting patterns) */
static int g_paced;    /* cache_runs: with the default budget (1 %) instead of none */

static int cache_runs(const char *refine, const char *dir, int launches, int max_runs,
                      void (*setup)(int run), uint32_t *last) {
  int runs = 0;
  uint32_t l = 0;
  while (runs < max_runs) {
    fresh(refine, dir);
    if (g_paced) unsetenv("KLARAPTOR_REFINE_BUDGET");
    if (setup) setup(runs);
    runs++;
    for (g_launch_t = 0; g_launch_t < launches; g_launch_t++) l = run(NULL, 4096, 0);
    klaraptor__save_progress_for_tests();
    if (strstr(log_text(), "settled on") || strstr(log_text(), "kept block=")) break;
  }
  if (last) *last = l;
  return runs;
}

/* The log so far. */
static const char *log_text(void) {
  static char buf[1 << 20];
  char log[2200];
  snprintf(log, sizeof log, "%s/log-%s.txt", g_dir, g_case);
  FILE *f = fopen(log, "r");
  buf[0] = 0;
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static int read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
  return (int)n;
}

/* The one file with this suffix in dir (its path into out); the number of such files, and
 * of temporaries in *tmps. */
static int files_with(const char *dir, const char *suffix, char *out, size_t cap, int *tmps) {
  DIR *d = opendir(dir);
  int n = 0;
  *tmps = 0;
  if (!d) return 0;
  struct dirent *e;
  size_t sl = strlen(suffix);
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l > sl && strcmp(e->d_name + l - sl, suffix) == 0) {
      snprintf(out, cap, "%s/%s", dir, e->d_name);
      n++;
    }
    if (l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0) (*tmps)++;
  }
  closedir(d);
  return n;
}

static int choice_files(const char *dir, char *out, size_t cap, int *tmps) {
  return files_with(dir, ".choice", out, cap, tmps);
}

static int progress_file(const char *dir, char *out, size_t cap) {
  int tmps;
  return files_with(dir, ".progress", out, cap, &tmps);
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The launch count in the log's "after launches=<n>", or -1. */
static int settled_after(const char *log) {
  const char *at = strstr(log, " after launches=");
  return at ? atoi(at + strlen(" after launches=")) : -1;
}

/* Randomness without libm: xorshift, and a normal deviate from twelve uniform ones. */
static uint64_t g_rng = 88172645463325252ull;
static double urand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}
static double nrand(void) {
  double s = 0;
  for (int i = 0; i < 12; i++) s += urand();
  return s - 6;
}

/* ---------------------------------------------------------------------------------------- */
/* Cases                                                                                    */

static double g_base[1025]; /* the launch patterns' times per width (below) */
static void pattern(double prog64, double m256, double m128, double m512, double sigma);

/* The order of the comparisons and their quadruples, the verdicts, settling, the log, no
 * synchronisation, no event left. */
static void t_order(void) {
  g_case = "order";
  fresh(NULL, NULL);
  uint32_t seq[31];
  for (int i = 0; i < 31; i++) seq[i] = run(NULL, 4096, 0);
  /* the warm-up (the model's first choice, untimed); the program's 64 against model#1's 256
   * (I C C I, C I I C): 256 is faster in every launch by more than 1.5x in both quadruples,
   * a win; 128 against 256 (I C C I, C I I C, I C C I): 30 against 40 us, a win in three (the
   * fewest a verdict takes but a cliff's or such a clear win); 512 against 128: 50 against
   * 30 us, a cliff in one; the walk from 128: its half is the program's 64, a cliff; its
   * double is 256, compared already: over, settled on 128 */
  static const uint32_t want[31] = {256, 64,  256, 256, 64,  256, 64,  64,  256, 256, 128,
                                    128, 256, 128, 256, 256, 128, 256, 128, 128, 256, 512,
                                    128, 128, 512, 128, 64,  64,  128, 128, 128};
  int wrong = 0;
  for (int i = 0; i < 31; i++)
    if (seq[i] != want[i]) {
      fprintf(stderr, "launch %d: %u, want %u\n", i + 1, seq[i], want[i]);
      wrong++;
    }
  CHECK(wrong == 0);
  const char *log = log_text();
  CHECK(strstr(log, "klaraptor: stencil n=4096 block=256x1x1 grid=16x1x1 source=model "
                    "predicted_us=10 device=0:NVIDIA H200 program_block=64x1x1\n"));
  CHECK(strstr(log, "klaraptor: stencil n=4096 refine: trying 3 of 32 shapes and the "
                    "program's 64x1x1 (model#1=256x1x1 model#2=128x1x1 model#3=512x1x1) "
                    "device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "klaraptor: stencil n=4096 refine: model#1=256x1x1 against the incumbent "
                    "program=64x1x1: win after pairs=2 (difference -60.0 % sd 0.0 %) "
                    "device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "refine: model#3=512x1x1 against the incumbent model#2=128x1x1: cliff "
                    "after pairs=1 (difference +66.7 % sd 0.0 %)"));
  /* pairs: 2 + 3 + 1 + 1; what they cost: |80 - 200| twice, |60 - 80| three times,
   * |100 - 60|, |200 - 60| */
  CHECK(strstr(log, "klaraptor: stencil n=4096 refine: settled on block=128x1x1 grid=32x1x1 "
                    "after launches=30, 0.750 of the model's first choice's time "
                    "(candidate=model#2 confidence=paired pairs=7 extra_us=480.0) "
                    "device=0:NVIDIA H200\n"));
  CHECK(count(log, "\n") == 7);
  CHECK(fake_cudart_syncs == 0);
  CHECK(fake_cudart_events_live == 0);
  CHECK(klaraptor__memo_size() == 1);
  printf("ok order\n");
}

/* Results that are not ready are not waited for: two quadruples in flight at most, the
 * launches go on untimed meanwhile, and the key settles once the GPU has caught up. */
static void t_deferred(void) {
  g_case = "deferred";
  fresh(NULL, NULL);
  fake_cudart_gpu_follows = 0;
  fake_cudart_gpu_us = 0;
  int counts[1025] = {0};
  for (int i = 0; i < 40; i++) counts[run(NULL, 4096, 0)]++;
  CHECK(!strstr(log_text(), "settled"));
  /* the warm-up and two quadruples' 256s, the rest untimed at the model's first choice */
  CHECK(counts[64] == 4 && counts[256] == 36);
  CHECK(fake_cudart_records == 2 * 8);
  CHECK(fake_cudart_syncs == 0);
  fake_cudart_gpu_follows = 1; /* the GPU has caught up, and keeps up */
  for (int i = 0; i < 40; i++) run(NULL, 4096, 0);
  CHECK(strstr(log_text(), "settled on block=128x1x1 grid=32x1x1 after launches="));
  CHECK(run(NULL, 4096, 0) == 128);
  CHECK(fake_cudart_events_live == 0);
  printf("ok deferred\n");
}

/* A new key's shapes are evaluated once: its decision ranks them (rank's first is what
 * select picks), and refinement's setup after the launch takes that ranking for its
 * candidates instead of ranking again; the candidates and the decisions are the stencil's
 * (the same model). Without refinement the decision selects. */
static const char *after(const char *log, const char *from, const char *what) {
  const char *p = strstr(log, from);
  return p ? strstr(p, what) : NULL;
}
static void t_ranked_once(void) {
  g_case = "ranked_once";
  for (int span = 0; span < 2; span++) {
    fresh(NULL, NULL);
    if (span) unsetenv("KLARAPTOR_REFINE_SPAN");
    g_ct_select = g_ct_rank = g_ct_rank_k = 0;
    int64_t n = 4096;
    uint64_t gxy = (uint64_t)cdiv(n, 64) | (1ull << 32), bxy = 64 | (1ull << 32);
    uint32_t gz = 1, bz = 1;
    uint64_t t = klaraptor_launch_begin(ID6, 1, &n, &gxy, &gz, &bxy, &bz, 0, NULL);
    CHECK((uint32_t)bxy == 256); /* the model's first choice */
    CHECK(g_ct_rank == 1 && g_ct_select == 0 && g_ct_rank_k == (span ? 32 : 3));
    klaraptor_launch_end(t); /* the setup: the candidates, from that ranking */
    CHECK(g_ct_rank == 1 && g_ct_select == 0);
    for (int i = 0; i < 60; i++) run_ct(NULL, 4096);
    for (int i = 0; i < 61; i++) run(NULL, 4096, 0);
    CHECK(run_ct(NULL, 4096) == 128 && run(NULL, 4096, 0) == 128);
    /* what refinement tried and decided: the stencil's, which ranks at its setup too */
    const char *log = log_text();
    const char *ct = strstr(log, "klaraptor: counted n=4096 refine: trying ");
    const char *st = strstr(log, "klaraptor: stencil n=4096 refine: trying ");
    CHECK(ct && st);
    size_t lc = strcspn(ct, "\n"), ls = strcspn(st, "\n");
    CHECK(lc - strlen("counted") == ls - strlen("stencil"));
    CHECK(memcmp(ct + strlen("klaraptor: counted"), st + strlen("klaraptor: stencil"),
                 lc - strlen("klaraptor: counted")) == 0);
    const char *cs = after(log, "klaraptor: counted n=4096 refine: settled on", "(candidate=");
    const char *ss = after(log, "klaraptor: stencil n=4096 refine: settled on", "(candidate=");
    CHECK(cs && ss && strcspn(cs, "\n") == strcspn(ss, "\n") &&
          memcmp(cs, ss, strcspn(cs, "\n")) == 0);
  }
  /* a key that does not refine: the decision selects */
  fresh("off", NULL);
  g_ct_select = g_ct_rank = 0;
  CHECK(run_ct(NULL, 4096) == 256);
  CHECK(g_ct_select == 1 && g_ct_rank == 0);
  /* klaraptor_select's launches (never timed): the setup at once, from the same ranking */
  fresh(NULL, NULL);
  g_ct_select = g_ct_rank = 0;
  int64_t n = 8192;
  uint64_t gxy = (uint64_t)cdiv(n, 64) | (1ull << 32), bxy = 64 | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  klaraptor_select(ID6, 1, &n, &gxy, &gz, &bxy, &bz);
  CHECK((uint32_t)bxy == 256);
  CHECK(g_ct_rank == 1 && g_ct_select == 0);
  CHECK(strstr(log_text(), "klaraptor: counted n=8192 refine: trying 3 of 32 shapes and the "
                           "program's 64x1x1 (model#1=256x1x1 model#2=128x1x1 "
                           "model#3=512x1x1) device=0:NVIDIA H200\n"));
  printf("ok ranked_once\n");
}

/* A stream being captured into a graph: the model's choice, no event recorded there. */
static void t_capture(void) {
  g_case = "capture";
  fresh(NULL, NULL);
  void *s = (void *)0x1000;
  fake_cudart_capturing = s;
  for (int i = 0; i < 20; i++) CHECK(run(s, 4096, 0) == 256);
  CHECK(fake_cudart_records == 0);
  CHECK(fake_cudart_events_live == 0);
  CHECK(count(log_text(), "the stream is being captured: model#1, untimed") == 1);
  /* the capture mode of the thread is left as it was */
  CHECK(fake_cudart_capture_mode == 0 /* cudaStreamCaptureModeGlobal */);
  fake_cudart_capturing = (void *)-1; /* capture ended: refinement goes on */
  for (int i = 0; i < 30; i++) run(s, 4096, 0);
  CHECK(strstr(log_text(), "settled on block=128x1x1"));
  printf("ok capture\n");
}

/* A challenger whose launch fails is never chosen (its time would be near zero). */
static void t_failed(void) {
  g_case = "failed";
  fresh(NULL, NULL);
  for (int i = 0; i < 40; i++) run(NULL, 4096, 512);
  CHECK(strstr(log_text(), "refine: model#3=512x1x1 against the incumbent model#2=128x1x1: "
                           "failed after pairs=0"));
  CHECK(strstr(log_text(), "settled on block=128x1x1"));
  CHECK(run(NULL, 4096, 0) == 128);
  printf("ok failed\n");
}

/* The neighbour walk: the fastest shape is not among the model's three but a halving of the
 * program's 64, which beats all three. */
static void t_walk(void) {
  g_case = "walk";
  fresh(NULL, NULL);
  g_valley = 1; /* 32: 20 us, 64: 29.5, 128: 30 */
  for (int i = 0; i < 60; i++) run(NULL, 4096, 0);
  const char *log = log_text();
  CHECK(strstr(log, "settled on block=32x1x1 grid=128x1x1 after launches="));
  CHECK(strstr(log, "(candidate=nearby#1 "));
  CHECK(run(NULL, 4096, 0) == 32);
  /* KLARAPTOR_REFINE_WALK=off: the best of the four */
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  fresh(NULL, NULL);
  g_valley = 1;
  for (int i = 0; i < 60; i++) run(NULL, 4096, 0);
  unsetenv("KLARAPTOR_REFINE_WALK");
  CHECK(strstr(log_text(), "settled on block=64x1x1 grid=64x1x1 after launches="));
  CHECK(!strstr(log_text(), "nearby#"));
  /* A valley behind a plateau (KLARAPTOR_REFINE=1): the model's 256 beats the program's 64;
   * its double, 512, is 1 % slower (no win, within 3 %: a plateau) and the walk crosses it
   * once, to 1024, 25 % faster than 256. */
  fresh("1", NULL);
  pattern(50, 40, 0, 40.4, 0);
  g_base[1024] = 30;
  for (int i = 0; i < 80; i++) run(NULL, 4096, 0);
  CHECK(strstr(log_text(), "refine: nearby#2=512x1x1 against the incumbent model#1=256x1x1: "
                           "lose after pairs=3"));
  CHECK(strstr(log_text(), "refine: nearby#3=1024x1x1 against the incumbent model#1=256x1x1: "
                           "win after pairs=3"));
  CHECK(strstr(log_text(), "settled on block=1024x1x1 grid=4x1x1 after launches="));
  printf("ok walk\n");
}

/* The spanning rule (the default): of the model's first 32 shapes, its first, then those 4x
 * apart from every one taken. gs_update's near-duplicate first three (1024, 992, 960) give way
 * to 256 (the program's too) and 64, far from 1024; 64 beats the program's 256 and the walk
 * goes from it to 32. The first k shapes (KLARAPTOR_REFINE_SPAN=off) all lose to the
 * program's 256, and the walk from it finds nothing faster. */
static void t_span(void) {
  g_case = "span";
  fresh(NULL, NULL);
  unsetenv("KLARAPTOR_REFINE_SPAN");
  for (int i = 0; i < 60; i++) run_gs(NULL, 3001);
  const char *log = log_text();
  CHECK(strstr(log, "klaraptor: gs_update n=3001 refine: trying 3 of 32 shapes (the program's "
                    "is among them) (model#1=1024x1x1 model#25=256x1x1 model#31=64x1x1) "
                    "device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "refine: settled on block=32x1x1 grid=94x1x1 after launches="));
  CHECK(strstr(log, "(candidate=nearby#1 "));
  CHECK(run_gs(NULL, 3001) == 32);
  CHECK(fake_cudart_syncs == 0);
  CHECK(fake_cudart_events_live == 0);
  fresh(NULL, NULL);
  for (int i = 0; i < 80; i++) run_gs(NULL, 3001);
  log = log_text();
  CHECK(strstr(log, "refine: trying 3 of 32 shapes and the program's 256x1x1 (model#1=1024x1x1 "
                    "model#2=992x1x1 model#3=960x1x1) device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "refine: settled on block=256x1x1 grid=12x1x1 after launches="));
  CHECK(run_gs(NULL, 3001) == 256);
  /* the default stencil model (256 > 128 > 512 > 64 > ...): 256, then 64 (model#4, the
   * program's shape), then 1024 (model#32), the first 4x from both */
  fresh(NULL, NULL);
  unsetenv("KLARAPTOR_REFINE_SPAN");
  run(NULL, 4096, 0);
  CHECK(strstr(log_text(), "klaraptor: stencil n=4096 refine: trying 3 of 32 shapes (the "
                           "program's is among them) (model#1=256x1x1 model#4=64x1x1 "
                           "model#32=1024x1x1) device=0:NVIDIA H200\n"));
  printf("ok span\n");
}

/* One process, two GPUs: launches of one kernel alternate between device 0 (an H200) and
 * device 2 (an H100 80GB HBM3), each on its own stream; each device takes its own rational
 * program (by identity: the whole name, and the SM count), keeps its own memo key and
 * refinement and settles on its own fastest shape; the choices cache has a file per device
 * and the next run starts settled on both. Device 1 (an A100) and device 3 (an H100 80GB HBM3
 * with 114 SMs) have no program: the program's own launch, one log line each. */
static void t_devices(void) {
  g_case = "devices";
  char dir[2200], path[4400], text[8192];
  snprintf(dir, sizeof dir, "%s/choices-devices", g_dir);
  void *s0 = (void *)0x100, *s2 = (void *)0x200;
  char first[1 << 14];
  for (int runs = 0; runs < 2; runs++) { /* the second run decides what the first could not */
    fresh(NULL, dir);
    for (int i = 0; i < 40; i++) {
      run_md(0, s0, 4096);
      run_md(2, s2, 4096);
    }
    if (!runs) {
      snprintf(first, sizeof first, "%s", log_text());
      klaraptor__save_progress_for_tests();
    }
  }
  const char *log = first;
  CHECK(strstr(log, "klaraptor: multi n=4096 block=256x1x1 grid=16x1x1 source=model "
                    "predicted_us=10 device=0:NVIDIA H200 program_block=64x1x1\n"));
  /* the H100's program is transferred from the H200's profile (model ABI 4): the log says so */
  CHECK(strstr(log, "klaraptor: multi n=4096 block=512x1x1 grid=8x1x1 source=model "
                    "predicted_us=10 (transferred from NVIDIA H200) device=2:NVIDIA H100 80GB "
                    "HBM3 program_block=64x1x1\n"));
  CHECK(strstr(log, "klaraptor: multi n=4096 refine: trying 3 of 32 shapes and the program's "
                    "64x1x1 (model#1=512x1x1 model#2=1024x1x1 model#3=256x1x1) "
                    "device=2:NVIDIA H100 80GB HBM3\n"));
  log = log_text();
  CHECK(strstr(log, "refine: settled on block=128x1x1 grid=32x1x1 after launches=54, 0.750 "
                    "of the model's first choice's time (candidate=model#2 confidence=paired "
                    "pairs=12 extra_us=580.0) device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "refine: settled on block=1024x1x1 grid=4x1x1 after launches="));
  CHECK(klaraptor__memo_size() == 2);
  CHECK(run_md(0, s0, 4096) == 128);
  CHECK(run_md(2, s2, 4096) == 1024);
  CHECK(fake_cudart_syncs == 0);
  CHECK(fake_cudart_events_live == 0);
  /* a GPU without a program: the program's own launch, one line (not one per launch) */
  for (int i = 0; i < 5; i++) {
    CHECK(run_md(1, s0, 4096) == 64);
    CHECK(run_md(3, s2, 4096) == 64);
  }
  log = log_text();
  CHECK(count(log, "klaraptor: multi n=4096 block=64x1x1 grid=64x1x1 source=fallback: no model "
                   "for this device (the model is for ") == 2);
  CHECK(klaraptor__memo_size() == 4);
  int tmps = 0;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 2 && tmps == 0);
  fresh(NULL, dir);
  CHECK(run_md(2, s2, 4096) == 1024);
  CHECK(run_md(0, s0, 4096) == 128);
  CHECK(fake_cudart_records == 0);
  log = log_text();
  CHECK(strstr(log, "refine: settled on block=128x1x1 grid=32x1x1 from the choices cache "
                    "(candidate=model#2 confidence=paired pairs=12) device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "refine: settled on block=1024x1x1 grid=4x1x1 from the choices cache "
                    "(candidate=model#2 confidence=paired "));
  DIR *dd = opendir(dir);
  CHECK(dd);
  int h100_files = 0;
  for (struct dirent *de; (de = readdir(dd));) {
    char p2[4400];
    snprintf(p2, sizeof p2, "%s/%s", dir, de->d_name);
    if (de->d_name[0] != '.' && read_file(p2, text, sizeof text) > 0 &&
        strstr(text, "device_id = NVIDIA H100 80GB HBM3|sm=132|cc=9.0|"))
      h100_files++;
  }
  closedir(dd);
  CHECK(h100_files == 1);
  cudaSetDevice(0);
  printf("ok devices\n");
}

/* Data values that change at every launch: at most 256 keys refine at once, the others take
 * the model's choice, and refinement goes on for new keys once some have settled. */
static void t_many_keys(void) {
  g_case = "many_keys";
  fresh(NULL, NULL);
  for (int64_t n = 1; n <= 300; n++) run(NULL, 4096 + n, 0);
  const char *log = log_text();
  CHECK(count(log, "refine: trying") == 256);
  CHECK(count(log, "refinement is trying 256 launch keys at once") == 1);
  CHECK(fake_cudart_events_live == 0); /* a key's first launch is not timed */
  for (int i = 0; i < 30; i++) run(NULL, 4096 + 1, 0); /* one of them settles */
  CHECK(count(log_text(), "refine: settled") == 1);
  run(NULL, 1 << 20, 0); /* a new key refines again */
  CHECK(count(log_text(), "refine: trying") == 257);
  printf("ok many_keys\n");
}

/* KLARAPTOR_REFINE=off and =1. */
static void t_controls(void) {
  g_case = "controls";
  fresh("off", NULL);
  for (int i = 0; i < 20; i++) CHECK(run(NULL, 4096, 0) == 256);
  CHECK(fake_cudart_records == 0);
  CHECK(!strstr(log_text(), "refine:"));
  fresh("1", NULL);
  for (int i = 0; i < 30; i++) run(NULL, 4096, 0);
  CHECK(strstr(log_text(), "refine: trying 1 of 32 shapes and the program's 64x1x1 "
                           "(model#1=256x1x1)"));
  /* the walk finds 128 next to the model's 256 */
  CHECK(strstr(log_text(), "settled on block=128x1x1 grid=32x1x1 after launches="));
  CHECK(strstr(log_text(), "0.750 of the model's first choice's time (candidate=nearby#1 "));
  /* the program's shape winning keeps the program's dims */
  fresh("1", NULL);
  for (int i = 0; i < 80; i++) {
    uint32_t prog = 64;
    int64_t n = 4096;
    uint64_t gxy = (uint64_t)cdiv(n, prog) | (1ull << 32), bxy = prog | (1ull << 32);
    uint32_t gz = 1, bz = 1;
    uint64_t t = klaraptor_launch_begin(ID, 1, &n, &gxy, &gz, &bxy, &bz, 0, NULL);
    fake_cudart_kernel(NULL, (uint32_t)bxy == 64 ? 5 : 40);
    klaraptor_launch_end(t);
  }
  CHECK(strstr(log_text(), "settled on block=64x1x1 grid=64x1x1 after launches="));
  CHECK(strstr(log_text(), "(candidate=program confidence=paired "));
  CHECK(run(NULL, 4096, 0) == 64);
  printf("ok controls\n");
}

/* The choices cache: the decision written with its evidence when the key settles, read by
 * the next run, a damaged file ignored with one warning and measured again. */
static void t_cache(void) {
  g_case = "cache";
  char dir[2200], path[4400], text[8192];
  snprintf(dir, sizeof dir, "%s/choices-cache/a/b", g_dir);
  /* a first run decides nothing but cliffs and clear wins (its length is not known), the
   * second the rest */
  CHECK(cache_runs(NULL, dir, 30, 4, NULL, NULL) == 2);
  int tmps = 0;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1 && tmps == 0);
  CHECK(strstr(path, "/stencil-") && read_file(path, text, sizeof text) > 0);
  CHECK(strstr(text, "version = 4\nkernel = _Z7stencilPfi\nname = stencil\n"
                     "code_hash = 00c0ffee00c0ffee\ndevice = NVIDIA H200\n"
                     "device_id = NVIDIA H200|sm=132|cc=9.0|bus_bits=0\ndata = n=4096\nblock = 128x1x1\nprogram_block = 64x1x1\n"
                     "candidate = model#2\nconfidence = paired\nlaunches = 44\npairs = 10\n"
                     "vs_program = 0.3000\nextra_us = 540.0\n"
                     "compared = model#1 256x1x1 vs program 64x1x1 pairs=2 mean=-0.60000 "
                     "sd=0.00000 verdict=win\n"
                     "compared = model#2 128x1x1 vs model#1 256x1x1 pairs=6 mean=-0.25000 "
                     "sd=0.00000 verdict=win\n"
                     "compared = model#3 512x1x1 vs model#2 128x1x1 pairs=1 mean=0.66667 "
                     "sd=0.00000 verdict=cliff\n"
                     "compared = program 64x1x1 vs model#2 128x1x1 pairs=1 mean=2.33333 "
                     "sd=0.00000 verdict=cliff\n"));
  /* the next run starts settled */
  fresh(NULL, dir);
  CHECK(run(NULL, 4096, 0) == 128);
  CHECK(fake_cudart_records == 0);
  CHECK(strstr(log_text(), "refine: settled on block=128x1x1 grid=32x1x1 from the choices "
                           "cache (candidate=model#2 confidence=paired pairs=10) "
                           "device=0:NVIDIA H200\n"));
  /* another size is another key */
  for (int i = 0; i < 30; i++) run(NULL, 8192, 0);
  klaraptor__save_progress_for_tests();
  fresh(NULL, dir);
  for (int i = 0; i < 30; i++) run(NULL, 8192, 0);
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 2);
  /* a damaged file: ignored (one warning, on stderr), measured again, rewritten (the model's
   * 256, a clear win, with no other shape to compare: decided in one run) */
  snprintf(dir, sizeof dir, "%s/choices-damaged", g_dir);
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  fresh("1", dir);
  for (int i = 0; i < 30; i++) run(NULL, 4096, 0);
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1);
  CHECK(write_text(path, "version = 4\nkernel = _Z7stencilPfi\nblock = 12") == 0);
  fresh("1", dir);
  fprintf(stderr, "--- expect one warning:\n");
  for (int i = 0; i < 30; i++) run(NULL, 4096, 0);
  fprintf(stderr, "---\n");
  unsetenv("KLARAPTOR_REFINE_WALK");
  CHECK(!strstr(log_text(), "from the choices cache"));
  CHECK(strstr(log_text(), "settled on block=256x1x1 grid=16x1x1 after launches="));
  CHECK(read_file(path, text, sizeof text) > 0 && strstr(text, "block = 256x1x1\n"));
  /* an unwritable directory: one warning, the run goes on (with the faster shape measured,
   * its first run's quadruples spent) */
  fresh(NULL, "/proc/klaraptor-no-such-dir");
  fprintf(stderr, "--- expect one warning:\n");
  for (int i = 0; i < 100; i++) run(NULL, 4096, 0);
  CHECK(run(NULL, 4096, 0) == 128);
  klaraptor__save_progress_for_tests();
  fprintf(stderr, "---\n");
  /* a directory not there yet, two levels below one that is: the first launch only looks
   * (nothing made on its path); the run's end makes it and writes the key's progress */
  snprintf(dir, sizeof dir, "%s/choices-later/a/b", g_dir);
  fresh(NULL, dir);
  run(NULL, 4096, 0);
  CHECK(access(dir, F_OK) != 0);
  for (int i = 0; i < 9; i++) run(NULL, 4096, 0);
  klaraptor__save_progress_for_tests();
  CHECK(progress_file(dir, path, sizeof path) == 1 ||
        choice_files(dir, path, sizeof path, &tmps) == 1);
  printf("ok cache\n");
}

/* Files of the rule before paired comparisons (version 1: unpaired medians) are measured
 * again; a file claiming a gain without the comparisons that show it is refused. */
static void t_old_rule(void) {
  g_case = "old_rule";
  char dir[2200], path[4400], text[8192];
  snprintf(dir, sizeof dir, "%s/choices-old", g_dir);
  CHECK(cache_runs(NULL, dir, 30, 4, NULL, NULL) == 2);
  int tmps;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1 && read_file(path, text, sizeof text) > 0);
  /* what the old rule wrote: a block and medians, no evidence */
  char old[8192];
  const char *key = strstr(text, "kernel = ");
  const char *key_end = key ? strstr(key, "block = ") : NULL;
  CHECK(key && key_end);
  snprintf(old, sizeof old, "version = 1\n%.*sblock = 512x1x1\ncandidate = model#3\n"
           "launches = 11\ntimes_us = 512x1x1:1.00 64x1x1:100.00\n",
           (int)(key_end - key), key);
  CHECK(write_text(path, old) == 0);
  fresh(NULL, dir);
  CHECK(run(NULL, 4096, 0) == 256); /* not the old file's 512: measured again */
  CHECK(strstr(log_text(), "refine: the choices cache holds a decision of an older rule: "
                           "measured again"));
  for (int i = 0; i < 29; i++) run(NULL, 4096, 0);
  klaraptor__save_progress_for_tests();
  CHECK(cache_runs(NULL, dir, 30, 4, NULL, NULL) == 1);
  CHECK(read_file(path, text, sizeof text) > 0 && strstr(text, "version = 4\n") &&
        strstr(text, "block = 128x1x1\n"));
  /* versions 2 and 3 (paired comparisons that could decide on a run's start): measured
   * again */
  for (int v = 2; v <= 3; v++) {
    char older[8192];
    snprintf(older, sizeof older, "version = %d%s", v,
             strstr(text, "version = 4") + strlen("version = 4"));
    CHECK(write_text(path, older) == 0);
    fresh(NULL, dir);
    CHECK(run(NULL, 4096, 0) == 256);
    CHECK(strstr(log_text(), "refine: the choices cache holds a decision of an older rule: "
                             "measured again"));
  }
  /* a claimed gain without evidence: 512 (the slowest of the model's) with no comparison */
  char *cmp = strstr(text, "compared = ");
  CHECK(cmp);
  *cmp = 0;
  char *blk = strstr(text, "block = 128x1x1\n");
  CHECK(blk);
  memcpy(blk, "block = 512x1x1\n", 16);
  CHECK(write_text(path, text) == 0);
  fresh(NULL, dir);
  fprintf(stderr, "--- expect one warning:\n");
  CHECK(run(NULL, 4096, 0) == 256);
  fprintf(stderr, "---\n");
  CHECK(!strstr(log_text(), "from the choices cache"));
  printf("ok old_rule\n");
}

/* Two threads on two streams: each timed launch belongs to its own stream. */
typedef struct worker_arg {
  void *stream;
  int launches;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  for (int i = 0; i < a->launches; i++) run(a->stream, 4096, 0);
  return NULL;
}

static void t_threads(void) {
  g_case = "threads";
  char dir[2200], path[4400], text[8192];
  snprintf(dir, sizeof dir, "%s/choices-threads", g_dir);
  for (int runs = 0; runs < 4 && !strstr(log_text(), "settled on"); runs++) {
    fresh(NULL, dir);
    pthread_t th[2];
    worker_arg args[2] = {{(void *)0x10, 200}, {(void *)0x20, 200}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    klaraptor__save_progress_for_tests();
  }
  int tmps;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1);
  CHECK(read_file(path, text, sizeof text) > 0);
  /* exact differences: no launch was timed across the two streams */
  CHECK(strstr(text, "block = 128x1x1\n"));
  CHECK(strstr(text, "compared = model#1 256x1x1 vs program 64x1x1 pairs=2 mean=-0.60000 "
                     "sd=0.00000 verdict=win\n"));
  CHECK(count(log_text(), "settled on") == 1);
  CHECK(fake_cudart_syncs == 0);
  printf("ok threads\n");
}

/* The budget: the quadruples' cost (their absolute paired differences) stays within 1 % of
 * the kernel time so far, after the first comparison's first two quadruples (free); the key
 * still settles on the fastest. A model whose first choice takes 100x the program's costs
 * the warm-up and one quadruple. */
static void t_budget(void) {
  g_case = "budget";
  fresh_paced(NULL);
  double total = 0, first_quad = 0;
  int settled_at = 0;
  for (int i = 0; i < 20000 && !settled_at; i++) {
    uint32_t bx = run(NULL, 4096, 0);
    total += kernel_us(bx);
    if (i % 50 == 49 && strstr(log_text(), "settled on")) settled_at = i + 1;
  }
  first_quad = 2 * 120; /* the first comparison's first two quadruples: |40 + 40 - 100 - 100| */
  CHECK(settled_at > 0);
  CHECK(strstr(log_text(), "settled on block=128x1x1 grid=32x1x1"));
  const char *x = strstr(log_text(), "extra_us=");
  CHECK(x);
  double extra = atof(x + strlen("extra_us="));
  if (extra > 0.01 * total + first_quad)
    fprintf(stderr, "over the budget: %.1f us of %.1f\n", extra, total);
  CHECK(extra <= 0.01 * total + first_quad);
  CHECK(settled_at > 100); /* unpaced, it settles in 30 launches: here they are spread out */
  CHECK(fake_cudart_syncs == 0);
  fresh_paced(NULL);
  g_cliff = 1;
  int at256 = 0, last = 0;
  for (int i = 0; i < 3000; i++) at256 += (last = (int)run(NULL, 4096, 0)) == 256;
  CHECK(at256 <= 3); /* the warm-up and the first quadruple's two (a cliff) */
  CHECK(last == 64);
  printf("ok budget\n");
}

/* A run that ends before the key settles leaves what it measured (the progress file, the
 * log's last word); the next run goes on from there instead of measuring again; a damaged
 * progress file is measured again, with one warning. */
static void t_progress(void) {
  g_case = "progress";
  char dir[2200], path[4400], text[16384];
  snprintf(dir, sizeof dir, "%s/choices-progress", g_dir);
  fresh_paced(dir);
  for (int i = 0; i < 150; i++) run(NULL, 4096, 0);
  CHECK(!strstr(log_text(), "settled on"));
  klaraptor__save_progress_for_tests();
  CHECK(strstr(log_text(), "refine: not settled at exit after launches=150: launching "));
  int tmps;
  CHECK(progress_file(dir, path, sizeof path) == 1 && choice_files(dir, text, 100, &tmps) == 0);
  CHECK(tmps == 0);
  CHECK(read_file(path, text, sizeof text) > 0 && strstr(text, "version = 4\n") &&
        strstr(text, "compared = model#1 256x1x1 vs program 64x1x1 pairs=2 "));
  int runs = 1;
  while (!strstr(log_text(), "settled on") && runs < 200) {
    fresh_paced(dir);
    runs++;
    for (int i = 0; i < 150; i++) run(NULL, 4096, 0);
    klaraptor__save_progress_for_tests();
  }
  CHECK(strstr(log_text(), "settled on block=128x1x1 grid=32x1x1 after launches="));
  CHECK(settled_after(log_text()) > 150);
  CHECK(progress_file(dir, path, sizeof path) == 0 && choice_files(dir, path, sizeof path, &tmps) == 1);
  /* damaged: one warning, measured again from the start */
  snprintf(dir, sizeof dir, "%s/choices-progress-damaged", g_dir);
  fresh_paced(dir);
  for (int i = 0; i < 150; i++) run(NULL, 4096, 0);
  klaraptor__save_progress_for_tests();
  CHECK(progress_file(dir, path, sizeof path) == 1 && read_file(path, text, sizeof text) > 0);
  char *us = strstr(text, "sum_us=");
  CHECK(us);
  memcpy(us, "sum_us=x", 8);
  CHECK(write_text(path, text) == 0);
  fresh_paced(dir);
  fprintf(stderr, "--- expect one warning:\n");
  CHECK(run(NULL, 4096, 0) == 256); /* warm-up */
  CHECK(run(NULL, 4096, 0) == 64);  /* the program's first quadruple, again */
  fprintf(stderr, "---\n");
  printf("ok progress\n");
}

/* Refinement of a kernel whose shared memory follows the block: the model's third shape
 * (512 threads, 64 KiB) is never tried, and every launch gets the amount for its shape. */
static void t_shmem(void) {
  g_case = "shmem";
  fresh(NULL, NULL);
  int64_t n = 4096;
  int wrong = 0;
  for (int i = 0; i < 30; i++) {
    uint32_t prog_bx = 64;
    uint64_t gxy = (uint64_t)cdiv(n, prog_bx) | (1ull << 32), bxy = prog_bx | (1ull << 32);
    uint32_t gz = 1, bz = 1;
    uint64_t shmem = prog_bx * 128;
    uint64_t t = klaraptor_launch_begin_shmem(ID5, 1, &n, &gxy, &gz, &bxy, &bz, &shmem, NULL);
    uint32_t bx = (uint32_t)bxy;
    if (bx == 512 || shmem != (uint64_t)bx * 128) {
      fprintf(stderr, "launch %d: block %u with %" PRIu64 " bytes\n", i + 1, bx, shmem);
      wrong++;
    }
    fake_cudart_kernel(NULL, kernel_us(bx));
    klaraptor_launch_end(t);
  }
  CHECK(wrong == 0);
  const char *log = log_text();
  CHECK(strstr(log, "klaraptor: shared n=4096 refine: trying 2 of 32 shapes and the "
                    "program's 64x1x1 (model#1=256x1x1 model#2=128x1x1) "
                    "device=0:NVIDIA H200\n"));
  CHECK(strstr(log, "klaraptor: shared n=4096 refine: settled on block=128x1x1"));
  printf("ok shmem\n");
}

/* ---------------------------------------------------------------------------------------- */
/* Launch patterns of real programs                                                         */

/* The launch pattern's clock: the time of a launch of width bx is base(bx) x drift x noise. */
/* g_base: per width, microseconds (0: 9x the program's) */
static double g_sigma;          /* relative noise per launch */
static double g_drift_n;        /* (N - t)^2 / N^2 drift over launches when nonzero */
static double pattern_us(uint32_t bx) {
  double b = bx <= 1024 && g_base[bx] > 0 ? g_base[bx] : 9 * g_base[64];
  double d = 1;
  if (g_drift_n > 0) {
    double left = g_drift_n - g_launch_t;
    d = left > 1 ? left * left / (g_drift_n * g_drift_n) : 1 / (g_drift_n * g_drift_n);
  }
  double x = b * d * (1 + g_sigma * nrand());
  return x > 0.01 ? x : 0.01;
}

static void pattern(double prog64, double m256, double m128, double m512, double sigma) {
  memset(g_base, 0, sizeof g_base);
  g_base[64] = prog64;
  g_base[256] = m256;
  g_base[128] = m128;
  g_base[512] = m512;
  for (uint32_t x = 32; x <= 1024; x += 32)
    if (!g_base[x]) g_base[x] = 2 * prog64; /* the walk's neighbours: far slower */
  g_sigma = sigma;
  g_drift_n = 0;
  g_launch_t = 0;
  g_time = pattern_us;
}

/* The block a key ended with: the settled or kept one in the log, else the last launch's. */
static uint32_t final_block(const char *log, const char *key, uint32_t last) {
  char want[256];
  const char *forms[] = {"refine: settled on block=", "refine: kept block="};
  for (int i = 0; i < 2; i++) {
    snprintf(want, sizeof want, "%s %s", key, forms[i]);
    const char *at = strstr(log, want);
    if (at) return (uint32_t)atoi(at + strlen(want));
  }
  return last;
}

/* Noise: one comparison (the program's 64 against the model's 256, 100 us kernels;
 * KLARAPTOR_REFINE=1, no walk) under per-launch noise of sigma 0.5 to 15 % and a true difference of -10 to +10 %,
 * many seeds each. A challenger not truly faster is chosen in at most 1 % of the runs; a
 * true 10 % gain is found in nearly all with sigma up to 5 %. */
static void t_noise(void) {
  g_case = "noise";
  static const double sigmas[] = {0.005, 0.02, 0.05, 0.10, 0.15};
  static const double diffs[] = {-0.10, -0.05, -0.02, 0.0, 0.02, 0.05, 0.10};
  const int seeds = 150;
  int false_switch = 0, not_faster = 0, found10 = 0, tries10 = 0;
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  for (size_t si = 0; si < sizeof sigmas / sizeof sigmas[0]; si++)
    for (size_t di = 0; di < sizeof diffs / sizeof diffs[0]; di++)
      for (int seed = 0; seed < seeds; seed++) {
        fresh("1", NULL);
        g_rng = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1) + si * 131 + di;
        pattern(100, 100 * (1 + diffs[di]), 0, 0, sigmas[si]);
        uint32_t last = 0;
        for (int i = 0; i < 140; i++) last = run(NULL, 4096, 0);
        uint32_t fin = final_block(log_text(), "stencil n=4096", last);
        if (diffs[di] >= 0) {
          not_faster++;
          false_switch += fin == 256;
        }
        if (diffs[di] <= -0.10 && sigmas[si] <= 0.05) {
          tries10++;
          found10 += fin == 256;
        }
      }
  unsetenv("KLARAPTOR_REFINE_WALK");
  fprintf(stderr, "noise: %d false switches of %d; a 10 %% gain found in %d of %d\n",
          false_switch, not_faster, found10, tries10);
  CHECK(false_switch * 100 <= not_faster);
  CHECK(found10 * 100 >= 95 * tries10);
  printf("ok noise\n");
}

/* The program's shape truly best by 3 to 5 %, the work shrinking with the loop's step as
 * (N - t)^2 over 300 steps (a few per cent from one launch to the next few: whatever is timed
 * later looks faster), 2 % noise: kept, in every seed. */
static void t_drift_keep(void) {
  g_case = "drift_keep";
  int kept = 0, seeds = 40;
  for (int seed = 0; seed < seeds; seed++) {
    fresh(NULL, NULL);
    g_rng = 1234567ull + 7919ull * (uint64_t)seed;
    double gap = 1.03 + 0.02 * (seed % 3) / 2.0; /* 3, 4, 5 % */
    pattern(100, 100 * gap, 100 * (gap + 0.01), 100 * (gap + 0.2), 0.02);
    g_drift_n = 300;
    uint32_t last = 0;
    for (g_launch_t = 0; g_launch_t < 299; g_launch_t++) last = run(NULL, 4096, 0);
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin == 64) kept++;
    else fprintf(stderr, "drift_keep seed %d: ended on %u\n", seed, fin);
  }
  CHECK(kept == seeds);
  printf("ok drift_keep\n");
}

/* A 5 us kernel with 150 to 250 us of host work between launches (drifting), launches that
 * take 4 us to reach an idle GPU: whatever is chosen is never more than 3 % slower than the
 * program's own shape, in any seed, and a true gain is still found. */
static void t_host_gaps(void) {
  g_case = "host_gaps";
  int seeds = 40, worse = 0, gained = 0;
  for (int seed = 0; seed < seeds; seed++) {
    fresh(NULL, NULL);
    fake_cudart_latency_us = 4;
    g_rng = 424242ull + 104729ull * (uint64_t)seed;
    /* odd seeds: the model's 256 is 8 % faster; even: 6 % slower */
    double m = seed % 2 ? 4.6 : 5.3;
    pattern(5, m, 5.5, 6, 0.03);
    uint32_t last = 0;
    for (int i = 0; i < 1500; i++) {
      last = run(NULL, 4096, 0);
      fake_cudart_host(150 + 100 * urand() + 50.0 * i / 1500);
    }
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    double t = fin == 64 ? 5 : fin == 256 ? m : fin == 128 ? 5.5 : fin == 512 ? 6 : 10;
    if (t > 1.03 * 5) {
      worse++;
      fprintf(stderr, "host_gaps seed %d: ended on %u\n", seed, fin);
    }
    gained += seed % 2 && fin == 256;
  }
  CHECK(worse == 0);
  CHECK(gained >= seeds / 2 - 2);
  printf("ok host_gaps\n");
}

/* Gaussian elimination's pattern: per step t a short row kernel (stencil, 2 us) then a
 * synchronisation, host work, an update kernel (other, 5 us) then a synchronisation, both
 * keys' work shrinking as (N - t)^2, launches taking 4 us to reach the idle GPU, 2 % noise.
 * Each settles on its own fastest: the row kernel on 128 (20 % faster than the program's
 * 64), the update kernel keeps the program's 64 (its model's shapes are 8 % and more
 * slower). */
static double g_other_base[1025];
static uint32_t run_other_drift(void *stream) {
  int64_t n = 4096;
  uint32_t prog = 64;
  uint64_t gxy = (uint64_t)cdiv(n, prog) | (1ull << 32), bxy = prog | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID2, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  double b = bx <= 1024 && g_other_base[bx] > 0 ? g_other_base[bx] : 20;
  double left = g_drift_n - g_launch_t;
  fake_cudart_kernel(stream, b * left * left / (g_drift_n * g_drift_n) * (1 + 0.02 * nrand()));
  klaraptor_launch_end(t);
  return bx;
}

static void t_elimination(void) {
  g_case = "elimination";
  for (int seed = 0; seed < 10; seed++) {
    fresh(NULL, NULL);
    fake_cudart_latency_us = 4;
    g_rng = 777ull + 31ull * (uint64_t)seed;
    pattern(2.0, 2.4, 1.6, 3.0, 0.02);
    memset(g_other_base, 0, sizeof g_other_base);
    g_other_base[64] = 5.0;
    g_other_base[256] = 5.6;
    g_other_base[128] = 5.4;
    g_other_base[512] = 7.0;
    g_drift_n = 1024;
    uint32_t a = 0, b = 0;
    for (g_launch_t = 0; g_launch_t < 1023; g_launch_t++) {
      a = run(NULL, 4096, 0);
      fake_cudart_host_sync();
      fake_cudart_host(30);
      b = run_other_drift(NULL);
      fake_cudart_host_sync();
    }
    const char *log = log_text();
    uint32_t fa = final_block(log, "stencil n=4096", a), fb = final_block(log, "other n=4096", b);
    if (fa != 128 || fb != 64) fprintf(stderr, "elimination seed %d: %u and %u\n", seed, fa, fb);
    CHECK(fa == 128 && fb == 64);
  }
  CHECK(fake_cudart_syncs == 0);
  printf("ok elimination\n");
}

/* The kernel's handle as the launch entry point is given it (the fake knows it by address). */
static const char g_st_handle[1];

/* One launch the way an instrumented program makes it: through the launch entry point,
 * which tells the runtime (klaraptor__launch_starts: the gate, the start event) before the
 * fake GPU loads the kernel if it is not loaded yet (fake_cudart_load_us) and runs it, then
 * again after it (klaraptor__launch_stops: the end event, the gate opens). No stream is
 * left held. */
static int g_left_held;
static uint32_t run_entry(void *stream, int64_t n) {
  uint32_t prog_bx = 64;
  uint64_t gxy = (uint64_t)cdiv(n, prog_bx) | (1ull << 32), bxy = prog_bx | (1ull << 32);
  uint32_t gz = 1, bz = 1;
  uint64_t t = klaraptor_launch_begin(ID, 1, &n, &gxy, &gz, &bxy, &bz, 0, stream);
  uint32_t bx = (uint32_t)bxy;
  uint32_t gate = klaraptor__launch_starts((void *)g_st_handle, stream, 0);
  fake_cudart_launch(g_st_handle, stream, kernel_us(bx));
  klaraptor__launch_stops(stream, 0, gate);
  klaraptor_launch_end(t);
  g_left_held += fake_cudart_gated();
  return bx;
}

/* A key launched ten times a run, back to back, run again and again with one choices cache
 * and the default budget; the GPU three launches behind the host, the first launch loading
 * the kernel (5 ms): the first launch of a run is never timed, the paired evidence is carried
 * from run to run, and the key decides within two runs; later runs launch it from the cache
 * without a timed launch. The same with a model's first choice 3 % slower than the program's
 * (2 % noise): kept. */
static void t_ten(void) {
  g_case = "ten";
  char dir[2200], path[4400];
  snprintf(dir, sizeof dir, "%s/choices-ten", g_dir);
  int decided_run = 0;
  for (int run = 1; run <= 12 && !decided_run; run++) {
    fresh_paced(dir);
    fake_cudart_load_us = 5000;
    fake_cudart_gpu_follows = 0;
    for (int i = 0; i < 10; i++) {
      int before = fake_cudart_records;
      run_entry(NULL, 4096);
      if (i == 0) CHECK(fake_cudart_records == before); /* the cold first launch: untimed */
      double behind = fake_cudart_busy_until() - 3 * 100;
      if (behind > fake_cudart_gpu_us) fake_cudart_gpu_us = behind;
    }
    fake_cudart_host_sync(); /* the program's last copy back */
    klaraptor__save_progress_for_tests();
    if (strstr(log_text(), "settled on") || strstr(log_text(), "kept block=")) decided_run = run;
  }
  fake_cudart_load_us = 0;
  CHECK(decided_run > 0 && decided_run <= 2);
  CHECK(strstr(log_text(), "settled on block=256x1x1"));
  int tmps;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1 && progress_file(dir, path, 100) == 0);
  fresh_paced(dir);
  CHECK(run_entry(NULL, 4096) == 256 && fake_cudart_records == 0);
  CHECK(strstr(log_text(), "from the choices cache"));
  CHECK(fake_cudart_syncs == 0);

  /* the model's first choice 3 % slower, 2 % noise: the program's shape is kept */
  snprintf(dir, sizeof dir, "%s/choices-ten-close", g_dir);
  for (int seed = 0; seed < 10; seed++) {
    char d2[2300];
    snprintf(d2, sizeof d2, "%s-%d", dir, seed);
    uint32_t last = 0;
    int runs = 0;
    for (; runs < 60; runs++) {
      fresh_paced(d2);
      g_rng = 99991ull * (uint64_t)(seed + 1) + (uint64_t)runs;
      pattern(100, 103, 130, 150, 0.02);
      for (int i = 0; i < 10; i++) last = run_entry(NULL, 4096);
      klaraptor__save_progress_for_tests();
      if (strstr(log_text(), "settled on") || strstr(log_text(), "kept block=")) break;
    }
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin != 64) fprintf(stderr, "ten seed %d: ended on %u after %d runs\n", seed, fin, runs);
    CHECK(fin == 64);
  }
  printf("ok ten\n");
}

/* A Cholesky update's trailing matrix, 300 launches a run (issue 41's lu_tri on an H200):
 * the program's 64 goes from 6.3 to 5.6 us over the run; the model's 256 takes 6.5 us over
 * the first third (3 % slower) and then falls to 4.2 us, 3.6 % faster over the whole run. A
 * comparison timed where the budget lets it run, early, sees the first part only. With the
 * choices cache (the decision kept for later runs), the first run decides nothing but a
 * cliff, and later runs judge it by thirds of the run: the model's shape wins, in every seed,
 * within four runs. With no cache (a run's decisions last that run), the run's start decides,
 * as before. The same program's shape truly best by 3 to 5 % under (N - t)^2 drift, with
 * the cache: kept in every seed. */
static int g_cross_n;
static double cross_us(uint32_t bx) {
  double f = (double)g_launch_t / g_cross_n, x;
  if (bx == 64)
    x = 6.3 - 0.7 * f;
  else if (bx == 256)
    x = f < 1.0 / 3 ? 6.5 : 6.5 - 2.3 * (f - 1.0 / 3) * 1.5;
  else
    x = 20;
  x *= 1 + g_sigma * nrand();
  return x > 0.01 ? x : 0.01;
}

static void cross_setup(int run) {
  (void)run;
  g_sigma = 0.01;
  g_time = cross_us;
}

static uint32_t cross_runs(const char *choices, int max_runs, int *runs_out) {
  uint32_t last = 0;
  g_paced = 1;
  *runs_out = cache_runs("1", choices, g_cross_n, max_runs, cross_setup, &last);
  g_paced = 0;
  return final_block(log_text(), "stencil n=4096", last);
}

static int g_seed;
static void crossdrift_setup(int run) {
  g_rng = 1234567ull + 7919ull * (uint64_t)g_seed + (uint64_t)run;
  double gap = 1.03 + 0.02 * (g_seed % 3) / 2.0;
  pattern(100, 100 * gap, 100 * (gap + 0.01), 100 * (gap + 0.2), 0.02);
  g_drift_n = 300;
}

static void t_crossover(void) {
  g_case = "crossover";
  g_cross_n = 300;
  int won = 0, seeds = 20, most_runs = 0, early = 0;
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  for (int seed = 0; seed < seeds; seed++) {
    char dir[2300];
    snprintf(dir, sizeof dir, "%s/choices-crossover-%d", g_dir, seed);
    g_rng = 4242ull + 7919ull * (uint64_t)seed;
    int runs = 0;
    uint32_t fin = cross_runs(dir, 8, &runs);
    if (fin == 256) won++;
    else fprintf(stderr, "crossover seed %d: ended on %u after %d runs\n", seed, fin, runs);
    most_runs = runs > most_runs ? runs : most_runs;
    CHECK(strstr(log_text(), ", over the run)"));
    /* no cache: the run's start decides (the program's shape kept) */
    g_rng = 4242ull + 7919ull * (uint64_t)seed;
    early += cross_runs(NULL, 1, &runs) == 64;
  }
  fprintf(stderr, "crossover: the whole run's faster shape in %d of %d seeds within %d runs; "
          "without a cache, the run's start decided in %d\n", won, seeds, most_runs, early);
  CHECK(won == seeds && most_runs <= 4);
  CHECK(early * 2 > seeds);
  /* the program's shape best by 3 to 5 % under drift, with the cache: kept */
  int kept = 0;
  g_paced = 1;
  for (g_seed = 0; g_seed < 20; g_seed++) {
    char dir[2300];
    snprintf(dir, sizeof dir, "%s/choices-crossdrift-%d", g_dir, g_seed);
    uint32_t last = 0;
    cache_runs("1", dir, 299, 8, crossdrift_setup, &last);
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin == 64) kept++;
    else fprintf(stderr, "crossover drift seed %d: ended on %u\n", g_seed, fin);
  }
  g_paced = 0;
  CHECK(kept == 20);
  unsetenv("KLARAPTOR_REFINE_WALK");
  printf("ok crossover\n");
}

/* A kernel whose first launches of a run are not its run (lu_tri's chol_column on an
 * H200, whose comparison read 8 faster than 256 by 4-5 % in each third of the run and then,
 * its later quadruples timed from a run's start, +1.5 %): the model's 256 is 5 % faster than
 * the program's 64 except over each run's first twentieth, where it is 15 % slower (caches
 * and clocks still settling); 4 % faster over the run. A comparison whose quadruples cover
 * the run finds it; one timed from a run's start does not. With the cache, the key ends on
 * 256 in every seed. */
static double start_us(uint32_t bx) {
  double f = (double)g_launch_t / g_cross_n, x = 20;
  if (bx == 64)
    x = 40; /* (windows of 40 us: the short-kernel rule for windows not held is not at play) */
  else if (bx == 256)
    x = f < 0.05 ? 46 : 38;
  x *= 1 + g_sigma * nrand();
  return x > 0.01 ? x : 0.01;
}

static void start_setup(int run) {
  (void)run;
  g_sigma = 0.01;
  g_time = start_us;
}

static void t_run_start(void) {
  g_case = "run_start";
  g_cross_n = 400;
  int won = 0, seeds = 20, most = 0;
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  for (int seed = 0; seed < seeds; seed++) {
    char dir[2300];
    snprintf(dir, sizeof dir, "%s/choices-run-start-%d", g_dir, seed);
    g_rng = 31337ull + 7919ull * (uint64_t)seed;
    uint32_t last = 0;
    int runs = cache_runs("1", dir, g_cross_n, 12, start_setup, &last);
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin == 256) won++;
    else fprintf(stderr, "run_start seed %d: ended on %u after %d runs\n", seed, fin, runs);
    most = runs > most ? runs : most;
  }
  unsetenv("KLARAPTOR_REFINE_WALK");
  fprintf(stderr, "run_start: the run's faster shape in %d of %d seeds within %d runs\n", won,
          seeds, most);
  CHECK(won == seeds);
  printf("ok run_start\n");
}

/* Runs of another length than the last, and caches that cannot keep anything:
 * - the crossover pattern with a first run of 60 launches and later ones of 600: pairs are
 *   placed in their run when it ends, so a run ten times longer than the last is not judged
 *   on its start (the model's 256 in every seed);
 * - a choices directory that cannot be written is no cache: the run decides from what it has
 *   seen (the model's 10 % gain, settled in the first run);
 * - a part of the run that is never timed (the stream captured over each run's last twelfth)
 *   ends the comparison undecided within a few runs, instead of holding it open for ever. */
static void t_run_lengths(void) {
  g_case = "run_lengths";
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  int won = 0;
  for (int seed = 0; seed < 10; seed++) {
    char dir[2300];
    snprintf(dir, sizeof dir, "%s/choices-grow-%d", g_dir, seed);
    g_rng = 2718ull + 7919ull * (uint64_t)seed;
    uint32_t last = 0;
    for (int runs = 0; runs < 8; runs++) {
      fresh("1", dir);
      g_sigma = 0.01;
      g_time = cross_us;
      g_cross_n = runs == 0 ? 60 : 600;
      for (g_launch_t = 0; g_launch_t < g_cross_n; g_launch_t++) last = run(NULL, 4096, 0);
      klaraptor__save_progress_for_tests();
      if (strstr(log_text(), "settled on") || strstr(log_text(), "kept block=")) break;
    }
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin == 256) won++;
    else fprintf(stderr, "run_lengths seed %d: ended on %u\n", seed, fin);
  }
  CHECK(won == 10);
  /* a directory below a regular file: nothing can be written there */
  char file[2300], dir[2400];
  snprintf(file, sizeof file, "%s/a-file", g_dir);
  CHECK(write_text(file, "x") == 0);
  snprintf(dir, sizeof dir, "%s/sub", file);
  fresh("1", dir);
  pattern(40, 36, 0, 0, 0.01);
  fprintf(stderr, "--- expect one warning:\n");
  for (int i = 0; i < 400; i++) run(NULL, 4096, 0);
  fprintf(stderr, "---\n");
  CHECK(strstr(log_text(), "refine: settled on block=256x1x1 grid=16x1x1 after launches="));
  /* the last twelfth of every run captured */
  snprintf(dir, sizeof dir, "%s/choices-captured-end", g_dir);
  void *st = (void *)0x4000;
  int runs = 0, ended = 0;
  for (; runs < 10 && !ended; runs++) {
    fresh("1", dir);
    pattern(40, 39.6, 0, 0, 0.01); /* 1 % apart: a comparison that needs every part */
    for (int i = 0; i < 480; i++) {
      fake_cudart_capturing = i >= 440 ? st : (void *)-1;
      run(st, 4096, 0);
    }
    fake_cudart_capturing = (void *)-1;
    klaraptor__save_progress_for_tests();
    ended = strstr(log_text(), "settled on") || strstr(log_text(), "kept block=");
  }
  if (!ended) fprintf(stderr, "%s", log_text());
  CHECK(ended && runs <= 5);
  unsetenv("KLARAPTOR_REFINE_WALK");
  printf("ok run_lengths\n");
}

/* Gaussian elimination's short kernels on an H200, through the launch entry point: a 2 us
 * kernel launched alone between synchronisations, each launch reaching the idle GPU 4 to
 * 9 us after its call (the jitter of a real launch's latency is larger than the difference
 * between the shapes), 2 % noise in the kernel itself. With the gate the windows hold the
 * kernels alone: a model's first choice 15 % slower than the program's loses (the program's
 * shape is kept: it did not on the rule before the gate, which held this key unmeasurable
 * and kept the model's choice), one 15 % faster wins, in every seed; no stream is ever left
 * held. Where the driver refuses the gate, windows are as before (the latency in them), and
 * some seeds end on the wrong shape. */
static int short_right(int refused, int seeds) {
  int right = 0;
  for (int seed = 0; seed < 2 * seeds; seed++) {
    fresh("1", NULL);
    fake_cudart_gates = 0;
    fake_cudart_wait_refused = refused;
    fake_cudart_latency_us = 4;
    fake_cudart_latency_jitter_us = 5;
    g_rng = 777ull + 7919ull * (uint64_t)seed;
    int slower = seed % 2 == 0; /* the model's 256: 15 % slower, or 15 % faster */
    pattern(2.0, slower ? 2.3 : 1.7, 0, 0, 0.02);
    uint32_t last = 0;
    for (int i = 0; i < 600; i++) {
      last = run_entry(NULL, 4096);
      fake_cudart_host_sync();
      fake_cudart_host(3);
    }
    uint32_t fin = final_block(log_text(), "stencil n=4096", last);
    if (fin == (slower ? 64u : 256u))
      right++;
    else if (!refused)
      fprintf(stderr, "short_gated seed %d: ended on %u\n", seed, fin);
    if (refused ? fake_cudart_gates != 0 : fake_cudart_gates == 0) right = -1000;
  }
  fake_cudart_wait_refused = 0;
  fake_cudart_latency_us = 0;
  fake_cudart_latency_jitter_us = 0;
  return right;
}

static void t_short_gated(void) {
  g_case = "short_gated";
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  int seeds = 20;
  g_left_held = 0;
  fake_cudart_gate_stuck = 0;
  int gated = short_right(0, seeds), refused = short_right(1, seeds);
  unsetenv("KLARAPTOR_REFINE_WALK");
  fprintf(stderr, "short_gated: right in %d of %d seeds with the gate, %d without\n", gated,
          2 * seeds, refused);
  CHECK(gated == 2 * seeds);
  CHECK(refused >= 0 && refused < 2 * seeds);
  CHECK(g_left_held == 0 && fake_cudart_gate_stuck == 0);
  /* the word's page is pinned once per process, however often the gate is made again */
  CHECK(fake_cudart_registered == 1);
  printf("ok short_gated\n");
}

/* Noise too large to resolve anything (a spread of 80 % per launch): the key is unmeasurable
 * and keeps the model's first choice; a challenger 3 % faster under 8 % noise stays
 * undecided after RF_QUADS_MAX quadruples, and the program's own shape is kept, never reported
 * as settled; unless the kernel is short (windows under 20 us, which a launch's latency could
 * fill): then it is unmeasurable and keeps the model's first choice. */
static void undecided_close(int run) {
  (void)run;
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  pattern(100, 97, 0, 0, 0.08);
}
static void undecided_short(int run) {
  (void)run;
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  pattern(10, 9.7, 0, 0, 0.08);
}

static void t_undecided(void) {
  g_case = "undecided";
  char dir[2200], path[4400], text[8192];
  snprintf(dir, sizeof dir, "%s/choices-undecided", g_dir);
  fresh("1", dir);
  setenv("KLARAPTOR_REFINE_WALK", "off", 1);
  g_rng = 5;
  pattern(10, 10, 0, 0, 0.8);
  for (int i = 0; i < 200; i++) run(NULL, 4096, 0);
  CHECK(strstr(log_text(), "refine: kept block=256x1x1 grid=16x1x1 after launches="));
  CHECK(strstr(log_text(), "(candidate=model#1 confidence=unmeasurable "));
  int tmps;
  CHECK(choice_files(dir, path, sizeof path, &tmps) == 1 && read_file(path, text, sizeof text) > 0);
  CHECK(strstr(text, "confidence = unmeasurable\n") && strstr(text, "block = 256x1x1\n"));
  fresh("1", dir);
  CHECK(run(NULL, 4096, 0) == 256 && strstr(log_text(), "refine: kept block=256x1x1 grid=16x1x1 "
                                                        "from the choices cache"));
  unlink(path);
  g_rng = 6;
  uint32_t last = 0;
  cache_runs("1", dir, 400, 6, undecided_close, &last); /* 3 % faster, under 8 % noise */
  const char *log = log_text();
  if (!strstr(log, "refine: kept block=64x1x1 grid=64x1x1 after launches="))
    fprintf(stderr, "%s", log);
  CHECK(strstr(log, "refine: kept block=64x1x1 grid=64x1x1 after launches="));
  CHECK(strstr(log, "(candidate=program confidence=undecided pairs=24 "));
  CHECK(!strstr(log, "settled on"));
  CHECK(last == 64);
  /* the same with a 10 us kernel, windows a launch's latency could fill: unmeasurable, the
   * model's first choice */
  unlink(path);
  g_rng = 6;
  cache_runs("1", dir, 400, 6, undecided_short, &last);
  log = log_text();
  CHECK(strstr(log, "against the incumbent program=64x1x1: unmeasurable after pairs=24"));
  CHECK(strstr(log, "refine: kept block=256x1x1 grid=16x1x1 after launches="));
  fresh("1", dir); /* the next run launches the model's first choice from the cache */
  CHECK(run(NULL, 4096, 0) == 256);
  unsetenv("KLARAPTOR_REFINE_WALK");
  printf("ok undecided\n");
}

static int scenario_unit(void) {
  t_order();
  t_deferred();
  t_ranked_once();
  t_capture();
  t_failed();
  t_walk();
  t_span();
  t_many_keys();
  t_controls();
  t_cache();
  t_old_rule();
  t_threads();
  t_budget();
  t_progress();
  t_devices();
  t_shmem();
  t_noise();
  t_drift_keep();
  t_host_gaps();
  t_elimination();
  t_ten();
  t_crossover();
  t_run_start();
  t_run_lengths();
  t_short_gated();
  t_undecided();
  if (!g_failures) printf("all refinement cases passed\n");
  return g_failures != 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Several processes                                                                        */

/* Rounds of: the cache file removed; two processes settle the same key at the same moment
 * and write it; a third reads it all the while. The file is never seen half-written, and
 * no temporary file is left. */
static int scenario_processes(void) {
  g_case = "processes";
  char dir[2200], path[4400];
  snprintf(dir, sizeof dir, "%s/choices-processes", g_dir);
  for (int round = 0; round < 30; round++) {
    int tmps;
    if (choice_files(dir, path, sizeof path, &tmps) == 1) unlink(path);
    int go[2];
    if (pipe(go) != 0) return 2;
    pid_t kids[3];
    for (int k = 0; k < 3; k++) {
      kids[k] = fork();
      if (kids[k] == 0) {
        close(go[1]);
        char c;
        if (read(go[0], &c, 1) < 0) _exit(3);
        if (k < 2) {
          /* the model's shape, a clear win and the only challenger: settled in this run */
          setenv("KLARAPTOR_REFINE_WALK", "off", 1);
          fresh("1", dir);
          for (int i = 0; i < 30; i++) run(NULL, 4096, 0);
          _exit(0);
        }
        /* the reader: every complete read is a whole file */
        for (int i = 0; i < 2000; i++) {
          char p2[4400], text[8192];
          int t2;
          if (choice_files(dir, p2, sizeof p2, &t2) != 1) continue;
          int n = read_file(p2, text, sizeof text);
          if (n < 0) continue; /* renamed away between listing and opening */
          if (!strstr(text, "verdict=win\n") || text[n - 1] != '\n') {
            fprintf(stderr, "half a file: %s\n", text);
            _exit(1);
          }
        }
        _exit(0);
      }
    }
    close(go[0]);
    close(go[1]); /* EOF releases all three at once */
    for (int k = 0; k < 3; k++) {
      int st = 0;
      waitpid(kids[k], &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "round %d: process %d failed\n", round, k);
        return 1;
      }
    }
    if (choice_files(dir, path, sizeof path, &tmps) != 1 || tmps != 0) {
      fprintf(stderr, "round %d: %d temporary files left\n", round, tmps);
      return 1;
    }
    char text[8192];
    if (read_file(path, text, sizeof text) <= 0 || !strstr(text, "block = 256x1x1\n")) {
      fprintf(stderr, "round %d: bad file\n", round);
      return 1;
    }
  }
  printf("ok processes\n");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 3) {
    fprintf(stderr, "usage: test_refine unit|processes <dir>\n");
    return 2;
  }
  snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
  mkdir(g_dir, 0755);
  klaraptor__set_device_query(NULL, NULL); /* the fake CUDA runtime's devices */
  if (strcmp(argv[1], "unit") == 0) return scenario_unit();
  if (strcmp(argv[1], "processes") == 0) return scenario_processes();
  fprintf(stderr, "unknown scenario %s\n", argv[1]);
  return 2;
}

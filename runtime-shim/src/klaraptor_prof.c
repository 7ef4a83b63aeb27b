/* klaraptor profiling runtime: carried by every object klaraptor-cc instruments
 * (klaraptor_embed.c), inactive unless the environment below asks it to profile.
 *
 * The calls of the entry point nvcc's host stubs launch through reach
 * __wrap___cudaLaunchKernel below (same signature), which reaches the CUDA runtime's own as
 * __real___cudaLaunchKernel: in the carried copy, build.rs renames them
 * klaraptor__launch_kernel and __cudaLaunchKernel, and klaraptor-cc routes the instrumented
 * object's launches to the first; a program linked with the archive and
 * `--wrap=__cudaLaunchKernel` (the shim's tests) gets the same. klaraptor_select tells
 * this file (through klaraptor__set_profile_note) of
 * each launch of an annotated kernel; the launch that follows on the same thread with the
 * same dims is that kernel's. For the first few distinct data sizes of each kernel, the
 * launch is swept over the block shapes of the sampling plan before the program's own
 * launch is made, so the program continues as it would.
 *
 * Environment (set by klaraptor-cc when it runs the profiling variant):
 *   KLARAPTOR_PROFILE_OUT  a directory; per kernel, <fnv64(id)>.jsonl gets one JSON line per
 *                          shape, and kernels.tsv maps the file names to the kernels.
 *   KLARAPTOR_PROFILE_PLAN a file of lines "<mangled id> <bx>x<by>x<bz> ..." (the shapes).
 *   KLARAPTOR_COLLECTOR    the collector library (libklaraptor_collector.so), or "launch"
 *                          to only launch each shape once and log it (for running under
 *                          ncu, which then does the measuring).
 *   KLARAPTOR_PROFILE_RUNS, KLARAPTOR_PROFILE_WARMUP  timed and warm-up runs (default 5, 1).
 *   KLARAPTOR_PROFILE_PREFETCH  0: the collector is loaded by the first sweep. Otherwise (the
 *                          default) a thread loads and starts it as the program starts
 *                          (klaraptor_collect_prepare), hidden behind the program's own start.
 *   KLARAPTOR_PROFILE_MAX_SIZES  distinct data sizes profiled per kernel per run (default 4).
 *   KLARAPTOR_PROFILE_PROGRAM  1: the program's own block (the launch's, as the program made
 *                          it) is evidence too (issue 38): at each sweep it is swept beside the
 *                          plan's shapes when the plan lacks it and it is a legal shape there
 *                          (the device's limits, the kernel's constraints, a grid: the checks
 *                          of the plan's shapes), and the records name it with a line
 *                          {"program":true,"sizes":[…],"block":[…]} (written before the sweep's
 *                          samples, for a legal block, also when the plan has it; not in
 *                          "launch" mode, whose log marks the program's launches "own"). 0 (the
 *                          default): the plan's shapes only. klaraptor-cc and klaraptor
 *                          validate set it.
 *   KLARAPTOR_PROFILE_SKIP a file of lines "<mangled id> <sizes> <bx>x<by>x<bz> ..." (sizes:
 *                          the data values joined by commas, "-" for none): the sweep of that
 *                          kernel at those sizes leaves the shapes listed out (a sweep left
 *                          with none is not made), and sends the others to the collector one
 *                          per request. klaraptor-cc writes it to resume a run that stopped at
 *                          a fault (below) without the shapes it has, and with the shapes of
 *                          the sweep that faulted run alone, so that a fault loses no other
 *                          shape's sample.
 *   KLARAPTOR_PROGRESS     where to report the sweeps' progress (klaraptor-cc reads it while
 *                          the recipe runs): a file, appended to, or "fd:<n>", an open file
 *                          descriptor. One line per event, fields separated by tabs, each
 *                          line written whole by one write(2) (so several processes can
 *                          share the file):
 *     sweep <kernel> <sizes> <n>                      a sweep of n planned shapes begins
 *     shape <kernel> <sizes> <i> <n> <block> <status> <ms>
 *                                                     the i-th shape (1..n) of the sweep is
 *                                                     done; status: ok (measured), failed
 *                                                     (its record says why), rejected (not
 *                                                     launchable at this size), launched
 *                                                     (KLARAPTOR_COLLECTOR=launch); ms since
 *                                                     the sweep began
 *     end <kernel> <sizes> <ok> <not ok> <ms>         the sweep is over (one that stopped at a
 *                                                     fault, below, reports no shape it did
 *                                                     not send)
 *                          <kernel> is the source name (tabs and newlines made spaces),
 *                          <sizes> the data values joined by commas, <block> BXxBYxBZ.
 *
 * Whole-run launch timing (klaraptor validate's whole-run measurement, issue 41), in a program
 * that is not profiling (no KLARAPTOR_PROFILE_OUT / _PLAN):
 *   KLARAPTOR_LAUNCH_TIMES a file: every launch of an annotated kernel is bracketed by two
 *                          CUDA events on its stream (the start recorded right before the
 *                          launch, before klaraptor__launch_starts; the stop right after it:
 *                          no host work, copy or synchronisation of the program is inside a
 *                          window; the stream is held at the gate of klaraptor_refine.inc
 *                          until both events and the launch are queued, so that on an idle
 *                          stream the launch's own latency is not inside either). The events
 *                          are read when they have completed, at later launches, never waited
 *                          for (except when more than LT_MAX_PENDING wait), and at exit. At
 *                          exit one JSON line
 *                          per launch key (kernel, data values) is appended:
 *     {"kernel":<id>,"name":<name>,"sizes":[…],"launches":L,"timed":T,"total_ms":…,
 *      "first_ms":…,"last_ms":…,"head_ms":…,"tail_ms":…,"min_ms":…,"max_ms":…,"trend":…,
 *      "block":[…],"grid":[…],"blocks_seen":B}
 *                          launches: every launch of the key; timed: those with a time (a
 *                          launch into a capturing stream, a failed launch or an event error
 *                          has none); total_ms: the sum of the timed launches' times (the
 *                          whole run's kernel time of the key); head_ms / tail_ms: the mean of
 *                          the first / last third of the timed launches, in launch order;
 *                          trend: the least-squares slope of time over the launch index, times
 *                          (T - 1), over the mean (the relative change across the run; 0 with
 *                          fewer than two); block / grid: the first launch's; blocks_seen: the
 *                          distinct blocks the key was launched with. The first launch of each
 *                          kernel loads it (cudaFuncGetAttributes) before its start event. The
 *                          runtime does not refine in such a run (told of every launch, as in
 *                          the profiling variant); validate forces each method's shape with
 *                          KLARAPTOR_FORCE.
 *
 * A shape that faults (an illegal address, a trap: the collector's sample of it says "an error
 * in the kernel: …" or "launch failed: …, then …", and those of the shapes it cost their run
 * "… the CUDA context is unusable …") leaves the process's CUDA context unusable: nothing
 * after it in this process can run. The sweep then stops (a request of one shape at a time
 * sends no further shape), a line "fault <id> <sizes> <BXxBYxBZ> <error>" (tab-separated, the
 * sizes "-" when there are none, the error as its JSON string has it; 0x0x0 when no sample
 * names the shape) is appended to KLARAPTOR_PROFILE_OUT/stopped.tsv, the fault is said on
 * stderr, and the process exits at once with status 70, without the program's own launch:
 * klaraptor-cc goes on in a new process.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "klaraptor.h"
#include "klaraptor_collect.h"
#include "klaraptor_internal.h"

/* The launch entry point of nvcc 13's host stubs (defined by the static CUDA runtime), as
 * the linker's --wrap names it. The dims are passed packed as in the host IR: x | y << 32,
 * then z. */
extern int __real___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                                     uint64_t block_xy, uint32_t block_z, void **args,
                                     size_t shmem, void *stream);

int __wrap___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                              uint64_t block_xy, uint32_t block_z, void **args, size_t shmem,
                              void *stream);

static void perr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void perr(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "klaraptor-profile: %s\n", buf);
}

/* ---------------------------------------------------------------------------------------- */
/* What klaraptor_select told us (per thread)                                               */

typedef struct pending {
  const klaraptor_kernel *k;
  int64_t data[16];
  uint64_t grid_xy, block_xy;
  uint32_t grid_z, block_z;
} pending;

static _Thread_local pending t_pending;
static _Thread_local int t_inside; /* set while sweeping: our own launches pass through */

static void note(const klaraptor_kernel *k, const int64_t *data, uint64_t grid_xy,
                 uint32_t grid_z, uint64_t block_xy, uint32_t block_z) {
  if (t_inside || k->n_data > 16) return;
  t_pending.k = k;
  if (k->n_data) memcpy(t_pending.data, data, (size_t)k->n_data * sizeof *data);
  t_pending.grid_xy = grid_xy;
  t_pending.grid_z = grid_z;
  t_pending.block_xy = block_xy;
  t_pending.block_z = block_z;
}

/* ---------------------------------------------------------------------------------------- */
/* Configuration                                                                            */

typedef struct plan_kernel {
  char *id;
  uint32_t (*shapes)[3];
  int n_shapes;
  int64_t (*done)[16]; /* data tuples already profiled */
  int n_done;
} plan_kernel;

static pthread_mutex_t g_plock = PTHREAD_MUTEX_INITIALIZER;
static plan_kernel *g_plan;
static int g_n_plan;
static const char *g_out;
static const char *g_collector;
static klaraptor_collect_fn g_collect;
static klaraptor_collect_prepare_fn g_prepare; /* optional (older collectors lack it) */
static int g_runs = 5, g_warmup = 1, g_max_sizes = 4;
static int g_program; /* KLARAPTOR_PROFILE_PROGRAM */
static void start_prefetch(void);
static int g_broken; /* the collector could not be loaded: no more attempts */
static char g_load_error[1024]; /* why, for the samples */
static int g_progress_fd = -1;

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi) {
    perr("%s=%s is not an integer in [%d, %d]; using %d", name, v, lo, hi, dflt);
    return dflt;
  }
  return (int)x;
}

static int parse_shape(const char *s, uint32_t out[3]) {
  unsigned a = 1, b = 1, c = 1;
  int n = sscanf(s, "%ux%ux%u", &a, &b, &c);
  if (n < 1 || a == 0 || b == 0 || c == 0) return -1;
  out[0] = a;
  out[1] = b;
  out[2] = c;
  return 0;
}

/* Reads the rest of a line's <bx>x<by>x<bz> words (strtok_r state `save`) into a growing
 * array; a malformed word is reported with path:line and skipped. */
static void read_shapes(char **save, const char *path, int lineno, uint32_t (**shapes)[3],
                        int *n) {
  char *tok;
  while ((tok = strtok_r(NULL, " \t\r\n", save))) {
    uint32_t sh[3];
    if (parse_shape(tok, sh) != 0) {
      perr("%s:%d: bad shape '%s' (expected <bx>x<by>x<bz>)", path, lineno, tok);
      continue;
    }
    void *p = realloc(*shapes, (size_t)(*n + 1) * sizeof **shapes);
    if (!p) return;
    *shapes = p;
    memcpy((*shapes)[(*n)++], sh, sizeof sh);
  }
}

static void load_plan(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perr("cannot read the plan %s: %s", path, strerror(errno));
    return;
  }
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    char *save = NULL;
    char *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok || tok[0] == '#') continue;
    plan_kernel pk = {0};
    pk.id = strdup(tok);
    read_shapes(&save, path, lineno, &pk.shapes, &pk.n_shapes);
    void *p = realloc(g_plan, (size_t)(g_n_plan + 1) * sizeof *g_plan);
    if (!p) break;
    g_plan = p;
    g_plan[g_n_plan++] = pk;
  }
  free(line);
  fclose(f);
}

static void load_resume(const char *path);
static void lt_init(void);

/* Every copy of this file runs its constructor: an object built by klaraptor-cc carries the
 * runtime (klaraptor_embed.c), and the linker keeps one copy's global symbols. The
 * constructor calls the global (weak, so the call is never bound to this copy) and that one
 * copy reads the environment, once. */
void klaraptor__prof_init(void) __attribute__((weak));
__attribute__((constructor)) static void prof_ctor(void) { klaraptor__prof_init(); }

void klaraptor__prof_init(void) {
  static int done;
  if (done) return;
  done = 1;
  g_out = getenv("KLARAPTOR_PROFILE_OUT");
  g_collector = getenv("KLARAPTOR_COLLECTOR");
  const char *plan = getenv("KLARAPTOR_PROFILE_PLAN");
  g_runs = env_int("KLARAPTOR_PROFILE_RUNS", 5, 1, 1000);
  g_warmup = env_int("KLARAPTOR_PROFILE_WARMUP", 1, 0, 1000);
  g_max_sizes = env_int("KLARAPTOR_PROFILE_MAX_SIZES", 4, 1, 1000);
  g_program = env_int("KLARAPTOR_PROFILE_PROGRAM", 0, 0, 1);
  if (!g_out || !*g_out || !plan || !*plan) {
    /* not profiling: launches pass through, timed when KLARAPTOR_LAUNCH_TIMES asks */
    lt_init();
    return;
  }
  if (getenv("KLARAPTOR_LAUNCH_TIMES") && *getenv("KLARAPTOR_LAUNCH_TIMES"))
    perr("KLARAPTOR_LAUNCH_TIMES is ignored in a profiling run");
  const char *progress = getenv("KLARAPTOR_PROGRESS");
  if (progress && *progress) {
    if (strncmp(progress, "fd:", 3) == 0) {
      char *end;
      long fd = strtol(progress + 3, &end, 10);
      if (*end || end == progress + 3 || fd < 0 || fd > 1 << 20 || fcntl((int)fd, F_GETFD) < 0)
        perr("KLARAPTOR_PROGRESS=%s is not an open file descriptor; no progress reports",
             progress);
      else
        g_progress_fd = (int)fd;
    } else {
      g_progress_fd = open(progress, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (g_progress_fd < 0)
        perr("cannot write the progress file %s: %s", progress, strerror(errno));
    }
  }
  load_plan(plan);
  const char *skip = getenv("KLARAPTOR_PROFILE_SKIP");
  if (skip && *skip) load_resume(skip);
  if (g_n_plan > 0) start_prefetch();
  klaraptor__set_profile_note(note);
}

static plan_kernel *plan_for(const char *id) {
  for (int i = 0; i < g_n_plan; i++)
    if (strcmp(g_plan[i].id, id) == 0) return &g_plan[i];
  return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Resuming a run that stopped at a fault (KLARAPTOR_PROFILE_SKIP)                          */

typedef struct resume_sweep {
  char *id;
  int n_data;
  int64_t data[16];
  uint32_t (*shapes)[3]; /* the shapes left out */
  int n_shapes;
} resume_sweep;

static resume_sweep *g_resume;
static int g_n_resume;

/* "1000,64" (or "-": none) into out; -1 when it is not that. */
static int parse_sizes(const char *s, int64_t out[16], int *n) {
  *n = 0;
  if (strcmp(s, "-") == 0) return 0;
  while (*s) {
    if (*n == 16) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno) return -1;
    out[(*n)++] = v;
    if (*end == ',')
      s = end + 1;
    else if (*end)
      return -1;
    else
      s = end;
  }
  return 0;
}

static void load_resume(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perr("cannot read KLARAPTOR_PROFILE_SKIP=%s: %s", path, strerror(errno));
    return;
  }
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    char *save = NULL;
    char *id = strtok_r(line, " \t\r\n", &save);
    if (!id || id[0] == '#') continue;
    char *sizes = strtok_r(NULL, " \t\r\n", &save);
    resume_sweep rs = {0};
    if (!sizes || parse_sizes(sizes, rs.data, &rs.n_data) != 0) {
      perr("%s:%d: expected <kernel id> <sizes> <bx>x<by>x<bz> ...", path, lineno);
      continue;
    }
    rs.id = strdup(id);
    read_shapes(&save, path, lineno, &rs.shapes, &rs.n_shapes);
    void *p = realloc(g_resume, (size_t)(g_n_resume + 1) * sizeof *g_resume);
    if (!p) break;
    g_resume = p;
    g_resume[g_n_resume++] = rs;
  }
  free(line);
  fclose(f);
}

/* The resumed sweep of kernel k at `data`, if the run resumes one. */
static const resume_sweep *resume_for(const klaraptor_kernel *k, const int64_t *data) {
  for (int i = 0; i < g_n_resume; i++) {
    const resume_sweep *rs = &g_resume[i];
    if (rs->n_data == k->n_data && strcmp(rs->id, k->id) == 0 &&
        (k->n_data == 0 || memcmp(rs->data, data, (size_t)k->n_data * sizeof *data) == 0))
      return rs;
  }
  return NULL;
}

static int resume_skips(const resume_sweep *rs, const uint32_t b[3]) {
  for (int i = 0; rs && i < rs->n_shapes; i++)
    if (memcmp(rs->shapes[i], b, sizeof rs->shapes[i]) == 0) return 1;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Output                                                                                   */

static uint64_t fnv64(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static void out_path(char *buf, size_t n, const char *id, const char *suffix) {
  snprintf(buf, n, "%s/%016" PRIx64 "%s", g_out, fnv64(id), suffix);
}

static void index_kernel(const klaraptor_kernel *k) {
  char p[4096];
  snprintf(p, sizeof p, "%s/kernels.tsv", g_out);
  FILE *f = fopen(p, "a");
  if (!f) {
    perr("cannot write %s: %s", p, strerror(errno));
    return;
  }
  fprintf(f, "%016" PRIx64 "\t%s\t%s\n", fnv64(k->id), k->id, k->name ? k->name : k->id);
  fclose(f);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void json_sizes(FILE *f, const klaraptor_kernel *k, const int64_t *data) {
  fputc('[', f);
  for (int i = 0; i < k->n_data; i++) fprintf(f, "%s%" PRId64, i ? "," : "", data[i]);
  fputc(']', f);
}

/* A shape without counters: the sample says why (grid NULL: not launchable, [0,0,0]). */
static void record_failed(const klaraptor_kernel *k, const int64_t *data, const uint32_t b[3],
                          const uint32_t *g, const char *why) {
  char p[4096];
  out_path(p, sizeof p, k->id, ".jsonl");
  FILE *f = fopen(p, "a");
  if (!f) return;
  fputs("{\"sizes\":", f);
  json_sizes(f, k, data);
  fprintf(f, ",\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u],\"error\":", b[0], b[1], b[2],
          g ? g[0] : 0, g ? g[1] : 0, g ? g[2] : 0);
  json_str(f, why);
  fputs("}\n", f);
  fclose(f);
}

/* The line that names the program's own block at data (KLARAPTOR_PROFILE_PROGRAM). */
static void record_program(const char *path, const klaraptor_kernel *k, const int64_t *data,
                           const uint32_t b[3]) {
  FILE *f = fopen(path, "a");
  if (!f) {
    perr("cannot write %s: %s", path, strerror(errno));
    return;
  }
  fputs("{\"program\":true,\"sizes\":", f);
  json_sizes(f, k, data);
  fprintf(f, ",\"block\":[%u,%u,%u]}\n", b[0], b[1], b[2]);
  fclose(f);
}

/* A shape that could not be launched: the sample says why. */
static void record_rejected(const klaraptor_kernel *k, const int64_t *data, const uint32_t b[3],
                            const char *why) {
  record_failed(k, data, b, NULL, why);
}

/* ---------------------------------------------------------------------------------------- */
/* Progress (KLARAPTOR_PROGRESS)                                                            */

typedef struct progress {
  int n, done, ok, not_ok;
  struct timespec t0;
  char kernel[256];
  char sizes[512];
  unsigned char *reported; /* per shape of the collect request */
} progress;

static double ms_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void progress_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress_line(const char *fmt, ...) {
  if (g_progress_fd < 0) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (len < 0) return;
  if ((size_t)len >= sizeof buf) { /* cut, but still one whole line */
    len = (int)sizeof buf - 1;
    buf[len - 1] = '\n';
  }
  /* One write per line: with O_APPEND the line lands whole even when processes share the
   * file. A short write or an error loses the report, never the profile. */
  ssize_t w;
  do {
    w = write(g_progress_fd, buf, (size_t)len);
  } while (w < 0 && errno == EINTR);
}

/* The data values joined by commas ("" for none). */
static void fmt_sizes(char *buf, size_t cap, const klaraptor_kernel *k, const int64_t *data) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < k->n_data && used < cap; i++) {
    int w = snprintf(buf + used, cap - used, "%s%" PRId64, i ? "," : "", data[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}

static void progress_begin(progress *p, const klaraptor_kernel *k, const int64_t *data, int n) {
  memset(p, 0, sizeof *p);
  p->n = n;
  clock_gettime(CLOCK_MONOTONIC, &p->t0);
  if (g_progress_fd < 0) return;
  snprintf(p->kernel, sizeof p->kernel, "%s", k->name ? k->name : k->id);
  for (char *c = p->kernel; *c; c++)
    if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
  fmt_sizes(p->sizes, sizeof p->sizes, k, data);
  progress_line("sweep\t%s\t%s\t%d\n", p->kernel, p->sizes, n);
}

static void progress_shape(progress *p, const uint32_t b[3], const char *status) {
  p->done++;
  if (strcmp(status, "ok") == 0 || strcmp(status, "launched") == 0)
    p->ok++;
  else
    p->not_ok++;
  progress_line("shape\t%s\t%s\t%d\t%d\t%ux%ux%u\t%s\t%.1f\n", p->kernel, p->sizes, p->done,
                p->n, b[0], b[1], b[2], status, ms_since(&p->t0));
}

static void progress_end(progress *p) {
  progress_line("end\t%s\t%s\t%d\t%d\t%.1f\n", p->kernel, p->sizes, p->ok, p->not_ok,
                ms_since(&p->t0));
}

/* ---------------------------------------------------------------------------------------- */
/* Faults                                                                                   */

/* What the samples of a request say about the CUDA context. */
typedef struct fault_info {
  int lost;          /* a sample says that the context is unusable */
  uint32_t block[3]; /* the shape whose own fault it was (0s: no sample says) */
  char error[640];   /* that sample's error (else the first such), as its JSON string has it */
} fault_info;

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* The error of a sample line, its JSON string's text as it is (escapes kept); 0 when the line
 * has none. */
static int line_error(const char *line, char *out, size_t cap) {
  const char *e = strstr(line, "\"error\":\"");
  if (!e) return 0;
  e += 9;
  size_t n = 0;
  for (; *e && *e != '"' && n + 2 < cap; e++) {
    if (*e == '\\' && e[1]) out[n++] = *e++;
    out[n++] = *e;
  }
  out[n] = 0;
  return 1;
}

/* Reads the sample lines appended to `path` from byte `from` on (a request's): a fault of a
 * shape of its own (the collector's "an error in the kernel: …", or "launch failed: …, then
 * …": profiler/src/record.rs `is_fault`), or a shape that lost its run or profiler pass to
 * one ("… the CUDA context is unusable …"), means that the context is lost. */
static void find_fault(const char *path, long from, fault_info *fi) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fseek(f, from, SEEK_SET) != 0) {
    fclose(f);
    return;
  }
  char *line = NULL;
  size_t cap = 0;
  char err[sizeof fi->error];
  while (getline(&line, &cap, f) > 0) {
    if (!line_error(line, err, sizeof err)) continue;
    int own = strncmp(err, "an error in the kernel", 22) == 0 ||
              (strncmp(err, "launch failed", 13) == 0 && strstr(err, ", then "));
    if (!own && !strstr(err, "the CUDA context is unusable")) continue;
    if (!fi->lost || (own && fi->block[0] == 0)) memcpy(fi->error, err, sizeof err);
    fi->lost = 1;
    const char *b = strstr(line, "\"block\":[");
    unsigned x, y, z;
    if (own && fi->block[0] == 0 && b && sscanf(b + 9, "%u,%u,%u", &x, &y, &z) == 3) {
      fi->block[0] = x;
      fi->block[1] = y;
      fi->block[2] = z;
    }
  }
  free(line);
  fclose(f);
}

/* The status a process that stopped at a fault exits with. */
#define FAULT_EXIT 70

/* The context is lost: says so (stopped.tsv, stderr) and ends the process. */
static void stop_after_fault(const klaraptor_kernel *k, const int64_t *data,
                             const fault_info *fi) {
  char sizes[512];
  fmt_sizes(sizes, sizeof sizes, k, data);
  if (!k->n_data) snprintf(sizes, sizeof sizes, "-");
  char p[4096];
  snprintf(p, sizeof p, "%s/stopped.tsv", g_out);
  int fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    /* One write (a mangled id can be long). */
    const char *fmt = "fault\t%s\t%s\t%ux%ux%u\t%s\n";
    int len = snprintf(NULL, 0, fmt, k->id, sizes, fi->block[0], fi->block[1], fi->block[2],
                       fi->error);
    char *buf = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (buf) {
      snprintf(buf, (size_t)len + 1, fmt, k->id, sizes, fi->block[0], fi->block[1],
               fi->block[2], fi->error);
      ssize_t w;
      do {
        w = write(fd, buf, (size_t)len);
      } while (w < 0 && errno == EINTR);
      free(buf);
    }
    close(fd);
  } else {
    perr("cannot write %s: %s", p, strerror(errno));
  }
  const char *name = k->name ? k->name : k->id;
  if (fi->block[0])
    perr("%s at %s: block %ux%ux%u faulted (%s): the CUDA context is lost, so this process "
         "stops here (exit status %d); klaraptor-cc goes on in a new one",
         name, sizes, fi->block[0], fi->block[1], fi->block[2], fi->error, FAULT_EXIT);
  else
    perr("%s at %s: a shape faulted (%s): the CUDA context is lost, so this process stops "
         "here (exit status %d); klaraptor-cc goes on in a new one",
         name, sizes, fi->error, FAULT_EXIT);
  fflush(NULL);
  _exit(FAULT_EXIT);
}

/* ---------------------------------------------------------------------------------------- */
/* The sweep                                                                                */

typedef struct launch_ctx {
  void *kernel;
  void **args;
  size_t shmem;
  void *stream;
  const uint32_t *blocks, *grids;
  FILE *log; /* "launch" mode: one line per launch */
  const klaraptor_kernel *k;
  const int64_t *data;
  progress *pg;
  int base; /* the sweep's index of the request's first shape */
  int n;    /* shapes of the request */
} launch_ctx;

static int launch_shape(void *vctx, int i) {
  launch_ctx *c = vctx;
  const uint32_t *b = c->blocks + 3 * (c->base + i), *g = c->grids + 3 * (c->base + i);
  /* Dynamic shared memory that follows the block: each shape gets its own amount. */
  size_t shmem = c->shmem;
  if (c->k->abi_version >= 2 && c->k->shmem) {
    int64_t v = c->k->shmem(c->data, b);
    if (v >= 0) shmem = (size_t)v;
  }
  int rc = __real___cudaLaunchKernel(c->kernel, (uint64_t)g[0] | ((uint64_t)g[1] << 32), g[2],
                              (uint64_t)b[0] | ((uint64_t)b[1] << 32), b[2], c->args, shmem,
                              c->stream);
  if (rc != 0) (void)cudaGetLastError(); /* the program's own error checks must not see it */
  if (c->log) {
    fputs("{\"sizes\":", c->log);
    json_sizes(c->log, c->k, c->data);
    fprintf(c->log, ",\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u]", b[0], b[1], b[2], g[0], g[1],
            g[2]);
    if (rc != 0) fprintf(c->log, ",\"error\":\"launch failed with CUDA error %d\"", rc);
    fputs("}\n", c->log);
    fflush(c->log);
    if (!c->pg->reported[c->base + i]) {
      c->pg->reported[c->base + i] = 1;
      progress_shape(c->pg, b, rc == 0 ? "launched" : "failed");
    }
  }
  return rc;
}

/* The collector's report (ABI 2): shape i of the request is written. */
static void collect_progress(void *vctx, int i, int status) {
  launch_ctx *c = vctx;
  if (i < 0 || i >= c->n || c->pg->reported[c->base + i]) return;
  c->pg->reported[c->base + i] = 1;
  progress_shape(c->pg, c->blocks + 3 * (c->base + i), status == 0 ? "ok" : "failed");
}

/* The collector is loaded once, by the first of the prefetch thread and a sweep. */
static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;

static int load_collector_locked(void) {
  if (g_collect) return 0;
  if (g_broken) return -1;
  if (!g_collector || !*g_collector) {
    snprintf(g_load_error, sizeof g_load_error,
             "KLARAPTOR_COLLECTOR is not set: nothing to measure with");
    perr("%s", g_load_error);
    g_broken = 1;
    return -1;
  }
  void *h = dlopen(g_collector, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_load_error, sizeof g_load_error, "cannot load the collector %s: %s", g_collector,
             dlerror());
    perr("%s", g_load_error);
    g_broken = 1;
    return -1;
  }
  klaraptor_collect_fn f = (klaraptor_collect_fn)dlsym(h, "klaraptor_collect");
  if (!f) {
    snprintf(g_load_error, sizeof g_load_error, "%s has no klaraptor_collect: %s", g_collector,
             dlerror());
    perr("%s", g_load_error);
    g_broken = 1;
    return -1;
  }
  g_prepare = (klaraptor_collect_prepare_fn)dlsym(h, "klaraptor_collect_prepare");
  g_collect = f;
  return 0;
}

/* The prefetch thread (start_prefetch), joined by the first sweep: the sweep needs the
 * collector started anyway, and afterwards nothing of the thread is left running. */
static pthread_t g_prefetch;
static int g_prefetching; /* started and not yet joined; under g_plock after the start */

/* Under g_plock. */
static int load_collector(void) {
  if (g_prefetching) {
    (void)pthread_join(g_prefetch, NULL);
    g_prefetching = 0;
  }
  pthread_mutex_lock(&g_load_lock);
  int rc = load_collector_locked();
  pthread_mutex_unlock(&g_load_lock);
  return rc;
}

/* The collector loaded and started on a thread of its own as the program starts: loading
 * libcupti and initialising the profiler take 150-170 ms on an H200 and need no CUDA
 * context, so the program's own start (its context, its inputs) hides them; the first sweep
 * waits for whatever is left. KLARAPTOR_PROFILE_PREFETCH=0 leaves it to the first sweep. */
static void *prefetch_collector(void *unused) {
  (void)unused;
  pthread_mutex_lock(&g_load_lock);
  int rc = load_collector_locked();
  pthread_mutex_unlock(&g_load_lock);
  if (rc == 0 && g_prepare) (void)g_prepare();
  return NULL;
}

static void start_prefetch(void) {
  const char *env = getenv("KLARAPTOR_PROFILE_PREFETCH");
  if (env && strcmp(env, "0") == 0) return;
  if (!g_collector || !*g_collector || strcmp(g_collector, "launch") == 0) return;
  g_prefetching = pthread_create(&g_prefetch, NULL, prefetch_collector, NULL) == 0;
}

/* Under g_plock. */
static void sweep(plan_kernel *pk, const pending *pd, void *kernel, void **args, size_t shmem,
                  void *stream) {
  const klaraptor_kernel *k = pd->k;
  /* A resumed sweep leaves out the shapes the run has already. */
  const resume_sweep *rs = resume_for(k, pd->data);
  char path[4096];
  int launch_only = strcmp(g_collector ? g_collector : "", "launch") == 0;
  out_path(path, sizeof path, k->id, launch_only ? ".launches.jsonl" : ".jsonl");
  /* The program's own block (KLARAPTOR_PROFILE_PROGRAM): named in the records when it is a
   * legal shape here, and swept after the plan's shapes when the plan lacks it. */
  const uint32_t own[3] = {(uint32_t)pd->block_xy, (uint32_t)(pd->block_xy >> 32),
                           pd->block_z};
  int own_extra = 0;
  if (g_program) {
    uint32_t g[3];
    char why[512];
    if (klaraptor__shape_ok(k, pd->data, own, g, why, sizeof why) == 0) {
      if (!launch_only) record_program(path, k, pd->data, own);
      own_extra = 1;
      for (int i = 0; i < pk->n_shapes && own_extra; i++)
        if (memcmp(pk->shapes[i], own, sizeof own) == 0) own_extra = 0;
      if (resume_skips(rs, own)) own_extra = 0;
    }
  }
  int n = own_extra;
  for (int i = 0; i < pk->n_shapes; i++) n += !resume_skips(rs, pk->shapes[i]);
  if (n == 0) return;
  uint32_t *blocks = calloc((size_t)n * 3, sizeof *blocks);
  uint32_t *grids = calloc((size_t)n * 3, sizeof *grids);
  unsigned char *reported = calloc((size_t)n + 1, 1);
  unsigned char *failed = calloc((size_t)n + 1, 1); /* asked of a collector that failed */
  if (!blocks || !grids || !reported || !failed) {
    free(blocks);
    free(grids);
    free(reported);
    free(failed);
    return;
  }
  progress pg;
  progress_begin(&pg, k, pd->data, n);
  pg.reported = reported; /* indexed by the request's shapes (m <= n) */
  int m = 0;
  for (int i = 0; i < pk->n_shapes + own_extra; i++) {
    const uint32_t *shape = i < pk->n_shapes ? pk->shapes[i] : own;
    uint32_t g[3];
    char why[512];
    if (resume_skips(rs, shape)) continue;
    if (klaraptor__shape_ok(k, pd->data, shape, g, why, sizeof why) != 0) {
      record_rejected(k, pd->data, shape, why);
      progress_shape(&pg, shape, "rejected");
      continue;
    }
    memcpy(blocks + 3 * m, shape, 3 * sizeof *blocks);
    memcpy(grids + 3 * m, g, sizeof g);
    m++;
  }
  launch_ctx c = {kernel, args, shmem, stream, blocks, grids, NULL, k, pd->data, &pg, 0, m};
  /* Why the shapes the collector did not write have no sample (NULL: they have one, or
   * their absence is the collector's business, e.g. ABI 1). */
  char not_measured[1200];
  not_measured[0] = 0;
  fault_info fi;
  memset(&fi, 0, sizeof fi);
  if (launch_only) {
    c.log = fopen(path, "a");
    if (!c.log) perr("cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < m && c.log; i++) launch_shape(&c, i);
    if (c.log) fclose(c.log);
  } else if (load_collector() == 0) {
    /* One request for the sweep; one per shape when it resumes a sweep that faulted, so
     * that a fault there costs no other shape its sample. A fault ends the requests. */
    int step = rs ? 1 : m;
    for (int s = 0; s < m && !fi.lost; s += step) {
      int cnt = m - s < step ? m - s : step;
      klaraptor_collect_request req;
      memset(&req, 0, sizeof req);
      req.abi_version = KLARAPTOR_COLLECT_ABI;
      req.kernel_id = k->id;
      req.kernel_name = k->name ? k->name : k->id;
      req.n_data = k->n_data;
      req.data = pd->data;
      req.n_shapes = cnt;
      req.blocks = blocks + 3 * s;
      req.grids = grids + 3 * s;
      req.kernel = kernel;
      req.stream = stream;
      req.dynamic_smem = shmem;
      req.runs = g_runs;
      req.warmup = g_warmup;
      req.out_path = path;
      c.base = s;
      c.n = cnt;
      req.ctx = &c;
      req.launch = launch_shape;
      req.progress = collect_progress;
      long from = file_size(path);
      if (g_collect(&req) != 0) {
        perr("the collector failed on %s", req.kernel_name);
        snprintf(not_measured, sizeof not_measured,
                 "not measured: the collector failed on this request (its message is on the "
                 "program's stderr)");
        memset(failed + s, 1, (size_t)cnt);
      }
      find_fault(path, from, &fi);
    }
  } else {
    snprintf(not_measured, sizeof not_measured, "not measured: %s", g_load_error);
    memset(failed, 1, (size_t)m);
  }
  /* Shapes nobody reported (no collector, a collector that failed or of ABI 1) are done too,
   * as far as the progress goes. When the collector failed or could not be loaded, their
   * samples say so (an ABI 2 collector reports each line it writes, so an unreported shape
   * has none): a sweep never vanishes without a trace, and the driver tells a collector that
   * failed from a kernel that was never launched. The shapes a fault left unasked have no
   * sample and no report: a new process measures them. */
  for (int i = 0; i < m; i++)
    if (!reported[i] && (!fi.lost || failed[i])) {
      reported[i] = 1;
      if (failed[i] && not_measured[0])
        record_failed(k, pd->data, blocks + 3 * i, grids + 3 * i, not_measured);
      progress_shape(&pg, blocks + 3 * i, "failed");
    }
  progress_end(&pg);
  free(blocks);
  free(grids);
  free(reported);
  free(failed);
  if (fi.lost) stop_after_fault(k, pd->data, &fi);
}

/* ---------------------------------------------------------------------------------------- */
/* Whole-run launch timing (KLARAPTOR_LAUNCH_TIMES)                                          */

#define LT_MAX_PENDING 8192

typedef struct lt_key {
  const klaraptor_kernel *k;
  int64_t data[16];
  uint32_t block[3], grid[3];
  int blocks_seen;
  uint32_t (*seen)[3];
  long launches;
  double *ms; /* per timed launch, in launch order; NAN until read */
  long n_ms, cap_ms;
} lt_key;

typedef struct lt_wait {
  cudaEvent_t a, b;
  lt_key *key;
  long index;
} lt_wait;

static pthread_mutex_t g_lt_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *g_lt_path;
static lt_key **g_lt_keys;
static int g_lt_n;
static lt_wait *g_lt_wait;
static long g_lt_n_wait, g_lt_cap_wait;
static cudaEvent_t *g_lt_pool;
static long g_lt_n_pool, g_lt_cap_pool;
static const void **g_lt_loaded; /* kernels whose first launch loaded them */
static int g_lt_n_loaded;

static void lt_init(void) {
  const char *p = getenv("KLARAPTOR_LAUNCH_TIMES");
  if (!p || !*p) return;
  g_lt_path = p;
  klaraptor__set_profile_note(note);
}

static int lt_event(cudaEvent_t *e) {
  if (g_lt_n_pool > 0) {
    *e = g_lt_pool[--g_lt_n_pool];
    return 0;
  }
  if (cudaEventCreateWithFlags(e, cudaEventDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return 0;
}

static void lt_release(cudaEvent_t e) {
  if (g_lt_n_pool == g_lt_cap_pool) {
    long cap = g_lt_cap_pool ? 2 * g_lt_cap_pool : 64;
    void *p = realloc(g_lt_pool, (size_t)cap * sizeof *g_lt_pool);
    if (!p) {
      (void)cudaEventDestroy(e);
      return;
    }
    g_lt_pool = p;
    g_lt_cap_pool = cap;
  }
  g_lt_pool[g_lt_n_pool++] = e;
}

/* Reads the waiting launches whose stop event has completed (all of them, waiting for each,
 * when `wait`); under g_lt_lock. */
static void lt_harvest(int wait) {
  long kept = 0;
  for (long i = 0; i < g_lt_n_wait; i++) {
    lt_wait *w = &g_lt_wait[i];
    cudaError_t q = wait ? cudaEventSynchronize(w->b) : cudaEventQuery(w->b);
    if (q == cudaErrorNotReady) {
      g_lt_wait[kept++] = *w;
      continue;
    }
    float ms = 0;
    if (q == cudaSuccess && cudaEventElapsedTime(&ms, w->a, w->b) == cudaSuccess) {
      w->key->ms[w->index] = ms;
      lt_release(w->a);
      lt_release(w->b);
    } else if (q == cudaSuccess) {
      (void)cudaGetLastError();
    } /* another error: the program's to see; the launch stays untimed */
  }
  g_lt_n_wait = kept;
}

static lt_key *lt_key_for(const pending *pd) {
  for (int i = 0; i < g_lt_n; i++) {
    lt_key *k = g_lt_keys[i];
    if (k->k == pd->k &&
        (pd->k->n_data == 0 ||
         memcmp(k->data, pd->data, (size_t)pd->k->n_data * sizeof(int64_t)) == 0))
      return k;
  }
  lt_key *k = calloc(1, sizeof *k);
  void *p = realloc(g_lt_keys, (size_t)(g_lt_n + 1) * sizeof *g_lt_keys);
  if (!k || !p) {
    free(k);
    if (p) g_lt_keys = p;
    return NULL;
  }
  g_lt_keys = p;
  k->k = pd->k;
  if (pd->k->n_data) memcpy(k->data, pd->data, (size_t)pd->k->n_data * sizeof(int64_t));
  k->block[0] = (uint32_t)pd->block_xy;
  k->block[1] = (uint32_t)(pd->block_xy >> 32);
  k->block[2] = pd->block_z;
  k->grid[0] = (uint32_t)pd->grid_xy;
  k->grid[1] = (uint32_t)(pd->grid_xy >> 32);
  k->grid[2] = pd->grid_z;
  g_lt_keys[g_lt_n++] = k;
  return k;
}

static void lt_note_block(lt_key *k, const pending *pd) {
  uint32_t b[3] = {(uint32_t)pd->block_xy, (uint32_t)(pd->block_xy >> 32), pd->block_z};
  for (int i = 0; i < k->blocks_seen; i++)
    if (memcmp(k->seen[i], b, sizeof b) == 0) return;
  void *p = realloc(k->seen, (size_t)(k->blocks_seen + 1) * sizeof *k->seen);
  if (!p) return;
  k->seen = p;
  memcpy(k->seen[k->blocks_seen++], b, sizeof b);
}

static void lt_write(void);

/* Before a launch of an annotated kernel: the stream held at the gate (*gate, for the entry
 * point to open after the launch) and its start event, recorded on the launch's stream. 1
 * when the launch is timed (then *a and *b are its events), 0 when not. */
static int lt_begin(const pending *pd, void *kernel, void *stream, lt_key **key, cudaEvent_t *a,
                    cudaEvent_t *b, uint32_t *gate) {
  pthread_mutex_lock(&g_lt_lock);
  static int registered;
  if (!registered) registered = atexit(lt_write) == 0;
  lt_harvest(0);
  while (g_lt_n_wait >= LT_MAX_PENDING) {
    /* too many waiting: wait for the oldest (a synchronisation the program does not make) */
    (void)cudaEventSynchronize(g_lt_wait[0].b);
    lt_harvest(0);
    if (g_lt_n_wait >= LT_MAX_PENDING) g_lt_n_wait--; /* an event that never completes */
  }
  int timed = 0;
  lt_key *k = lt_key_for(pd);
  if (k) {
    k->launches++;
    lt_note_block(k, pd);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &st) != cudaSuccess) {
      (void)cudaGetLastError();
      st = cudaStreamCaptureStatusActive;
    }
    int loaded = 0;
    for (int i = 0; i < g_lt_n_loaded && !loaded; i++) loaded = g_lt_loaded[i] == kernel;
    if (!loaded) {
      /* The first launch of a kernel loads its module (lazy loading): done here, outside
       * the window. */
      struct cudaFuncAttributes fa;
      if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) (void)cudaGetLastError();
      void *p = realloc(g_lt_loaded, (size_t)(g_lt_n_loaded + 1) * sizeof *g_lt_loaded);
      if (p) {
        g_lt_loaded = p;
        g_lt_loaded[g_lt_n_loaded++] = kernel;
      }
    }
    if (st == cudaStreamCaptureStatusNone && cudaPeekAtLastError() == cudaSuccess &&
        lt_event(a) == 0) {
      if (lt_event(b) != 0) {
        lt_release(*a);
      } else {
        *gate = klaraptor__gate_close(stream);
        if (cudaEventRecord(*a, (cudaStream_t)stream) != cudaSuccess) {
          (void)cudaGetLastError();
          lt_release(*a);
          lt_release(*b);
        } else {
          timed = 1;
        }
      }
    }
  }
  *key = k;
  pthread_mutex_unlock(&g_lt_lock);
  return timed;
}

/* After the launch (rc its status): its stop event; the pair waits to be read. */
static void lt_end(lt_key *k, cudaEvent_t a, cudaEvent_t b, int rc, void *stream) {
  pthread_mutex_lock(&g_lt_lock);
  int ok = rc == 0;
  if (ok && cudaEventRecord(b, (cudaStream_t)stream) != cudaSuccess) ok = 0;
  if (ok && k->n_ms == k->cap_ms) {
    long cap = k->cap_ms ? 2 * k->cap_ms : 64;
    void *p = realloc(k->ms, (size_t)cap * sizeof *k->ms);
    if (p) {
      k->ms = p;
      k->cap_ms = cap;
    } else {
      ok = 0;
    }
  }
  if (ok && g_lt_n_wait == g_lt_cap_wait) {
    long cap = g_lt_cap_wait ? 2 * g_lt_cap_wait : 256;
    void *p = realloc(g_lt_wait, (size_t)cap * sizeof *g_lt_wait);
    if (p) {
      g_lt_wait = p;
      g_lt_cap_wait = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) {
    k->ms[k->n_ms] = NAN;
    g_lt_wait[g_lt_n_wait++] = (lt_wait){a, b, k, k->n_ms++};
  } else {
    lt_release(a);
    lt_release(b);
  }
  pthread_mutex_unlock(&g_lt_lock);
}

static void lt_num(FILE *f, const char *name, double v) {
  if (isfinite(v))
    fprintf(f, ",\"%s\":%.6g", name, v);
  else
    fprintf(f, ",\"%s\":null", name);
}

/* At exit: waits for the launches not yet read and appends a line per key. */
static void lt_write(void) {
  pthread_mutex_lock(&g_lt_lock);
  lt_harvest(1);
  FILE *f = g_lt_n ? fopen(g_lt_path, "a") : NULL;
  if (g_lt_n && !f) perr("cannot write KLARAPTOR_LAUNCH_TIMES=%s: %s", g_lt_path, strerror(errno));
  for (int i = 0; f && i < g_lt_n; i++) {
    const lt_key *k = g_lt_keys[i];
    long t = 0;
    double total = 0, first = NAN, last = NAN, lo = NAN, hi = NAN;
    for (long j = 0; j < k->n_ms; j++) {
      double v = k->ms[j];
      if (!isfinite(v)) continue;
      if (t == 0) first = v;
      last = v;
      lo = t == 0 || v < lo ? v : lo;
      hi = t == 0 || v > hi ? v : hi;
      total += v;
      t++;
    }
    /* thirds (at least one launch each), and the trend, over the timed launches in order */
    long third = t >= 3 ? t / 3 : 1, idx = 0;
    double head = 0, tail = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (long j = 0; j < k->n_ms; j++) {
      double v = k->ms[j];
      if (!isfinite(v)) continue;
      if (idx < third) head += v;
      if (idx >= t - third) tail += v;
      sx += (double)idx;
      sy += v;
      sxx += (double)idx * (double)idx;
      sxy += (double)idx * v;
      idx++;
    }
    double trend = 0;
    if (t >= 2) {
      double den = (double)t * sxx - sx * sx, mean = sy / (double)t;
      if (den > 0 && mean > 0) trend = ((double)t * sxy - sx * sy) / den * (double)(t - 1) / mean;
    }
    fputs("{\"kernel\":", f);
    json_str(f, k->k->id);
    fputs(",\"name\":", f);
    json_str(f, k->k->name ? k->k->name : k->k->id);
    fputs(",\"sizes\":", f);
    json_sizes(f, k->k, k->data);
    fprintf(f, ",\"launches\":%ld,\"timed\":%ld,\"total_ms\":%.6g", k->launches, t, total);
    lt_num(f, "first_ms", first);
    lt_num(f, "last_ms", last);
    lt_num(f, "head_ms", t ? head / (double)third : NAN);
    lt_num(f, "tail_ms", t ? tail / (double)third : NAN);
    lt_num(f, "min_ms", lo);
    lt_num(f, "max_ms", hi);
    lt_num(f, "trend", trend);
    fprintf(f, ",\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u],\"blocks_seen\":%d}\n", k->block[0],
            k->block[1], k->block[2], k->grid[0], k->grid[1], k->grid[2], k->blocks_seen);
  }
  if (f) fclose(f);
  pthread_mutex_unlock(&g_lt_lock);
}

int __wrap___cudaLaunchKernel(void *kernel, uint64_t grid_xy, uint32_t grid_z,
                              uint64_t block_xy, uint32_t block_z, void **args, size_t shmem,
                              void *stream) {
  pending pd = t_pending;
  t_pending.k = NULL;
  if (!t_inside && pd.k && pd.grid_xy == grid_xy && pd.grid_z == grid_z &&
      pd.block_xy == block_xy && pd.block_z == block_z) {
    pthread_mutex_lock(&g_plock);
    plan_kernel *pk = plan_for(pd.k->id);
    int todo = pk && pk->n_shapes > 0 && pk->n_done < g_max_sizes;
    for (int i = 0; todo && i < pk->n_done; i++)
      if (memcmp(pk->done[i], pd.data, (size_t)pd.k->n_data * sizeof(int64_t)) == 0) todo = 0;
    if (todo) {
      void *p = realloc(pk->done, (size_t)(pk->n_done + 1) * sizeof *pk->done);
      if (p) {
        pk->done = p;
        memset(pk->done[pk->n_done], 0, sizeof pk->done[0]);
        memcpy(pk->done[pk->n_done], pd.data, (size_t)pd.k->n_data * sizeof(int64_t));
        if (pk->n_done++ == 0) index_kernel(pd.k);
        t_inside = 1;
        sweep(pk, &pd, kernel, args, shmem, stream);
        t_inside = 0;
      }
    }
    pthread_mutex_unlock(&g_plock);
    if (pk && strcmp(g_collector ? g_collector : "", "launch") == 0) {
      /* Log every own launch of a planned kernel too, so the log lines up with ncu's. */
      char path[4096];
      out_path(path, sizeof path, pd.k->id, ".launches.jsonl");
      FILE *f = fopen(path, "a");
      if (f) {
        fputs("{\"own\":true,\"sizes\":", f);
        json_sizes(f, pd.k, pd.data);
        fprintf(f, ",\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u]}\n", (uint32_t)block_xy,
                (uint32_t)(block_xy >> 32), block_z, (uint32_t)grid_xy,
                (uint32_t)(grid_xy >> 32), grid_z);
        fclose(f);
      }
    }
  }
  /* Whole-run timing: the stream held at the gate, the start event before the launch, the
   * stop after it, then the gate opens (klaraptor__launch_stops). */
  lt_key *lk = NULL;
  cudaEvent_t la = NULL, lb = NULL;
  uint32_t gate = 0;
  int lt = g_lt_path && !t_inside && pd.k && pd.grid_xy == grid_xy && pd.grid_z == grid_z &&
           pd.block_xy == block_xy && pd.block_z == block_z &&
           lt_begin(&pd, kernel, stream, &lk, &la, &lb, &gate);
  /* a timed first launch of a key loads its kernel before its start event (klaraptor_rt.c) */
  gate = klaraptor__launch_starts(kernel, stream, gate);
  int rc = __real___cudaLaunchKernel(kernel, grid_xy, grid_z, block_xy, block_z, args, shmem,
                                     stream);
  if (lt) lt_end(lk, la, lb, rc, stream);
  klaraptor__launch_stops(stream, rc, gate);
  return rc;
}

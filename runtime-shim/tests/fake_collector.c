/* A stand-in for the CUPTI collector at its C interface (klaraptor_collect.h), for testing
 * the profiling runtime's side of it without a GPU: built as a shared library that the
 * runtime dlopens through KLARAPTOR_COLLECTOR. It launches each shape once through
 * req->launch, appends a minimal JSON line per shape to req->out_path and, as the real
 * collector does, calls req->progress after each line (status 0 when the launch worked, 1
 * when it failed). FAKE_COLLECTOR_SILENT_LAST=1 leaves the last shape unreported (a
 * collector that stopped early); FAKE_COLLECTOR_FAIL=1 makes it fail at once (nonzero,
 * nothing written).
 *
 * Standing in for the GPU (tests/parallel_profile.rs):
 *   FAKE_COLLECTOR_BUSY=<threads>[,<threads>…] or "all": the shapes of those thread counts
 *     fail as the real collector records a GPU whose counters another process holds (the
 *     range profiler's CUPTI_ERROR_HARDWARE_BUSY), also on stderr;
 *   FAKE_COLLECTOR_FAULT=<threads>: a shape of at least that many threads faults (an illegal
 *     address, as a reduction whose shared memory is sized for a smaller block), which loses
 *     the process's CUDA context. As the real collector (profiler/collector/src/collect.rs),
 *     which times every shape of a request before its profiler passes: the faulting shape's
 *     sample says "an error in the kernel: …", the shapes after it are not run ("not run:
 *     the CUDA context is unusable after …"), the shapes before it lose their profiler pass
 *     ("not profiled: the CUDA context is unusable after …"), and every later request of the
 *     process fails (nonzero, a sample per shape saying "the collector failed: …");
 *     with FAKE_COLLECTOR_FAULT_AT=session the fault shows in the profiler pass instead, a
 *     session of every shape of the request that ran: as the real collector, it gives each
 *     of them the fault's message, so the samples do not say which shape faulted;
 *   FAKE_COLLECTOR_COUNTERS=1: a measured shape's sample has counters, made up as those of
 *     a kernel that loads two floats and stores one per thread of its grid (so that a model
 *     can be fitted from the profile);
 *   FAKE_COLLECTOR_LOG=<file>: one line "<pid> <start ns> <stop ns>" per request appended
 *     (CLOCK_REALTIME), the interval the request "used the GPU";
 *   FAKE_COLLECTOR_SLEEP_MS=<ms>: each request lasts at least that long;
 *   FAKE_COLLECTOR_CALLS=<file>: a line per call of the entry points appended, "prepare" or
 *     "collect" (klaraptor_collect_prepare: the runtime starts the collector ahead). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "klaraptor_collect.h"

static const char BUSY_ERROR[] =
    "the profiler failed: cuptiRangeProfilerStart failed: CUPTI_ERROR_HARDWARE_BUSY: the "
    "hardware is busy (CUptiResult 26)";

/* What the real collector's synchronisation reports after a kernel's illegal address. */
static const char FAULT_ERROR[] =
    "cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was "
    "encountered";

/* Set once a shape faulted: the context is lost for the rest of the process. */
static int g_lost;

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* Whether FAKE_COLLECTOR_BUSY names a block of this many threads. */
static int busy(unsigned threads) {
  const char *v = getenv("FAKE_COLLECTOR_BUSY");
  if (!v || !*v) return 0;
  if (strcmp(v, "all") == 0) return 1;
  while (*v) {
    char *end;
    unsigned long t = strtoul(v, &end, 10);
    if (end == v) return 0;
    if (t == threads) return 1;
    v = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* Whether a block of this many threads faults (FAKE_COLLECTOR_FAULT). */
static int faults(unsigned threads) {
  const char *v = getenv("FAKE_COLLECTOR_FAULT");
  if (!v || !*v) return 0;
  unsigned long t = strtoul(v, NULL, 10);
  return t > 0 && threads >= t;
}

/* Made-up counters of shape i (FAKE_COLLECTOR_COUNTERS=1), as a JSON member. */
static void counters(FILE *f, const klaraptor_collect_request *req, int i) {
  const uint32_t *b = req->blocks + 3 * i, *g = req->grids + 3 * i;
  unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
  unsigned long long blocks = (unsigned long long)g[0] * g[1] * g[2];
  unsigned long long warps = blocks * ((threads + 31) / 32);
  unsigned long long lanes = threads < 32 ? threads : 32;
  unsigned long long sectors = (lanes * 4 + 31) / 32; /* per request of a warp */
  double n = (double)req->data[0];
  double ms = 0.003 + 2e-6 * (double)warps + 1e-7 * n * (1.0 + 32.0 / (double)threads);
  double active = (double)warps < 48.0 ? (double)warps : 48.0;
  fprintf(f,
          ",\"counters\":{\"inst_executed\":%llu,\"inst_global_ld\":%llu,"
          "\"inst_global_st\":%llu,\"inst_shared_ld\":0,\"inst_shared_st\":0,"
          "\"inst_barrier\":0,\"gld_requests\":%llu,\"gst_requests\":%llu,"
          "\"gld_sectors\":%llu,\"gst_sectors\":%llu,\"dram_bytes_read\":%.0f,"
          "\"dram_bytes_write\":%.0f,\"achieved_active_warps\":%.3f,\"time_ms\":%.6f,"
          "\"time_runs_ms\":[%.6f],\"regs_per_thread\":16,\"smem_static\":0,"
          "\"smem_dynamic\":%llu}",
          warps * 12, warps * 2, warps, warps * 2, warps, warps * 2 * sectors, warps * sectors,
          8.0 * n, 4.0 * n, active, ms, ms, (unsigned long long)req->dynamic_smem);
}

static void line(FILE *f, const klaraptor_collect_request *req, int i, const char *error) {
  const uint32_t *b = req->blocks + 3 * i, *g = req->grids + 3 * i;
  fprintf(f, "{\"sizes\":[%lld],\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u]",
          (long long)req->data[0], b[0], b[1], b[2], g[0], g[1], g[2]);
  const char *with = getenv("FAKE_COLLECTOR_COUNTERS");
  if (error && *error)
    fprintf(f, ",\"error\":\"%s\"", error);
  else if (with && strcmp(with, "1") == 0)
    counters(f, req, i);
  fputs("}\n", f);
  fflush(f);
}

static void log_call(const char *what) {
  const char *path = getenv("FAKE_COLLECTOR_CALLS");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", what);
  fclose(f);
}

int klaraptor_collect_prepare(void) {
  log_call("prepare");
  return 0;
}

int klaraptor_collect(const klaraptor_collect_request *req) {
  log_call("collect");
  const char *fail = getenv("FAKE_COLLECTOR_FAIL");
  if (fail && strcmp(fail, "1") == 0) {
    fprintf(stderr, "fake collector: failing as asked\n");
    return 1;
  }
  if (req->abi_version != KLARAPTOR_COLLECT_ABI) return 1;
  long long start = now_ns();
  const char *silent = getenv("FAKE_COLLECTOR_SILENT_LAST");
  int report_last = !(silent && strcmp(silent, "1") == 0);
  FILE *f = fopen(req->out_path, "a");
  if (!f) return 1;
  if (g_lost) {
    /* A lost context: the request fails, and says so in a sample per shape. */
    char why[512];
    snprintf(why, sizeof why, "the collector failed: cuEventCreate failed: %s", FAULT_ERROR);
    for (int i = 0; i < req->n_shapes; i++) {
      line(f, req, i, why);
      if (req->progress) req->progress(req->ctx, i, 1);
    }
    fclose(f);
    fprintf(stderr, "klaraptor-collect: %s\n", why);
    return 1;
  }
  /* Each shape's error ("": measured). Timing first, in shape order; a fault stops it. */
  int n = req->n_shapes;
  char(*error)[512] = calloc((size_t)n + 1, sizeof *error);
  if (!error) {
    fclose(f);
    return 1;
  }
  char after[400] = ""; /* "the CUDA context is unusable after …", once a shape faulted */
  int faulted = n;
  const char *at = getenv("FAKE_COLLECTOR_FAULT_AT");
  int in_session = at && strcmp(at, "session") == 0, session_faults = 0;
  for (int i = 0; i < n; i++) {
    const uint32_t *b = req->blocks + 3 * i;
    unsigned threads = b[0] * b[1] * b[2];
    if (after[0]) {
      snprintf(error[i], sizeof error[i], "not run: %s", after);
    } else if (busy(threads)) {
      snprintf(error[i], sizeof error[i], "%s", BUSY_ERROR);
      fprintf(stderr, "klaraptor-collect: %s [%lld] block [%u, %u, %u]: %s\n",
              req->kernel_name, (long long)req->data[0], b[0], b[1], b[2], BUSY_ERROR);
    } else {
      int rc = req->launch(req->ctx, i);
      if (faults(threads) && in_session) {
        session_faults = 1;
      } else if (faults(threads)) {
        snprintf(error[i], sizeof error[i], "an error in the kernel: %s", FAULT_ERROR);
        snprintf(after, sizeof after, "the CUDA context is unusable after %s", error[i]);
        faulted = i;
        g_lost = 1;
      } else if (rc) {
        snprintf(error[i], sizeof error[i], "launch failed");
      }
    }
  }
  /* The profiler passes: the shapes timed before the fault are not profiled; a session
   * that faults gives each of its shapes the fault. */
  for (int i = 0; i < faulted; i++)
    if (after[0] && !error[i][0])
      snprintf(error[i], sizeof error[i], "not profiled: %s", after);
  for (int i = 0; i < n && session_faults; i++)
    if (!error[i][0]) {
      snprintf(error[i], sizeof error[i], "an error in the kernel: %s", FAULT_ERROR);
      g_lost = 1;
    }
  for (int i = 0; i < n; i++) {
    line(f, req, i, error[i]);
    if (req->progress && (report_last || i + 1 < n)) req->progress(req->ctx, i, error[i][0] ? 1 : 0);
  }
  free(error);
  fclose(f);
  const char *sleep_ms = getenv("FAKE_COLLECTOR_SLEEP_MS");
  if (sleep_ms && *sleep_ms) {
    long ms = strtol(sleep_ms, NULL, 10);
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000l};
    while (nanosleep(&d, &d) != 0) {
    }
  }
  const char *log = getenv("FAKE_COLLECTOR_LOG");
  if (log && *log) {
    FILE *l = fopen(log, "a");
    if (l) {
      fprintf(l, "%ld %lld %lld\n", (long)getpid(), start, now_ns());
      fclose(l);
    }
  }
  return 0;
}

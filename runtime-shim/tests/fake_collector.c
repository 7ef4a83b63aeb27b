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
 *   FAKE_COLLECTOR_LOG=<file>: one line "<pid> <start ns> <stop ns>" per request appended
 *     (CLOCK_REALTIME), the interval the request "used the GPU";
 *   FAKE_COLLECTOR_SLEEP_MS=<ms>: each request lasts at least that long. */
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

int klaraptor_collect(const klaraptor_collect_request *req) {
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
  for (int i = 0; i < req->n_shapes; i++) {
    const uint32_t *b = req->blocks + 3 * i, *g = req->grids + 3 * i;
    int is_busy = busy(b[0] * b[1] * b[2]);
    int rc = is_busy ? 0 : req->launch(req->ctx, i);
    if (is_busy) {
      fprintf(f, "{\"sizes\":[%lld],\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u],\"error\":\"%s\"}\n",
              (long long)req->data[0], b[0], b[1], b[2], g[0], g[1], g[2], BUSY_ERROR);
      fprintf(stderr, "klaraptor-collect: %s [%lld] block [%u, %u, %u]: %s\n", req->kernel_name,
              (long long)req->data[0], b[0], b[1], b[2], BUSY_ERROR);
    } else {
      fprintf(f, "{\"sizes\":[%lld],\"block\":[%u,%u,%u],\"grid\":[%u,%u,%u]%s}\n",
              (long long)req->data[0], b[0], b[1], b[2], g[0], g[1], g[2],
              rc ? ",\"error\":\"launch failed\"" : "");
    }
    fflush(f);
    if (req->progress && (report_last || i + 1 < req->n_shapes))
      req->progress(req->ctx, i, rc || is_busy ? 1 : 0);
  }
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

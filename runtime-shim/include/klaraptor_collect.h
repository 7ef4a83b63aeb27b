/* The interface between the profiling variant of a user's program (runtime shim, C) and the
 * in-process collector (profiler/collector, a Rust cdylib loaded with dlopen).
 *
 * In a profiling build, each launch of an annotated kernel at a size of the sampling plan
 * reaches the shim with the kernel's CUkernel handle, its argument array and the program's
 * stream. The shim computes the grid of every block shape of the plan from the kernel's grid
 * formula, then calls klaraptor_collect() once. The collector launches each shape through
 * req->launch (as many times as it needs: warm-up, timed runs, profiler passes), measures,
 * and appends one JSON line per shape to req->out_path: a profiler::record::Sample, and
 * reports each shape through req->progress. The shim then makes the program's own launch,
 * so the program continues.
 *
 * The collector loads libcuda and libcupti itself; it uses the CUDA context current on the
 * calling thread (the runtime's primary context).
 */
#ifndef KLARAPTOR_COLLECT_H
#define KLARAPTOR_COLLECT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI 2 added `progress`. A collector reads `progress` only from a request of ABI 2 or
 * later, so it serves ABI 1 requests (shims built before) too. */
#define KLARAPTOR_COLLECT_ABI 2

typedef struct klaraptor_collect_request {
  int abi_version;           /* KLARAPTOR_COLLECT_ABI */
  const char *kernel_id;     /* mangled name */
  const char *kernel_name;   /* source name */
  int n_data;
  const int64_t *data;       /* the launch's data-parameter values */
  int n_shapes;
  const uint32_t *blocks;    /* n_shapes * 3: block x, y, z of each shape */
  const uint32_t *grids;     /* n_shapes * 3: the grid the formula gives for that shape */
  void *kernel;              /* CUkernel of the kernel (cudaKernel_t), for attributes */
  void *stream;              /* CUstream the program launches on (NULL: legacy default) */
  uint64_t dynamic_smem;     /* bytes of dynamic shared memory the program asked for */
  int runs;                  /* timed runs per shape (median kept), >= 1 */
  int warmup;                /* untimed launches before timing, >= 0 */
  const char *out_path;      /* file the JSON lines are appended to */
  void *ctx;
  /* Launch shape i (0 <= i < n_shapes) on `stream`, asynchronously; returns the
   * cudaError_t of the launch (0 on success). */
  int (*launch)(void *ctx, int shape);
  /* Since ABI 2; NULL: no reports. Called once per shape, in shape order, right after the
   * shape's line was appended to out_path: status 0 when the shape was measured, 1 when its
   * sample records a failure. (A collector may measure every shape before it writes the
   * first line, so the calls of one request can come close together.) */
  void (*progress)(void *ctx, int shape, int status);
} klaraptor_collect_request;

/* Returns 0 when every shape was measured or recorded as failed; nonzero when the collector
 * could not work at all (no CUPTI, no context, the GPU's counters held by another process);
 * it prints why on stderr and, when it wrote nothing for the request, appends a failed
 * sample per shape whose error says why ("the collector failed: …"). */
typedef int (*klaraptor_collect_fn)(const klaraptor_collect_request *req);
int klaraptor_collect(const klaraptor_collect_request *req);

/* Optional: starts the collector (its libraries loaded, the profiler initialised; no CUDA
 * context needed) ahead of the first request, so that a thread can do it while the program
 * starts. Returns 0 when it started; a failure is reported by the requests. */
typedef int (*klaraptor_collect_prepare_fn)(void);
int klaraptor_collect_prepare(void);

#ifdef __cplusplus
}
#endif
#endif

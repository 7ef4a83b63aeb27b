/* klaraptor runtime: private hooks for tests and benchmarks. Not part of the interface that
 * generated code or instrumented programs use; nothing here is stable.
 *
 * The shim reaches the CUDA runtime only through two functions: "which device is current"
 * (called on every klaraptor_select) and "describe device N" (called once per device, on the
 * first decision made for it). By default they call cudaGetDevice / cudaDeviceGetAttribute /
 * cudaGetDeviceProperties (or report "no CUDA runtime" when built with -DKLARAPTOR_NO_CUDART).
 * Tests replace them to simulate devices on a machine without a GPU.
 */
#ifndef KLARAPTOR_INTERNAL_H
#define KLARAPTOR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "klaraptor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stores the current device's ordinal; returns 0, or a nonzero error code. Must be cheap and
 * thread-safe: it runs on every launch. */
typedef int (*klaraptor_current_device_fn)(int *ordinal);

/* Fills *dev (ordinal included) for device `ordinal`; returns 0, or nonzero after writing a
 * short reason into err[0..errlen). Called with the shim's lock held, once per device. */
typedef int (*klaraptor_query_device_fn)(int ordinal, klaraptor_device *dev, char *err,
                                         size_t errlen);

/* Replaces the device hooks (NULL restores the default of either). Call it before any
 * klaraptor_select, from one thread; it also forgets the cached device descriptions. */
void klaraptor__set_device_query(klaraptor_current_device_fn current,
                                 klaraptor_query_device_fn query);

/* Forgets the memo, the cached devices, the environment (re-read at the next select) and the
 * "already logged" marks, and closes the log file. Registered kernels stay. Tests only: it
 * must not run concurrently with klaraptor_select. */
void klaraptor__reset_for_tests(void);
/* Runs what the runtime does at exit for keys still refining (their progress files, the log). */
void klaraptor__save_progress_for_tests(void);

/* Called by the launch entry point (klaraptor_prof.c) right before it passes a launch on,
 * with the gate it holds the stream at (0: none): a timed launch holds the stream at a gate
 * (unless it is held already) and records its start event again here, right before the
 * launch. Returns the gate. Nothing to do, and cheap, for every other launch. */
uint32_t klaraptor__launch_starts(void *kernel, void *stream, uint32_t gate);
/* Called by the launch entry point right after the launch, rc what it returned, with what
 * klaraptor__launch_starts returned: a timed launch records its end event, then the gate
 * opens. Must follow every klaraptor__launch_starts. */
void klaraptor__launch_stops(void *stream, int rc, uint32_t gate);
/* The gate (klaraptor_refine.inc): holds `stream` until klaraptor__gate_open(value) with the
 * value it returns (0: not held: the driver has no stream memory operations, KLARAPTOR_GATE
 * is off, or the runtime has no CUDA). Between the two, the thread may only queue work on
 * the stream, never wait for it. */
uint32_t klaraptor__gate_close(void *stream);
void klaraptor__gate_open(uint32_t value);

/* 1 when the first registration warmed the first launch's paths (klaraptor_rt.c: warm_up),
 * which must leave no trace: tests check that it ran. */
int klaraptor__warmed_up(void);

/* Number of memoized decisions. */
size_t klaraptor__memo_size(void);

/* Parses a KLARAPTOR_FORCE value the way the shim does and looks `kernel` up in it: returns
 * the number of well-formed entries and, when `kernel` matches one (the last one wins),
 * fills block[0..3) and sets *found to 1 (else 0). Malformed entries are counted in
 * *n_bad. Writes nothing to stderr. */
int klaraptor__parse_force(const char *spec, const char *kernel, unsigned block[3], int *found,
                           int *n_bad);

/* The profiling runtime (klaraptor_prof.c): told of each launch of an annotated kernel by
 * klaraptor_select, after the decision, with the dims the launch will use. */
typedef void (*klaraptor_profile_note_fn)(const klaraptor_kernel *k, const int64_t *data,
                                          uint64_t grid_xy, uint32_t grid_z, uint64_t block_xy,
                                          uint32_t block_z);
void klaraptor__set_profile_note(klaraptor_profile_note_fn fn);

/* 0 when block b can be launched with kernel k at data on the current device (limits and
 * the kernel's constraints) and its grid g is computed; else -1 with the reason in why. */
int klaraptor__shape_ok(const klaraptor_kernel *k, const int64_t *data, const uint32_t b[3],
                        uint32_t g[3], char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif

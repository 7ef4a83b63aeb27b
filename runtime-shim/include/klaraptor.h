/* klaraptor runtime: the interface between instrumented host code, the per-kernel code
 * klaraptor-cc generates, and the runtime shim (runtime-shim/src/).
 *
 * - The IO-builder pass (passes/src/inject.rs) inserts, before each launch of an annotated
 *   kernel, a call of klaraptor_select() with the kernel's id (its mangled name), the
 *   data-parameter values widened to 64 bits, and pointers to the launch's packed grid and
 *   block (dim3 packed as x | y << 32, and z).
 * - klaraptor-cc generates, per translation unit, one klaraptor_kernel descriptor per
 *   annotated kernel (grid formula and block constraints compiled to C, and later the
 *   rational program) and registers it from a constructor with klaraptor_register().
 * - The shim keeps the registry and the memo, applies the KLARAPTOR_* controls and the
 *   device limits, and rewrites the dims.
 */
#ifndef KLARAPTOR_H
#define KLARAPTOR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2 adds klaraptor_kernel.shmem; the runtime still accepts descriptors of version 1. */
#define KLARAPTOR_ABI_VERSION 2

/* What the shim tells a rational program about the device current at the launch. */
typedef struct klaraptor_device {
  int ordinal;
  char name[256];
  int sm_count;
  int warp_size;
  int max_threads_per_block;
  int max_block_dim[3];
  int max_grid_dim[3];
  int max_threads_per_sm;
  int max_blocks_per_sm;
  int regs_per_sm;
  int regs_per_block;
  int smem_per_block;       /* bytes, default carveout limit per block */
  int smem_per_block_optin; /* bytes */
  int smem_per_sm;          /* bytes */
  int cc_major, cc_minor;
  /* The clocks are 0: the runtime does not ask for them (the CUDA runtime takes about half a
   * millisecond for each). The bus width is part of the device's identity (the choices
   * cache's key); 0 where the device does not say. */
  int clock_khz;      /* peak SM clock */
  int mem_clock_khz;  /* peak memory clock */
  int mem_bus_bits;   /* global memory bus width */
} klaraptor_device;

typedef struct klaraptor_kernel {
  int abi_version;          /* KLARAPTOR_ABI_VERSION */
  const char *id;           /* the kernel's mangled name: the id the pass passes */
  const char *name;         /* for logs, KLARAPTOR_FORCE and the choices cache: the name in
                             * the source; for a template instance, klaraptor-cc gives it
                             * its template arguments, stencil1d<3> (spec/src/names.rs) */
  int n_data;               /* number of data parameters */
  const char *const *data_names; /* their labels, n_data of them */
  int dim;                  /* 1, 2 or 3 */
  /* Grid for a block shape: returns 0 and fills grid[0..3) (unused dims 1), or nonzero when
   * the formula cannot be evaluated (division by zero, overflow, out of range). */
  int (*grid)(const int64_t *data, const uint32_t block[3], uint32_t grid[3]);
  /* 1 when the block shape satisfies every user constraint, else 0. */
  int (*allowed)(const int64_t *data, const uint32_t block[3]);
  int regs_per_thread;      /* from ptxas; -1 if unknown */
  int static_smem;          /* bytes; -1 if unknown */
  /* The rational program: picks block[0..3) for data on dev; returns 0 on success. NULL
   * when no model was built (the launch keeps the program's own dims). */
  int (*select)(const int64_t *data, const klaraptor_device *dev, uint32_t block[3]);
  const char *model_device; /* the device name the model was made for; NULL without one */
  /* Version 2. The bytes of dynamic shared memory a launch needs with this block shape (the
   * annotation's shmem(...) clause, or the formula the pass read from the launch), or -1 when
   * the formula cannot be evaluated. NULL: the launch's own amount, whatever the shape. */
  int64_t (*shmem)(const int64_t *data, const uint32_t block[3]);
} klaraptor_kernel;

/* Called by generated constructors. A second registration of the same id (another object's
 * descriptor of the kernel) is ignored when it describes the same annotation; when it
 * describes another, the runtime warns once and the kernel keeps the program's own launch. */
void klaraptor_register(const klaraptor_kernel *k);

/* Rational programs carry their own version: 1 ends at `source`, 2 adds `rank`,
 * `profiled_best` and `code_hash` (what the runtime's refinement needs), 3 `sm_count`. */
#define KLARAPTOR_MODEL_ABI_VERSION 4

/* A rational program: what klaraptor-cc generates at link time for one kernel and one device
 * (app.klaraptor/<kernel>.<device>.c). Registered from that file's constructor; the shim uses
 * the model made for the device current at the launch: its name equal to the device's (not a
 * part of it) and, from version 3, its SM count too. */
typedef struct klaraptor_model {
  int abi_version;          /* KLARAPTOR_MODEL_ABI_VERSION (1 is still accepted) */
  const char *id;           /* the kernel's mangled name */
  const char *device;       /* the device name the model was made for, e.g. "NVIDIA H200" */
  /* Picks block[0..3) for data on dev; returns 0, or nonzero when it cannot decide. The
   * predicted time in microseconds goes to *predicted_us when it is not NULL. */
  int (*select)(const int64_t *data, const klaraptor_device *dev, uint32_t block[3],
                double *predicted_us);
  const char *source;       /* path of the generated C, for logs and `klaraptor inspect` */
  /* Version 2. The model's k best distinct shapes for data on dev, best first, into
   * blocks[0..) (and their predicted microseconds into predicted_us when it is not NULL);
   * returns how many shapes the model may choose from (k or more when it filled k), or a
   * negative value when it cannot rank. The first one is what `select` picks. */
  int (*rank)(const int64_t *data, const klaraptor_device *dev, int k, uint32_t (*blocks)[3],
              double *predicted_us);
  /* Version 2, may be NULL. The shape the profile measured fastest at the profiled size
   * nearest data; returns 0, or nonzero when there is none. */
  int (*profiled_best)(const int64_t *data, const klaraptor_device *dev, uint32_t block[3]);
  /* Version 2: the hash of the kernel's device code the model was profiled for (the choices
   * cache's key). */
  const char *code_hash;
  /* Version 3: the SM count of the device the model was made for (with `device`, its
   * identity: an H100 PCIe and an H100 SXM, a MIG slice and its whole GPU differ); 0: any. */
  int sm_count;
  /* Version 4: for a GPU without a profile of its own, the name of the GPU of the same
   * architecture whose profile the program was fitted on (a transferred program; the log says
   * `source=model … (transferred from <GPU>)`); NULL: this GPU's own profile. */
  const char *transferred_from;
} klaraptor_model;

/* A second registration of the same (id, device) is ignored. */
void klaraptor_register_model(const klaraptor_model *m);

/* Called before each instrumented launch; may rewrite the four dims in place. Never times
 * the launch (the pass calls it where it cannot place klaraptor_launch_end). */
void klaraptor_select(const char *id, int32_t n_data, const int64_t *data, uint64_t *grid_xy,
                      uint32_t *grid_z, uint64_t *block_xy, uint32_t *block_z);

/* Called before each instrumented launch whose end the pass can see: as klaraptor_select,
 * and also given the launch's dynamic shared memory and stream, so that the runtime may time
 * the launch while it refines its choice. Returns a ticket to hand to klaraptor_launch_end
 * right after the launch (0: nothing to do). */
uint64_t klaraptor_launch_begin(const char *id, int32_t n_data, const int64_t *data,
                                uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                                uint32_t *block_z, uint64_t shmem, void *stream);
void klaraptor_launch_end(uint64_t ticket);

/* The two above, for a launch whose dynamic shared memory follows its block (the kernel's
 * descriptor has shmem): *shmem holds the launch's own amount, and is replaced by the amount
 * for the shape chosen when the runtime changes the shape. Shapes whose amount (plus the
 * kernel's static shared memory) exceeds the device's shared memory per block are never
 * chosen. */
void klaraptor_select_shmem(const char *id, int32_t n_data, const int64_t *data,
                            uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                            uint32_t *block_z, uint64_t *shmem);
uint64_t klaraptor_launch_begin_shmem(const char *id, int32_t n_data, const int64_t *data,
                                      uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                                      uint32_t *block_z, uint64_t *shmem, void *stream);

#ifdef __cplusplus
}
#endif
#endif

// A sequential CPU emulation of the small part of CUDA the PolyBench samples use, for checking
// their kernels' index logic and their CPU references on a machine without a GPU.
//
// It is a development aid, not a CUDA implementation: every thread of every block runs to
// completion one after the other, which is one legal schedule for kernels without
// __syncthreads, shared memory or inter-thread communication (the samples have none; a
// kernel that needs more does not compile here). Timings it prints mean nothing. The real
// check is bench/gpu/polybench/run.sh on a GPU.
//
// emu/check.sh rewrites each `k<<<grid, block>>>(args)` into
// `kl_emu::launch(k, grid, block)(args)` and compiles the result as C++ with this header
// force-included and KL_CPU_EMULATION defined.
//
// KL_EMU_BLOCK=bx[,by[,bz]] replaces the block of every launch in the dimensions the launch
// uses (those with a block extent > 1) and grows the grid so that it covers at least the
// threads of the original launch: a check that kernels use blockDim and guard their bounds.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace kl_emu {
inline uint3 thread_idx, block_idx, block_dim, grid_dim;
}
#define threadIdx (kl_emu::thread_idx)
#define blockIdx (kl_emu::block_idx)
#define blockDim (kl_emu::block_dim)
#define gridDim (kl_emu::grid_dim)

inline float atomicAdd(float *p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};
typedef std::chrono::steady_clock::time_point *cudaEvent_t;

inline const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory"
                                                                         : "invalid value";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaMalloc(void **p, size_t n) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void *d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbol(T &sym, const void *s, size_t n, size_t off = 0,
                               cudaMemcpyKind = cudaMemcpyHostToDevice) {
  std::memcpy((char *)&sym + off, s, n);
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void *d, const T &sym, size_t n, size_t off = 0,
                                 cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  std::memcpy(d, (const char *)&sym + off, n);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new std::chrono::steady_clock::time_point();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, int = 0) {
  *e = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(*b - *a).count();
  return cudaSuccess;
}

namespace kl_emu {

inline bool block_override(unsigned out[3]) {
  static int state = -1; // -1 unread, 0 none, 1 set
  static unsigned v[3] = {1, 1, 1};
  if (state < 0) {
    state = 0;
    if (const char *s = std::getenv("KL_EMU_BLOCK")) {
      int n = std::sscanf(s, "%u,%u,%u", &v[0], &v[1], &v[2]);
      if (n < 1 || v[0] == 0 || v[1] == 0 || v[2] == 0) {
        std::fprintf(stderr, "KL_EMU_BLOCK must be bx[,by[,bz]] with positive values\n");
        std::exit(2);
      }
      state = 1;
    }
  }
  if (state == 1) std::memcpy(out, v, sizeof v);
  return state == 1;
}

template <class... P> struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  template <class... A> void operator()(A &&...args) const {
    dim3 g = grid, b = block;
    unsigned o[3];
    if (block_override(o)) {
      unsigned *gd[3] = {&g.x, &g.y, &g.z}, *bd[3] = {&b.x, &b.y, &b.z};
      for (int d = 0; d < 3; ++d)
        if (*bd[d] > 1) {
          unsigned long threads = (unsigned long)*gd[d] * *bd[d];
          *bd[d] = o[d];
          *gd[d] = (unsigned)((threads + o[d] - 1) / o[d]);
        }
    }
    grid_dim = {g.x, g.y, g.z};
    block_dim = {b.x, b.y, b.z};
    for (unsigned bz = 0; bz < g.z; ++bz)
      for (unsigned by = 0; by < g.y; ++by)
        for (unsigned bx = 0; bx < g.x; ++bx)
          for (unsigned tz = 0; tz < b.z; ++tz)
            for (unsigned ty = 0; ty < b.y; ++ty)
              for (unsigned tx = 0; tx < b.x; ++tx) {
                block_idx = {bx, by, bz};
                thread_idx = {tx, ty, tz};
                kernel(P(args)...);
              }
  }
};

template <class... P>
Launch<P...> launch(void (*k)(P...), dim3 grid, dim3 block, size_t = 0, int = 0) {
  return Launch<P...>{k, grid, block};
}

} // namespace kl_emu

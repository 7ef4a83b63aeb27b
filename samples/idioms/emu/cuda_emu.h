// A CPU emulation of the part of CUDA the idioms samples use, for checking their kernels'
// index logic, their block-level cooperation and their CPU references without a GPU.
//
// The blocks of a launch run one after the other. The threads of a block run as fibers
// (ucontext) on one CPU thread, each until it finishes or waits at __syncthreads() or at a
// warp-level operation; a block barrier releases once every live thread of the block waits
// at it, a warp operation once every live thread of the warp (32 consecutive linear thread
// ids) has reached it. So __shared__ memory (a static array: blocks never overlap),
// __syncthreads, the warp shuffles and atomics (nothing runs between two switches) behave
// as on a GPU for kernels whose threads reach their barriers together; a kernel that
// diverges around a barrier stops with a message. Streams are accepted and run in order.
// Timings it prints mean nothing. It is a development aid, not a CUDA implementation.
//
// emu/check.sh rewrites each `k<<<grid, block[, shmem[, stream]]>>>(args)` into
// `kl_emu::launch(k, grid, block[, shmem[, stream]])(args)` and compiles the result as C++
// with this header force-included and KL_CPU_EMULATION defined.
#pragma once

#include <ucontext.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)

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
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------
// Runtime API subset

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};
typedef std::chrono::steady_clock::time_point *cudaEvent_t;
typedef int *cudaStream_t;
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };

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
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
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
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  *e = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(*b - *a).count();
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) {
  *s = new int(0);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  return cudaStreamCreate(s);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

// ---------------------------------------------------------------------------------------
// The fibers of a block

namespace kl_emu {

enum State { kRun, kBarrier, kWarp, kDone };
struct Fiber {
  ucontext_t ctx;
  State state;
  uint3 tid;
  unsigned linear;
};
constexpr size_t kStack = 64 * 1024;
inline ucontext_t scheduler;
inline std::vector<Fiber> fibers;
inline std::vector<char> stacks;
inline Fiber *current = nullptr;
inline const std::function<void()> *body = nullptr;
inline uint64_t slots[1024]; // the values a warp operation exchanges, by linear thread id

inline void wait(State s) {
  if (!current) {
    std::fprintf(stderr, "emulation: a barrier or warp operation outside a kernel\n");
    std::exit(2);
  }
  Fiber *me = current;
  me->state = s;
  swapcontext(&me->ctx, &scheduler);
  thread_idx = me->tid; // resumed: the scheduler set it already, but be explicit
}

inline void trampoline() {
  (*body)();
  current->state = kDone;
  // returning resumes uc_link: the scheduler
}

inline void run_block(unsigned nthreads) {
  if (fibers.size() < nthreads) fibers.resize(nthreads);
  if (stacks.size() < nthreads * kStack) stacks.resize(nthreads * kStack);
  for (unsigned t = 0; t < nthreads; ++t) {
    Fiber &f = fibers[t];
    f.linear = t;
    f.tid = {t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
    f.state = kRun;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks.data() + (size_t)t * kStack;
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, trampoline, 0);
  }
  for (;;) {
    for (unsigned t = 0; t < nthreads; ++t) {
      Fiber &f = fibers[t];
      if (f.state != kRun) continue;
      current = &f;
      thread_idx = f.tid;
      swapcontext(&scheduler, &f.ctx);
    }
    current = nullptr;
    bool live = false, all_barrier = true, released = false;
    for (unsigned w = 0; w < nthreads; w += 32) {
      unsigned end = w + 32 < nthreads ? w + 32 : nthreads;
      bool any = false, all_warp = true;
      for (unsigned t = w; t < end; ++t) {
        State s = fibers[t].state;
        if (s == kDone) continue;
        any = live = true;
        if (s != kWarp) all_warp = false;
        if (s != kBarrier) all_barrier = false;
      }
      if (any && all_warp) {
        for (unsigned t = w; t < end; ++t)
          if (fibers[t].state == kWarp) fibers[t].state = kRun;
        released = true;
      }
    }
    if (!live) return;
    if (released) continue;
    if (all_barrier) {
      for (unsigned t = 0; t < nthreads; ++t)
        if (fibers[t].state == kBarrier) fibers[t].state = kRun;
      continue;
    }
    std::fprintf(stderr,
                 "emulation: block (%u,%u,%u) deadlocks: its threads wait at different "
                 "barriers (a barrier or warp operation under divergent control flow)\n",
                 block_idx.x, block_idx.y, block_idx.z);
    std::exit(3);
  }
}

template <class... P> struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  template <class... A> void operator()(A &&...args) const {
    unsigned long threads = (unsigned long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
      std::fprintf(stderr, "emulation: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n",
                   grid.x, grid.y, grid.z, block.x, block.y, block.z);
      std::exit(2);
    }
    grid_dim = {grid.x, grid.y, grid.z};
    block_dim = {block.x, block.y, block.z};
    std::function<void()> f = [&] { kernel(P(args)...); };
    body = &f;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          block_idx = {bx, by, bz};
          run_block((unsigned)threads);
        }
    body = nullptr;
  }
};

template <class... P, class S = cudaStream_t>
Launch<P...> launch(void (*k)(P...), dim3 grid, dim3 block, size_t = 0, S = S()) {
  return Launch<P...>{k, grid, block};
}

// A warp exchange: every live thread of the warp publishes v, then reads lane `src` of its
// warp (its own value where src is none), then waits again so the slots can be reused.
template <class T> T exchange(T v, int src_lane, bool own) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "warp exchange of a type over 8 bytes");
  unsigned me = current ? current->linear : 0;
  std::memcpy(&slots[me], &v, sizeof v);
  wait(kWarp);
  T out = v;
  if (!own) std::memcpy(&out, &slots[me - me % 32 + (unsigned)src_lane], sizeof out);
  wait(kWarp);
  return out;
}

inline unsigned lane() { return current ? current->linear % 32 : 0; }

} // namespace kl_emu

inline void __syncthreads() { kl_emu::wait(kl_emu::kBarrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { kl_emu::wait(kl_emu::kWarp); }

template <class T> T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
  int l = (int)kl_emu::lane(), in = l % width;
  return kl_emu::exchange(v, l + (int)d, in + (int)d >= width);
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
  int l = (int)kl_emu::lane(), in = l % width;
  return kl_emu::exchange(v, l - (int)d, in - (int)d < 0);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
  int l = (int)kl_emu::lane(), base = l - l % width, src = base + ((l % width) ^ m) % width;
  return kl_emu::exchange(v, src, false);
}
template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  int l = (int)kl_emu::lane(), base = l - l % width;
  return kl_emu::exchange(v, base + ((src % width) + width) % width, false);
}

// Atomics: nothing else runs between two fiber switches, so a plain update is atomic.
template <class T> T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <class T> T atomicMax(T *p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T> T __ldg(const T *p) { return *p; }

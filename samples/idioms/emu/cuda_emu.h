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
// Dynamic shared memory (`extern __shared__ T name[];`, sized by the launch's third <<<>>>
// argument) is one fixed, page-aligned region that every such declaration points at (as on a
// GPU, all of a kernel's extern __shared__ arrays start at the same address). Each block
// starts with every byte of it 0xff (garbage, as on a GPU: a float read before any write is
// a NaN); the bytes past the launch's amount up to the end of its last page stay 0xff (a
// block that wrote there stops the program after the block), and the pages past that are
// inaccessible (an access stops the program with a message). A launch may ask for 48 KiB,
// or up to 227 KiB once cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
// n) allowed it, as on an H100.
//
// emu/check.sh rewrites each `k<<<grid, block[, shmem[, stream]]>>>(args)` into
// `kl_emu::launch(k, grid, block[, shmem[, stream]])(args)` and each
// `extern __shared__ T name[];` into `T *const name = kl_emu::DynamicShared{};`, and
// compiles the result as C++ with this header force-included and KL_CPU_EMULATION defined.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

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
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9
};

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
// Dynamic shared memory

namespace kl_emu {

constexpr size_t kDynDefault = 48 * 1024; // a launch's most without cudaFuncSetAttribute
constexpr size_t kDynOptIn = 227 * 1024;  // with it (an H100's, an H200's most per block)
constexpr size_t kDynPage = 4096;
constexpr size_t kDynRegion = (kDynOptIn + kDynPage - 1) / kDynPage * kDynPage + kDynPage;
alignas(kDynPage) inline unsigned char dyn_region[kDynRegion];
inline size_t dyn_bytes = 0;      // the current launch's amount
inline size_t dyn_open = 0;       // the bytes readable and writable: dyn_bytes up to a page
inline bool dyn_protect = false;  // whether the pages past dyn_open are inaccessible
inline uint3 dyn_block;           // the block running, for the fault's message

// The kernels' cudaFuncAttributeMaxDynamicSharedMemorySize, by kernel address.
inline std::map<const void *, size_t> &dyn_limits() {
  static std::map<const void *, size_t> m;
  return m;
}

// What `extern __shared__ T name[];` becomes: the region, as a pointer of any type.
struct DynamicShared {
  template <class T> operator T *() const { return reinterpret_cast<T *>(dyn_region); }
};

inline void on_fault(int sig, siginfo_t *si, void *) {
  const unsigned char *a = static_cast<const unsigned char *>(si->si_addr);
  if (a >= dyn_region && a < dyn_region + kDynRegion) {
    char msg[256];
    int n = std::snprintf(msg, sizeof msg,
                          "emulation: block (%u,%u,%u) accesses byte %zu of its dynamic shared "
                          "memory, but its launch gave %zu bytes (the third <<<>>> argument)\n",
                          dyn_block.x, dyn_block.y, dyn_block.z, (size_t)(a - dyn_region),
                          dyn_bytes);
    std::fflush(stdout); // what the program printed so far (the fault is in kernel code)
    if (n > 0) (void)!write(2, msg, (size_t)n);
    _exit(3);
  }
  signal(sig, SIG_DFL); // not ours: the default action once the access is retried
}

// Sets the region up for a launch of `bytes` of dynamic shared memory.
inline void dyn_launch(const void *kernel, size_t bytes) {
  size_t limit = kDynDefault;
  auto it = dyn_limits().find(kernel);
  if (it != dyn_limits().end() && it->second > limit) limit = it->second;
  if (bytes > limit) {
    std::fprintf(stderr,
                 "emulation: a launch asks for %zu bytes of dynamic shared memory, more than "
                 "the %zu allowed (%s)\n",
                 bytes, limit,
                 limit < kDynOptIn ? "cudaFuncSetAttribute(k, "
                                     "cudaFuncAttributeMaxDynamicSharedMemorySize, n) raises it"
                                   : "the most a block may have");
    std::exit(2);
  }
  static bool once = false;
  if (!once) {
    once = true;
    dyn_protect = sysconf(_SC_PAGESIZE) == (long)kDynPage;
    if (dyn_protect) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = on_fault;
      sa.sa_flags = SA_SIGINFO;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGSEGV, &sa, nullptr);
      sigaction(SIGBUS, &sa, nullptr);
      dyn_open = kDynRegion; // protected below
    }
  }
  const size_t open = (bytes + kDynPage - 1) / kDynPage * kDynPage;
  if (dyn_protect && open != dyn_open) {
    if (open > 0 && mprotect(dyn_region, open, PROT_READ | PROT_WRITE) != 0) std::abort();
    if (mprotect(dyn_region + open, kDynRegion - open, PROT_NONE) != 0) std::abort();
  }
  dyn_open = open;
  dyn_bytes = bytes;
}

inline void dyn_block_begin(uint3 b) {
  dyn_block = b;
  if (dyn_open) std::memset(dyn_region, 0xff, dyn_open);
}

inline void dyn_block_end() {
  for (size_t i = dyn_bytes; i < dyn_open; ++i)
    if (dyn_region[i] != 0xff) {
      std::fprintf(stderr,
                   "emulation: block (%u,%u,%u) wrote byte %zu of its dynamic shared memory, "
                   "but its launch gave %zu bytes (the third <<<>>> argument)\n",
                   dyn_block.x, dyn_block.y, dyn_block.z, i, dyn_bytes);
      std::exit(3);
    }
}

} // namespace kl_emu

template <class F> cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute a, int v) {
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (v < 0 || (size_t)v > kl_emu::kDynOptIn) return cudaErrorInvalidValue;
    kl_emu::dyn_limits()[reinterpret_cast<const void *>(kernel)] = (size_t)v;
  }
  return cudaSuccess;
}

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

inline unsigned block_threads = 0; // the threads of the block running

inline void run_block(unsigned nthreads) {
  block_threads = nthreads;
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
  size_t shmem;
  template <class... A> void operator()(A &&...args) const {
    unsigned long threads = (unsigned long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
      std::fprintf(stderr, "emulation: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n",
                   grid.x, grid.y, grid.z, block.x, block.y, block.z);
      std::exit(2);
    }
    dyn_launch(reinterpret_cast<const void *>(kernel), shmem);
    grid_dim = {grid.x, grid.y, grid.z};
    block_dim = {block.x, block.y, block.z};
    std::function<void()> f = [&] { kernel(P(args)...); };
    body = &f;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          block_idx = {bx, by, bz};
          dyn_block_begin(block_idx);
          run_block((unsigned)threads);
          dyn_block_end();
        }
    body = nullptr;
  }
};

template <class... P, class S = cudaStream_t>
Launch<P...> launch(void (*k)(P...), dim3 grid, dim3 block, size_t shmem = 0, S = S()) {
  return Launch<P...>{k, grid, block, shmem};
}

// A warp exchange: every live thread of the warp publishes v, then reads lane `src` of its
// warp (its own value where src is none), then waits again so the slots can be reused. A
// lane that did not publish (past the block's last thread, or exited) gives all-ones bytes
// (a NaN for a float): on a GPU its value is undefined.
template <class T> T exchange(T v, int src_lane, bool own) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "warp exchange of a type over 8 bytes");
  unsigned me = current ? current->linear : 0;
  std::memcpy(&slots[me], &v, sizeof v);
  wait(kWarp);
  T out = v;
  if (!own) {
    const unsigned src = me - me % 32 + (unsigned)src_lane;
    if (src < block_threads && fibers[src].state != kDone)
      std::memcpy(&out, &slots[src], sizeof out);
    else
      std::memset(&out, 0xff, sizeof out);
  }
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

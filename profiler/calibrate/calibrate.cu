// klaraptor device calibration: micro-benchmarks for the device figures of the MWP-CWP model.
//
// Usage:  calibrate [--device N] [--identify]
//
// Prints ONE TOML document on stdout (progress and diagnostics go to stderr):
//   format_version, [device], [attributes], [attribute_notes] (only when the runtime could not
//   answer an attribute), and — unless --identify — [calibration] with each figure, its spread
//   and [calibration.methods] (one line per figure saying how it was measured).
//
// Spread: for every figure, max − min (in the figure's own unit) over the repetitions of its
// measurement within this run, after one discarded warm-up repetition.
//
// Exit status: 0 success; 2 a CUDA call failed (stderr names it); 3 no usable CUDA device;
// 4 bad command line.
//
// Nothing here changes clocks or any GPU setting: the GPU runs at whatever clocks the driver
// picks, and the SM clock seen during the latency walks is measured and reported
// (`sm_clock_mhz`) so that cycle figures can be related to time. (The L1 walk's kernel states a
// preference for the largest L1 share of the SM's L1/shared memory: an attribute of that one
// kernel, which the driver applies to its own launches only.)

#include <cuda.h>  // CU_DEVICE_ATTRIBUTE_* for the driver-API fallback; libcuda is not linked
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr int kFormatVersion = 1;
// Warp schedulers (sub-partitions) per SM: 4 on every architecture since Volta (sm_70..sm_120).
constexpr int kSubPartitions = 4;
// Bytes between the nodes of a pointer chain: one node per 128-byte L2 line, so no two
// nodes share a line (nor a 32-byte sector).
constexpr unsigned kLineBytes = 128;
constexpr unsigned kLineElems = kLineBytes / sizeof(unsigned);
// Steps of one latency walk: per-step deltas are kept in shared memory (16 KiB).
constexpr int kWalkSteps = 4096;
constexpr int kWalks = 8;
// Lines of the L1 walk's chain: 16 KiB, well inside the L1 share an SM of sm_70 or later
// keeps beside the walk's own 16 KiB of shared memory, so every timed load hits.
constexpr unsigned kL1ChainLines = 128;
// Dependent loads between two clock readings in the two L1 walks whose difference gives the
// L1 figure (see the latencies section).
constexpr int kL1LoadsShort = 8;
constexpr int kL1LoadsLong = 32;

// ---------------------------------------------------------------------------------------
// Errors

void fail_cuda(cudaError_t e, const char *what, int line) {
  std::fprintf(stderr, "calibrate: calibrate.cu:%d: %s failed: %s (%s)\n", line, what,
               cudaGetErrorString(e), cudaGetErrorName(e));
  std::exit(2);
}
#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) fail_cuda(e_, #call, __LINE__);                                     \
  } while (0)
#define CK_LAUNCH() CK(cudaGetLastError())

// ---------------------------------------------------------------------------------------
// Device-side helpers

// Clock reads with a memory clobber so the compiler keeps them where they are written.
__device__ __forceinline__ unsigned long long clk() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ unsigned long long gtimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// Keeps every SM busy for `cycles` so the driver raises the clocks before measuring.
__global__ void spin(long long cycles, unsigned *sink) {
  long long t0 = (long long)clk();
  unsigned x = threadIdx.x;
  while ((long long)clk() - t0 < cycles) x = x * 1664525u + 1013904223u;
  if (x == 0x12345678u) sink[0] = x;
}

// Does nothing unless `flag` (never set): a block that only starts and retires.
__global__ void empty_block(const unsigned *flag, unsigned *sink) {
  if (flag[0] == 0xdeadbeefu) sink[0] = blockIdx.x ^ threadIdx.x;
}

// Writes a buffer: evicts whatever the L2 held before.
__global__ void scrub(unsigned *buf, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    buf[i] = v ^ (unsigned)i;
}

// chain[order[i] * kLineElems] = order[i + 1] * kLineElems (cyclic): one node per line.
__global__ void link_chain(unsigned *chain, const unsigned *order, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    chain[order[i] * kLineElems] = order[(i + 1) % n] * kLineElems;
}

// What one step of a chase does to the node index.
enum class Step {
  kAlu,     // one XOR with `key`, no load: the loop's own overhead
  kLoadCa,  // dependent load ld.global.ca: allocated in L1, so a warm chain is served by L1
  kLoadCg,  // dependent load ld.global.cg: L1 bypassed, every load served by L2 or DRAM
};

// One thread walks `steps` steps of a chain, each LOADS dependent loads (kLoadCg / kLoadCa).
// After each step the node index is stored to shared memory: that store cannot issue before
// the load has returned, and the clock is read after it, so consecutive clock readings are one
// step of dependent loads apart. With kAlu the load is replaced by one ALU operation on the
// index (the same loop's own overhead). The first `warm` nodes are walked untimed, in this
// same launch: one block of one thread lands on whatever SM the scheduler picks, so an L1
// warmed by an earlier launch may belong to another SM. They store the index like the timed
// steps, so the last of them has returned before the first clock read.
template <Step STEP, int LOADS = 1>
__global__ void chase(const unsigned *__restrict__ chain, unsigned start, int warm, int steps,
                      unsigned key, unsigned *deltas, unsigned *end_out,
                      unsigned long long *clocks) {
  __shared__ unsigned sdelta[kWalkSteps];
  __shared__ unsigned sidx[1];
  volatile unsigned *vidx = sidx;
  auto next = [&](unsigned i) {
    if constexpr (STEP == Step::kLoadCg)
      return __ldcg(chain + i);
    else if constexpr (STEP == Step::kLoadCa)
      return __ldca(chain + i);
    else
      return i ^ key;
  };
  unsigned j = start;
  for (int k = 0; k < warm; ++k) {
    j = next(j);
    *vidx = j;
  }
  const unsigned long long c0 = clk();
  const unsigned long long g0 = gtimer_ns();
  unsigned long long prev = clk();
  for (int k = 0; k < steps; ++k) {
#pragma unroll
    for (int u = 0; u < LOADS; ++u) j = next(j);
    *vidx = j;
    const unsigned long long now = clk();
    sdelta[k] = (unsigned)(now - prev);
    prev = now;
  }
  const unsigned long long c1 = clk();
  const unsigned long long g1 = gtimer_ns();
  for (int k = 0; k < steps; ++k) deltas[k] = sdelta[k];
  end_out[0] = j;
  clocks[0] = c0;
  clocks[1] = g0;
  clocks[2] = c1;
  clocks[3] = g1;
}

// Memory departure: every warp of the block issues `iters` × 16 independent loads (L1 bypassed)
// and the block's cycles are timed on its own SM. LANE_STRIDE = 1: a warp request covers 128
// contiguous bytes (one line, 4 sectors: coalesced). LANE_STRIDE = 32: each lane reads its own
// 128-byte line (32 lines, 32 sectors per request: fully uncoalesced). Consecutive requests of
// a warp use disjoint spans; addresses wrap inside `mask + 1` elements (a power of two).
template <int LANE_STRIDE>
__global__ void depart(const unsigned *__restrict__ buf, unsigned mask, unsigned start,
                       int iters, unsigned long long *cycles_out, unsigned *sink) {
  constexpr int U = 16;
  constexpr unsigned SPAN = 32u * LANE_STRIDE;  // elements covered by one warp request
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  const unsigned *p0 = buf + lane * LANE_STRIDE;
  unsigned acc = 0;
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int it = 0; it < iters; ++it) {
    const unsigned group = (unsigned)it * nw + warp + blockIdx.x * 4099u;
    const unsigned *p = p0 + ((start + group * (U * SPAN)) & mask);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= __ldcg(p + u * SPAN);
  }
  __syncthreads();
  const unsigned long long t1 = clk();
  if (threadIdx.x == 0) cycles_out[blockIdx.x] = t1 - t0;
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; never true for our data
}

// Streaming read of 16-byte vectors, four independent loads in flight per thread.
__global__ void stream_read(const uint4 *__restrict__ a, size_t n, unsigned *sink) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = a[i], v1 = a[i + stride], v2 = a[i + 2 * stride], v3 = a[i + 3 * stride];
    acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    acc ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n; i += stride) {
    const uint4 v = a[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

__global__ void stream_copy(const uint4 *__restrict__ a, uint4 *__restrict__ b, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = a[i], v1 = a[i + stride], v2 = a[i + 2 * stride], v3 = a[i + 3 * stride];
    b[i] = v0;
    b[i + stride] = v1;
    b[i + 2 * stride] = v2;
    b[i + 3 * stride] = v3;
  }
  for (; i < n; i += stride) b[i] = a[i];
}

// One 4-byte element per thread, read and written once: every warp lives for about one
// memory round trip, so a wave of blocks lasts little longer than its slowest warp.
__global__ void copy_once(const float *__restrict__ a, float *__restrict__ b, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i];
}

// Issue rate. Each kernel runs `iters` iterations of a fully unrolled body of STEPS steps;
// two instances that differ only in STEPS are timed, and the difference removes the loop's
// own instructions and the ramp. Per step and thread:
//   FP32 : 8 FFMA on 8 independent accumulators                          (8 warp instructions)
//   INT32: 4 independent pairs a += b; b ^= a  (IADD3 + LOP3; the add/xor mix cannot be
//          folded across steps)                                           (8 warp instructions)
//   MIXED: 4 FFMA + 2 such pairs: as many FP32 as INT32 instructions     (8 warp instructions)
constexpr int kInstPerStep = 8;

template <int STEPS>
__global__ void issue_fp32(float b, float c, int iters, unsigned long long *cycles_out,
                           float *sink) {
  float x[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) x[k] = threadIdx.x * 0.001f + k;
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = fmaf(x[k], b, c);
    }
  }
  __syncthreads();
  const unsigned long long t1 = clk();
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) sum += x[k];
  if (threadIdx.x == 0) cycles_out[0] = t1 - t0;
  if (sum == 1234.5f) sink[0] = sum;
}

template <int STEPS>
__global__ void issue_int32(unsigned seed, int iters, unsigned long long *cycles_out,
                            unsigned *sink) {
  unsigned a[4], bb[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    a[k] = threadIdx.x + seed * (k + 1);
    bb[k] = seed ^ (k * 0x9e3779b9u);
  }
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        a[k] += bb[k];
        bb[k] ^= a[k];
      }
    }
  }
  __syncthreads();
  const unsigned long long t1 = clk();
  unsigned r = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) r ^= a[k] ^ bb[k];
  if (threadIdx.x == 0) cycles_out[0] = t1 - t0;
  if (r == 0x9e3779b9u) sink[0] = r;
}

template <int STEPS>
__global__ void issue_mixed(float b, float c, unsigned seed, int iters,
                            unsigned long long *cycles_out, unsigned *sink) {
  float x[4];
  unsigned a[2], bb[2];
#pragma unroll
  for (int k = 0; k < 4; ++k) x[k] = threadIdx.x * 0.001f + k;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    a[k] = threadIdx.x + seed * (k + 1);
    bb[k] = seed ^ (k * 0x9e3779b9u);
  }
  __syncthreads();
  const unsigned long long t0 = clk();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        x[2 * k] = fmaf(x[2 * k], b, c);
        a[k] += bb[k];
        x[2 * k + 1] = fmaf(x[2 * k + 1], b, c);
        bb[k] ^= a[k];
      }
    }
  }
  __syncthreads();
  const unsigned long long t1 = clk();
  unsigned r = a[0] ^ a[1] ^ bb[0] ^ bb[1];
  float sum = x[0] + x[1] + x[2] + x[3];
  if (threadIdx.x == 0) cycles_out[0] = t1 - t0;
  if (r == 0x9e3779b9u || sum == 1234.5f) sink[0] = r;
}

// ---------------------------------------------------------------------------------------
// Host-side statistics and helpers

struct Stat {
  double value = NAN;   // the figure
  double spread = NAN;  // max − min over repetitions
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = (size_t)pos;
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}
double range_of(const std::vector<double> &v) {
  if (v.empty()) return NAN;
  const auto mm = std::minmax_element(v.begin(), v.end());
  return *mm.second - *mm.first;
}
Stat median_stat(const std::vector<double> &reps) { return {median(reps), range_of(reps)}; }

// Deterministic generator (splitmix64) for the chain permutations.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  template <class T>
  void shuffle(T *v, size_t n) {
    for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[next() % i]);
  }
};

size_t pow2_floor(size_t x) {
  size_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
size_t pow2_ceil(size_t x) {
  size_t p = 1;
  while (p < x) p *= 2;
  return p;
}

std::string toml_string(const std::string &s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += (char)ch;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// The kernel module's version ("580.82.07"), from /proc; empty where it cannot be read.
std::string kernel_module_version() {
  FILE *f = std::fopen("/proc/driver/nvidia/version", "r");
  if (!f) return "";
  char line[512] = {0};
  std::string out;
  if (std::fgets(line, sizeof line, f)) {
    const char *k = std::strstr(line, "Kernel Module");
    if (k) {
      k += std::strlen("Kernel Module");
      while (*k == ' ' || *k == '\t') ++k;
      while ((*k >= '0' && *k <= '9') || *k == '.') out += *k++;
    }
  }
  std::fclose(f);
  return out;
}

std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// ---------------------------------------------------------------------------------------
// Device description

struct AttrSpec {
  const char *name;
  cudaDeviceAttr rt;
  CUdevice_attribute drv;
};

const AttrSpec kAttrs[] = {
    {"MultiProcessorCount", cudaDevAttrMultiProcessorCount,
     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
    {"ClockRate", cudaDevAttrClockRate, CU_DEVICE_ATTRIBUTE_CLOCK_RATE},
    {"MemoryClockRate", cudaDevAttrMemoryClockRate, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE},
    {"GlobalMemoryBusWidth", cudaDevAttrGlobalMemoryBusWidth,
     CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH},
    {"L2CacheSize", cudaDevAttrL2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
    {"MaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock,
     CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
    {"MaxThreadsPerMultiProcessor", cudaDevAttrMaxThreadsPerMultiProcessor,
     CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR},
    {"MaxBlocksPerMultiprocessor", cudaDevAttrMaxBlocksPerMultiprocessor,
     CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR},
    {"MaxRegistersPerMultiprocessor", cudaDevAttrMaxRegistersPerMultiprocessor,
     CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR},
    {"MaxRegistersPerBlock", cudaDevAttrMaxRegistersPerBlock,
     CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK},
    {"MaxSharedMemoryPerMultiprocessor", cudaDevAttrMaxSharedMemoryPerMultiprocessor,
     CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
    {"MaxSharedMemoryPerBlock", cudaDevAttrMaxSharedMemoryPerBlock,
     CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
    {"MaxSharedMemoryPerBlockOptin", cudaDevAttrMaxSharedMemoryPerBlockOptin,
     CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
    {"ReservedSharedMemoryPerBlock", cudaDevAttrReservedSharedMemoryPerBlock,
     CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK},
    {"WarpSize", cudaDevAttrWarpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
    {"ComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor,
     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
    {"ComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor,
     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
    {"MaxBlockDimX", cudaDevAttrMaxBlockDimX, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X},
    {"MaxBlockDimY", cudaDevAttrMaxBlockDimY, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y},
    {"MaxBlockDimZ", cudaDevAttrMaxBlockDimZ, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z},
    {"MaxGridDimX", cudaDevAttrMaxGridDimX, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X},
    {"MaxGridDimY", cudaDevAttrMaxGridDimY, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y},
    {"MaxGridDimZ", cudaDevAttrMaxGridDimZ, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z},
};

struct Attr {
  std::string name;
  long long value;
};

struct DeviceDesc {
  std::string name, uuid, cc, pci_bus_id, driver_version, cuda_driver_version, runtime_version,
      date;
  size_t total_memory = 0;
  std::vector<Attr> attrs;
  std::vector<std::pair<std::string, std::string>> notes;  // attribute -> how it was obtained
  long long attr(const char *n, long long fallback) const {
    for (const auto &a : attrs)
      if (a.name == n) return a.value;
    return fallback;
  }
};

using CuDeviceGetFn = CUresult (*)(CUdevice *, int);
using CuDeviceGetAttributeFn = CUresult (*)(int *, CUdevice_attribute, CUdevice);

// cudaDeviceGetAttribute first; when the runtime does not know an attribute (CUDA releases
// retire some), ask the driver's cuDeviceGetAttribute through the runtime's entry-point
// lookup, so the program needs no link against libcuda.
DeviceDesc describe(int dev) {
  DeviceDesc d;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  d.name = prop.name;
  char uuid[64];
  const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  d.uuid = uuid;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess) d.pci_bus_id = bus;
  int v = 0;
  CK(cudaDriverGetVersion(&v));
  d.cuda_driver_version = cuda_version_string(v);
  CK(cudaRuntimeGetVersion(&v));
  d.runtime_version = cuda_version_string(v);
  d.driver_version = kernel_module_version();
  d.total_memory = prop.totalGlobalMem;

  CuDeviceGetFn cu_device_get = nullptr;
  CuDeviceGetAttributeFn cu_get_attr = nullptr;
  bool looked_up = false;
  for (const AttrSpec &s : kAttrs) {
    int value = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&value, s.rt, dev);
    if (e == cudaSuccess) {
      d.attrs.push_back({s.name, value});
      continue;
    }
    (void)cudaGetLastError();
    if (!looked_up) {
      looked_up = true;
      cudaDriverEntryPointQueryResult q1, q2;
      void *f1 = nullptr, *f2 = nullptr;
      if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &f1, 12000, cudaEnableDefault, &q1) ==
              cudaSuccess &&
          cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &f2, 12000, cudaEnableDefault,
                                           &q2) == cudaSuccess &&
          q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess) {
        cu_device_get = (CuDeviceGetFn)f1;
        cu_get_attr = (CuDeviceGetAttributeFn)f2;
      }
    }
    CUdevice cu_dev;
    int dv = 0;
    if (cu_get_attr && cu_device_get(&cu_dev, dev) == CUDA_SUCCESS &&
        cu_get_attr(&dv, s.drv, cu_dev) == CUDA_SUCCESS) {
      d.attrs.push_back({s.name, dv});
      d.notes.push_back({s.name, std::string("cudaDeviceGetAttribute: ") +
                                     cudaGetErrorString(e) +
                                     "; value from the driver's cuDeviceGetAttribute"});
    } else {
      d.notes.push_back({s.name, std::string("unavailable: cudaDeviceGetAttribute: ") +
                                     cudaGetErrorString(e) +
                                     "; the driver's cuDeviceGetAttribute did not answer"});
    }
  }
  d.cc = std::to_string(d.attr("ComputeCapabilityMajor", prop.major)) + "." +
         std::to_string(d.attr("ComputeCapabilityMinor", prop.minor));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm_utc;
  gmtime_r(&now, &tm_utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
  d.date = date;
  return d;
}

void print_device(const DeviceDesc &d) {
  std::printf("# klaraptor device calibration report (profiler/calibrate/calibrate.cu)\n");
  std::printf("format_version = %d\n\n[device]\n", kFormatVersion);
  std::printf("name = %s\n", toml_string(d.name).c_str());
  std::printf("uuid = %s\n", toml_string(d.uuid).c_str());
  std::printf("cc = %s\n", toml_string(d.cc).c_str());
  std::printf("pci_bus_id = %s\n", toml_string(d.pci_bus_id).c_str());
  std::printf("driver_version = %s\n", toml_string(d.driver_version).c_str());
  std::printf("cuda_driver_version = %s\n", toml_string(d.cuda_driver_version).c_str());
  std::printf("runtime_version = %s\n", toml_string(d.runtime_version).c_str());
  std::printf("total_memory_bytes = %zu\n", d.total_memory);
  std::printf("date = %s\n\n[attributes]\n", toml_string(d.date).c_str());
  for (const auto &a : d.attrs) std::printf("%s = %lld\n", a.name.c_str(), a.value);
  if (!d.notes.empty()) {
    std::printf("\n[attribute_notes]\n");
    for (const auto &n : d.notes)
      std::printf("%s = %s\n", n.first.c_str(), toml_string(n.second).c_str());
  }
}

// ---------------------------------------------------------------------------------------
// The measurements

struct Figure {
  const char *key;
  Stat stat;
  std::string method;
};

struct Extra {
  const char *key;
  double value;
  std::string method;
};

struct Bench {
  const DeviceDesc &d;
  int sms;
  size_t l2;
  unsigned *sink = nullptr;
  unsigned long long *dcycles = nullptr;  // per-block cycles (departure, issue)
  unsigned *deltas = nullptr;
  unsigned *end_idx = nullptr;
  unsigned long long *clocks = nullptr;

  explicit Bench(const DeviceDesc &dd)
      : d(dd), sms((int)dd.attr("MultiProcessorCount", 1)),
        l2((size_t)std::max(dd.attr("L2CacheSize", 0), 1ll << 20)) {
    CK(cudaMalloc(&sink, 64));
    CK(cudaMalloc(&dcycles, sizeof(unsigned long long) * std::max(sms, 1)));
    CK(cudaMalloc(&deltas, sizeof(unsigned) * kWalkSteps));
    CK(cudaMalloc(&end_idx, sizeof(unsigned)));
    CK(cudaMalloc(&clocks, 4 * sizeof(unsigned long long)));
  }

  // Keeps every SM busy for about `ms` milliseconds (clock ramp-up before measuring).
  void warm_up(double ms) {
    const double khz = (double)d.attr("ClockRate", 1500000);
    spin<<<sms * 2, 256>>>((long long)(ms * khz), sink);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
  }

  // Links a chain through `lines` lines of `chain` in the order `order`.
  void link(unsigned *chain, const std::vector<unsigned> &order) {
    unsigned *dorder = nullptr;
    CK(cudaMalloc(&dorder, order.size() * sizeof(unsigned)));
    CK(cudaMemcpy(dorder, order.data(), order.size() * sizeof(unsigned),
                  cudaMemcpyHostToDevice));
    link_chain<<<sms * 4, 256>>>(chain, dorder, (unsigned)order.size());
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    CK(cudaFree(dorder));
  }

  struct Walk {
    std::vector<double> samples;       // per-step cycles, all walks together
    std::vector<double> walk_medians;  // one per walk
    double total_cycles = 0, total_ns = 0, steps = 0;
  };

  // `walks` launches of `kWalkSteps` timed steps of LOADS loads each (after `warm` untimed
  // nodes in the same launch), each continuing where the last one ended.
  template <Step STEP, int LOADS = 1>
  Walk walk(const unsigned *chain, unsigned start, int walks, unsigned key = 0, int warm = 0) {
    Walk w;
    std::vector<unsigned> h(kWalkSteps);
    unsigned long long hc[4];
    unsigned j = start;
    for (int r = 0; r < walks; ++r) {
      chase<STEP, LOADS><<<1, 1>>>(chain, j, warm, kWalkSteps, key, deltas, end_idx, clocks);
      CK_LAUNCH();
      CK(cudaMemcpy(h.data(), deltas, kWalkSteps * sizeof(unsigned), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&j, end_idx, sizeof j, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hc, clocks, sizeof hc, cudaMemcpyDeviceToHost));
      std::vector<double> s(h.begin(), h.end());
      w.walk_medians.push_back(median(s));
      w.samples.insert(w.samples.end(), s.begin(), s.end());
      w.total_cycles += (double)(hc[2] - hc[0]);
      w.total_ns += (double)(hc[3] - hc[1]);
      w.steps += (double)kWalkSteps * LOADS;
    }
    return w;
  }

  // Seconds of a launch sequence, by events.
  template <class F>
  double time_ms(F launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    launch();
    CK_LAUNCH();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms;
  }
};

std::vector<unsigned> identity(size_t n) {
  std::vector<unsigned> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (unsigned)i;
  return v;
}

// A random cycle through the lines of consecutive windows of `window` lines: windows in
// random order, lines in random order inside each window. A walk shorter than a window stays
// inside one window (the TLB covers it) and visits each line once.
std::vector<unsigned> windowed_order(size_t lines, size_t window, Rng &rng) {
  const size_t nwin = lines / window;
  std::vector<unsigned> wins = identity(nwin);
  rng.shuffle(wins.data(), wins.size());
  std::vector<unsigned> order;
  order.reserve(lines);
  for (unsigned w : wins) {
    std::vector<unsigned> in = identity(window);
    rng.shuffle(in.data(), in.size());
    for (unsigned i : in) order.push_back((unsigned)(w * window + i));
  }
  return order;
}

}  // namespace

int main(int argc, char **argv) {
  int dev = 0;
  bool identify = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--identify")) {
      identify = true;
    } else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      dev = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: calibrate [--device N] [--identify]\n");
      return 4;
    }
  }
  const auto wall0 = std::chrono::steady_clock::now();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "calibrate: no CUDA device: %s\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    return 3;
  }
  if (dev < 0 || dev >= count) {
    std::fprintf(stderr, "calibrate: no CUDA device %d (the driver reports %d)\n", dev, count);
    return 3;
  }
  CK(cudaSetDevice(dev));
  const DeviceDesc d = describe(dev);
  if (identify) {
    print_device(d);
    return 0;
  }
  std::fprintf(stderr, "calibrate: %s (%s), cc %s\n", d.name.c_str(), d.uuid.c_str(),
               d.cc.c_str());

  Bench b(d);
  std::vector<Figure> figs;
  std::vector<Extra> extras;
  Rng rng{0x6b6c617261707472ull};
  b.warm_up(100.0);

  // ---- issue rate ---------------------------------------------------------------------
  std::fprintf(stderr, "calibrate: issue rate\n");
  {
    const int threads = (int)std::min<long long>(1024, d.attr("MaxThreadsPerBlock", 1024));
    const int warps = threads / 32;
    const int iters = 256;
    constexpr int S1 = 16, S2 = 32;
    // One repetition: per-SM cycles per warp instruction from the difference of two bodies.
    auto per_sm = [&](auto run1, auto run2) {
      unsigned long long c1 = 0, c2 = 0;
      run1();
      CK_LAUNCH();
      CK(cudaMemcpy(&c1, b.dcycles, sizeof c1, cudaMemcpyDeviceToHost));
      run2();
      CK_LAUNCH();
      CK(cudaMemcpy(&c2, b.dcycles, sizeof c2, cudaMemcpyDeviceToHost));
      const double insts = (double)(S2 - S1) * kInstPerStep * iters * warps;
      return ((double)c2 - (double)c1) / insts;
    };
    auto measure = [&](auto run1, auto run2) {
      std::vector<double> reps;
      per_sm(run1, run2);  // warm-up repetition
      for (int r = 0; r < 7; ++r) reps.push_back(per_sm(run1, run2) * kSubPartitions);
      return median_stat(reps);
    };
    float *fsink = (float *)b.sink;
    const Stat fp = measure(
        [&] { issue_fp32<S1><<<1, threads>>>(0.999f, 0.001f, iters, b.dcycles, fsink); },
        [&] { issue_fp32<S2><<<1, threads>>>(0.999f, 0.001f, iters, b.dcycles, fsink); });
    const Stat in = measure(
        [&] { issue_int32<S1><<<1, threads>>>(12345u, iters, b.dcycles, b.sink); },
        [&] { issue_int32<S2><<<1, threads>>>(12345u, iters, b.dcycles, b.sink); });
    const Stat mx = measure(
        [&] {
          issue_mixed<S1><<<1, threads>>>(0.999f, 0.001f, 12345u, iters, b.dcycles, b.sink);
        },
        [&] {
          issue_mixed<S2><<<1, threads>>>(0.999f, 0.001f, 12345u, iters, b.dcycles, b.sink);
        });
    const Stat best = mx.value <= fp.value ? mx : fp;
    figs.push_back({"issue_cycles", best,
                    "cycles between two warp instructions issued by one SM sub-partition (warp "
                    "scheduler): one block of 32 warps on one SM runs dependence-free FFMA and "
                    "FFMA+IADD3/LOP3 streams; the difference of a 128- and a 256-instruction "
                    "unrolled body, per-SM cycles per warp instruction x 4 sub-partitions; the "
                    "faster stream; median of 7"});
    extras.push_back({"issue_cycles_per_sm", best.value / kSubPartitions,
                      "issue_cycles / 4: cycles per warp instruction for the whole SM"});
    extras.push_back({"issue_cycles_fp32", fp.value,
                      "per sub-partition, FFMA-only stream (FP32 pipe throughput)"});
    extras.push_back({"issue_cycles_int32", in.value,
                      "per sub-partition, IADD3+LOP3 stream (INT32 pipe throughput)"});
    extras.push_back({"issue_cycles_mixed", mx.value,
                      "per sub-partition, half FFMA half IADD3/LOP3 (scheduler issue limit)"});
    extras.push_back({"sub_partitions_per_sm", (double)kSubPartitions,
                      "warp schedulers per SM (4 on sm_70 and later)"});
  }

  // ---- latencies ------------------------------------------------------------------------
  std::fprintf(stderr, "calibrate: latencies\n");
  double sm_mhz = NAN;
  {
    // Loop overhead: the same walk with the load replaced by one XOR.
    unsigned *tiny = nullptr;
    CK(cudaMalloc(&tiny, kLineBytes));
    CK(cudaMemset(tiny, 0, kLineBytes));
    b.walk<Step::kAlu>(tiny, 0, 1);
    const Bench::Walk nul = b.walk<Step::kAlu>(tiny, 0, 3, 0u);
    const double overhead = median(nul.samples);
    CK(cudaFree(tiny));
    extras.push_back({"timer_overhead_cycles", overhead,
                      "median per-step cycles of the walk loop with the load replaced by one "
                      "XOR; subtracted from the L2 and DRAM latencies"});

    // L1: a chain over kL1ChainLines lines, walked through once untimed at the start of every
    // launch (on the SM that is then timed), then timed with loads that allocate in L1. The
    // loop overhead above cannot be subtracted here: most of it is the latency of the clock
    // reads, which a load walk overlaps with its next load, and it exceeds an L1 hit, so a walk
    // of one load per clock reading shows the timing loop, not the load. Instead two walks
    // read the clock every kL1LoadsShort and every kL1LoadsLong loads; the timing code is
    // then off the critical path and the same in both, and the difference of their median
    // steps over the extra loads is the cycles from one dependent load to the next (its
    // address arithmetic included). The kernels ask for the largest L1 share beside their
    // shared memory. The permutation has its own generator, so the L2 and DRAM chains keep the
    // orders they had without this walk.
    {
      CK(cudaFuncSetAttribute(chase<Step::kLoadCa, kL1LoadsShort>,
                              cudaFuncAttributePreferredSharedMemoryCarveout,
                              (int)cudaSharedmemCarveoutMaxL1));
      CK(cudaFuncSetAttribute(chase<Step::kLoadCa, kL1LoadsLong>,
                              cudaFuncAttributePreferredSharedMemoryCarveout,
                              (int)cudaSharedmemCarveoutMaxL1));
      const size_t l1_bytes = (size_t)kL1ChainLines * kLineBytes;
      unsigned *l1chain = nullptr;
      CK(cudaMalloc(&l1chain, l1_bytes));
      Rng l1_rng{0x6c31636861696e00ull};
      std::vector<unsigned> l1_order = identity(kL1ChainLines);
      l1_rng.shuffle(l1_order.data(), l1_order.size());
      b.link(l1chain, l1_order);
      const unsigned l1_start = l1_order[0] * kLineElems;
      const int l1_warm = (int)kL1ChainLines;
      b.walk<Step::kLoadCa, kL1LoadsShort>(l1chain, l1_start, 1, 0u, l1_warm);  // discarded
      const Bench::Walk sw =
          b.walk<Step::kLoadCa, kL1LoadsShort>(l1chain, l1_start, kWalks, 0u, l1_warm);
      b.walk<Step::kLoadCa, kL1LoadsLong>(l1chain, l1_start, 1, 0u, l1_warm);  // discarded
      const Bench::Walk lw =
          b.walk<Step::kLoadCa, kL1LoadsLong>(l1chain, l1_start, kWalks, 0u, l1_warm);
      CK(cudaFree(l1chain));
      constexpr double extra_loads = kL1LoadsLong - kL1LoadsShort;
      const double base = median(sw.samples);
      std::vector<double> per_walk;  // walk r of the long walks against walk r of the short
      for (int r = 0; r < kWalks; ++r)
        per_walk.push_back((lw.walk_medians[r] - sw.walk_medians[r]) / extra_loads);
      figs.push_back({"l1_latency_cycles",
                      {(median(lw.samples) - base) / extra_loads, range_of(per_walk)},
                      "one thread walks a random cycle of " + std::to_string(kL1ChainLines) +
                          " 128-byte lines (" + std::to_string(l1_bytes >> 10) +
                          " KiB), ld.global.ca, kernel preferring the largest L1 share; each "
                          "launch first walks the whole cycle untimed (loading the L1 of the SM "
                          "it runs on); clock read every " +
                          std::to_string(kL1LoadsShort) + " and, in a second walk, every " +
                          std::to_string(kL1LoadsLong) +
                          " dependent loads: (median step of the second - median step of the "
                          "first) / " +
                          std::to_string(kL1LoadsLong - kL1LoadsShort) + ", over " +
                          std::to_string(kWalks) + " launches of " +
                          std::to_string(kWalkSteps) +
                          " steps each; the timing loop cancels out; the address arithmetic "
                          "between two loads is included; spread: range of the per-launch "
                          "figures"});
      extras.push_back({"l1_latency_p10_cycles",
                        (quantile(lw.samples, 0.1) - base) / extra_loads,
                        "p10 of the long walk's steps, less the short walk's median, / " +
                            std::to_string(kL1LoadsLong - kL1LoadsShort)});
      extras.push_back({"l1_latency_p90_cycles",
                        (quantile(lw.samples, 0.9) - base) / extra_loads, "the same at p90"});
    }

    // L2: a chain over a quarter..eighth of the L2, walked once to load it, then timed.
    const size_t l2_bytes = std::max<size_t>(pow2_floor(b.l2 / 8), 1u << 20);
    const size_t l2_lines = l2_bytes / kLineBytes;
    unsigned *l2chain = nullptr;
    CK(cudaMalloc(&l2chain, l2_bytes));
    std::vector<unsigned> order = identity(l2_lines);
    rng.shuffle(order.data(), order.size());
    b.link(l2chain, order);
    const int warm_walks = (int)((l2_lines + kWalkSteps - 1) / kWalkSteps);
    b.walk<Step::kLoadCg>(l2chain, order[0] * kLineElems, warm_walks);
    const Bench::Walk l2w = b.walk<Step::kLoadCg>(l2chain, order[0] * kLineElems, kWalks);
    CK(cudaFree(l2chain));
    figs.push_back({"l2_latency_cycles",
                    {median(l2w.samples) - overhead, range_of(l2w.walk_medians)},
                    "one thread walks a random cycle of 128-byte lines over " +
                        std::to_string(l2_bytes >> 20) +
                        " MiB (L2-resident after one untimed pass), ld.global.cg; median "
                        "per-load cycles of " +
                        std::to_string(kWalks * kWalkSteps) + " loads minus the loop overhead"});
    extras.push_back({"l2_latency_p10_cycles", quantile(l2w.samples, 0.1) - overhead, ""});
    extras.push_back({"l2_latency_p90_cycles", quantile(l2w.samples, 0.9) - overhead, ""});

    // DRAM: a chain through every line of 4 x L2 (and at least 64 MiB). The walk order visits
    // 8-MiB windows one after the other, each in random line order, so each timed load is the
    // first touch of its line since the L2 was scrubbed and the TLB covers the window.
    const size_t big = std::max<size_t>(pow2_ceil(4 * b.l2), 64u << 20);
    const size_t lines = big / kLineBytes;
    const size_t window = std::min<size_t>((8u << 20) / kLineBytes, lines);
    unsigned *chain = nullptr;
    CK(cudaMalloc(&chain, big));
    order = windowed_order(lines, window, rng);
    b.link(chain, order);
    const size_t scrub_n = (3 * b.l2) / sizeof(unsigned);
    unsigned *scrub_buf = nullptr;
    CK(cudaMalloc(&scrub_buf, scrub_n * sizeof(unsigned)));
    scrub<<<b.sms * 4, 256>>>(scrub_buf, scrub_n, 1u);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    const Bench::Walk mw = b.walk<Step::kLoadCg>(chain, order[0] * kLineElems, kWalks);
    figs.push_back({"mem_latency_cycles",
                    {median(mw.samples) - overhead, range_of(mw.walk_medians)},
                    "one thread walks a random cycle of 128-byte lines through " +
                        std::to_string(big >> 20) +
                        " MiB (> L2), 8-MiB windows in random order, lines in random order "
                        "within a window, after scrubbing the L2; ld.global.cg; median per-load "
                        "cycles of " +
                        std::to_string(kWalks * kWalkSteps) +
                        " first-touch loads minus the loop overhead"});
    extras.push_back({"mem_latency_p10_cycles", quantile(mw.samples, 0.1) - overhead, ""});
    extras.push_back({"mem_latency_p90_cycles", quantile(mw.samples, 0.9) - overhead, ""});
    extras.push_back({"mem_latency_chain_mean_cycles", mw.total_cycles / mw.steps - overhead,
                      "the same walks: total cycles / loads, minus the loop overhead"});
    sm_mhz = mw.total_cycles / mw.total_ns * 1000.0;
    extras.push_back({"sm_clock_mhz", sm_mhz,
                      "SM clock during the DRAM walks: clock64 cycles / globaltimer ns"});
    extras.push_back({"mem_latency_ns", (median(mw.samples) - overhead) / sm_mhz * 1000.0,
                      "mem_latency_cycles at sm_clock_mhz"});

    // The same, with the lines of the whole buffer in one random order (TLB misses too).
    order = identity(lines);
    rng.shuffle(order.data(), order.size());
    b.link(chain, order);
    scrub<<<b.sms * 4, 256>>>(scrub_buf, scrub_n, 2u);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    const Bench::Walk rw = b.walk<Step::kLoadCg>(chain, order[0] * kLineElems, 2);
    extras.push_back({"mem_latency_random_cycles", median(rw.samples) - overhead,
                      "as mem_latency_cycles but one random order over the whole buffer "
                      "(address translation misses included)"});
    CK(cudaFree(scrub_buf));
    CK(cudaFree(chain));
  }

  // ---- departure delay ------------------------------------------------------------------
  std::fprintf(stderr, "calibrate: departure delay\n");
  {
    const size_t l2_bytes = std::max<size_t>(pow2_floor(b.l2 / 4), 1u << 20);
    const unsigned l2_mask = (unsigned)(l2_bytes / sizeof(unsigned) - 1);
    unsigned *buf = nullptr;
    CK(cudaMalloc(&buf, l2_bytes));
    CK(cudaMemset(buf, 0, l2_bytes));
    const int max_threads = (int)std::min<long long>(1024, d.attr("MaxThreadsPerBlock", 1024));

    // Cycles per warp request of one block (median over the blocks of the grid).
    auto gap = [&](auto kernel, const unsigned *data, unsigned mask, unsigned start, int grid,
                   int threads, int iters) {
      kernel<<<grid, threads>>>(data, mask, start, iters, b.dcycles, b.sink);
      CK_LAUNCH();
      std::vector<unsigned long long> c(grid);
      CK(cudaMemcpy(c.data(), b.dcycles, grid * sizeof(unsigned long long),
                    cudaMemcpyDeviceToHost));
      const double requests = (double)iters * 16 * (threads / 32);
      std::vector<double> g;
      for (auto x : c) g.push_back((double)x / requests);
      return median(g);
    };
    // The smaller of 16 and 32 warps (more warps only help until the SM is saturated).
    auto best_of_warps = [&](auto kernel, const unsigned *data, unsigned mask, int grid,
                             int iters) {
      Stat best{INFINITY, NAN};
      for (int threads : {max_threads / 2, max_threads}) {
        std::vector<double> reps;
        gap(kernel, data, mask, 0, grid, threads, iters);  // warm-up: loads the L2
        for (int r = 0; r < 7; ++r) reps.push_back(gap(kernel, data, mask, 0, grid, threads, iters));
        const Stat s = median_stat(reps);
        if (s.value < best.value) best = s;
      }
      return best;
    };
    const Stat coal = best_of_warps(depart<1>, buf, l2_mask, 1, 256);
    figs.push_back({"departure_delay_coalesced_cycles", coal,
                    "one block of 16 or 32 warps on one SM, each warp 16 independent "
                    "ld.global.cg of 128 contiguous bytes (4 sectors) at a time from an "
                    "L2-resident buffer; block cycles / warp requests at saturation (the "
                    "fewer-cycle warp count); median of 7"});
    const Stat unc = best_of_warps(depart<32>, buf, l2_mask, 1, 64);
    constexpr double kUncoalTransactions = 32.0;
    figs.push_back({"departure_delay_uncoalesced_cycles",
                    {unc.value / kUncoalTransactions, unc.spread / kUncoalTransactions},
                    "as the coalesced figure, but each lane reads its own 128-byte line (32 "
                    "sectors in 32 lines per warp request); block cycles / warp requests / 32 "
                    "transactions: the gap per transaction of an uncoalesced request"});
    extras.push_back({"departure_delay_uncoalesced_per_request_cycles", unc.value,
                      "cycles per fully uncoalesced warp request (32 transactions)"});
    extras.push_back({"uncoalesced_transactions_per_request", kUncoalTransactions,
                      "32-byte sectors per fully uncoalesced warp request"});

    // Every SM at once (L2 shared by all): the loaded figure.
    const Stat all = best_of_warps(depart<1>, buf, l2_mask, b.sms, 256);
    extras.push_back({"departure_delay_coalesced_all_sms_cycles", all.value,
                      "coalesced figure with one block on every SM at once (L2-resident data)"});
    CK(cudaFree(buf));

    // One SM streaming from DRAM: fresh lines each repetition, after scrubbing the L2.
    const size_t big = std::max<size_t>(pow2_ceil(4 * b.l2), 64u << 20);
    CK(cudaMalloc(&buf, big));
    CK(cudaMemset(buf, 0, big));
    const size_t scrub_n = (3 * b.l2) / sizeof(unsigned);
    unsigned *scrub_buf = nullptr;
    CK(cudaMalloc(&scrub_buf, scrub_n * sizeof(unsigned)));
    scrub<<<b.sms * 4, 256>>>(scrub_buf, scrub_n, 3u);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    const int iters = 64;
    const unsigned per_rep = (unsigned)iters * 16 * (max_threads / 32) * 32;  // elements
    std::vector<double> reps;
    for (int r = 0; r < 8; ++r) {
      const double g = gap(depart<1>, buf, (unsigned)(big / sizeof(unsigned) - 1),
                           (unsigned)r * per_rep, 1, max_threads, iters);
      if (r > 0) reps.push_back(g);
    }
    extras.push_back({"departure_delay_coalesced_dram_cycles", median(reps),
                      "coalesced figure with 32 warps on one SM reading lines not in L2"});
    CK(cudaFree(scrub_buf));
    CK(cudaFree(buf));
  }

  // ---- DRAM bandwidth -------------------------------------------------------------------
  std::fprintf(stderr, "calibrate: DRAM bandwidth\n");
  {
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    size_t bytes = std::max<size_t>(16 * b.l2, 512u << 20);
    bytes = std::min(bytes, free_b / 4);
    bytes &= ~(size_t)0xffff;
    const size_t n = bytes / sizeof(uint4);
    uint4 *a = nullptr, *c = nullptr;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes));
    CK(cudaMemset(c, 0, bytes));
    const int threads = 256;
    const int blocks =
        b.sms * (int)std::max<long long>(1, d.attr("MaxThreadsPerMultiProcessor", 2048) / threads);
    auto gbs = [&](auto launch, double moved) {
      std::vector<double> reps;
      b.time_ms(launch);  // warm-up
      for (int r = 0; r < 15; ++r) reps.push_back(moved / (b.time_ms(launch) * 1e-3) / 1e9);
      return Stat{*std::max_element(reps.begin(), reps.end()), range_of(reps)};
    };
    const Stat rd = gbs([&] { stream_read<<<blocks, threads>>>(a, n, b.sink); }, (double)bytes);
    const Stat cp = gbs([&] { stream_copy<<<blocks, threads>>>(a, c, n); }, 2.0 * bytes);
    figs.push_back({"dram_bandwidth_gbs", rd,
                    "streaming read of " + std::to_string(bytes >> 20) +
                        " MiB (>= 16 x L2) with 16-byte loads, 4 in flight per thread, every SM "
                        "full; bytes / event time, 1e9 bytes per GB; best of 15"});
    extras.push_back({"dram_copy_bandwidth_gbs", cp.value,
                      "device-to-device copy kernel, read + written bytes; best of 15"});
    const double peak = 2.0 * (double)d.attr("MemoryClockRate", 0) * 1e3 *
                        (double)d.attr("GlobalMemoryBusWidth", 0) / 8.0 / 1e9;
    extras.push_back({"dram_peak_gbs", peak,
                      "2 x MemoryClockRate x GlobalMemoryBusWidth / 8 (the driver's figures)"});
    CK(cudaFree(a));
    CK(cudaFree(c));
  }

  // ---- block dispatch ----------------------------------------------------------------
  std::fprintf(stderr, "calibrate: block dispatch\n");
  {
    const double mhz = std::isfinite(sm_mhz) ? sm_mhz : d.attr("ClockRate", 0) / 1000.0;
    unsigned *flag = nullptr;
    CK(cudaMalloc(&flag, sizeof(unsigned)));
    CK(cudaMemset(flag, 0, sizeof(unsigned)));
    const long long per_sm = 4000;
    const int blocks = (int)(per_sm * b.sms);
    // Cycles between two blocks one SM starts, for blocks of `threads` threads.
    auto per_block = [&](int threads) {
      std::vector<double> reps;
      b.time_ms([&] { empty_block<<<blocks, threads>>>(flag, b.sink); });  // warm-up
      for (int r = 0; r < 15; ++r)
        reps.push_back(
            b.time_ms([&] { empty_block<<<blocks, threads>>>(flag, b.sink); }) * 1e3 * mhz /
            (double)per_sm);
      std::sort(reps.begin(), reps.end());
      return reps[reps.size() / 2];
    };
    const double c32 = per_block(32);
    extras.push_back({"block_dispatch_cycles", c32,
                      "empty kernel, " + std::to_string(per_sm) +
                          " one-warp blocks per SM: event time x SM clock / blocks per SM; "
                          "median of 15"});
    extras.push_back({"block_dispatch_cycles_256", per_block(256),
                      "the same with 256-thread blocks (for reference)"});
    CK(cudaFree(flag));
  }

  // ---- block drain ---------------------------------------------------------------------
  // The same one-element copy launched with blocks of 256 and of 1024 threads: both keep
  // every SM full (2048 threads), over the same number of waves, with the same accesses; the
  // larger blocks take longer, by a time that grows with the warps per block. Per wave and
  // per warp of a block beyond the first: (t1024 - t256) x SM clock / (waves x (32 - 8)).
  std::fprintf(stderr, "calibrate: block drain\n");
  {
    const double mhz = std::isfinite(sm_mhz) ? sm_mhz : d.attr("ClockRate", 0) / 1000.0;
    const size_t n = (size_t)64 << 20;
    float *a = nullptr, *c = nullptr;
    CK(cudaMalloc(&a, n * sizeof(float)));
    CK(cudaMalloc(&c, n * sizeof(float)));
    CK(cudaMemset(a, 0, n * sizeof(float)));
    CK(cudaMemset(c, 0, n * sizeof(float)));
    auto median_ms = [&](int threads) {
      const unsigned blocks = (unsigned)((n + threads - 1) / threads);
      std::vector<double> reps;
      b.time_ms([&] { copy_once<<<blocks, threads>>>(a, c, n); });  // warm-up
      for (int r = 0; r < 15; ++r)
        reps.push_back(b.time_ms([&] { copy_once<<<blocks, threads>>>(a, c, n); }));
      std::sort(reps.begin(), reps.end());
      return reps[reps.size() / 2];
    };
    const double t256 = median_ms(256), t512 = median_ms(512), t1024 = median_ms(1024);
    const double per_sm = (double)d.attr("MaxThreadsPerMultiProcessor", 2048);
    const double waves = (double)n / (per_sm * (double)b.sms);
    extras.push_back({"warp_drain_cycles", (t1024 - t256) * 1e3 * mhz / (waves * 24.0),
                      "copy of " + std::to_string(n >> 20) +
                          " Mi floats, one per thread, blocks of 1024 and of 256 threads: "
                          "(t1024 - t256) x SM clock / (waves x 24 warps); medians of 15"});
    extras.push_back({"warp_drain_cycles_512", (t512 - t256) * 1e3 * mhz / (waves * 8.0),
                      "the same from blocks of 512 threads (for reference)"});
    extras.push_back({"drain_copy_us_256", t256 * 1e3, "the copy's median time, 256-thread blocks"});
    extras.push_back({"drain_copy_us_1024", t1024 * 1e3, "the same, 1024-thread blocks"});
    CK(cudaFree(a));
    CK(cudaFree(c));
  }

  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  extras.push_back({"elapsed_s", elapsed, "wall time of this calibration run"});

  print_device(d);
  std::printf("\n[calibration]\n");
  for (const auto &f : figs) {
    std::printf("%s = %s\n", f.key, toml_float(f.stat.value).c_str());
    std::printf("%s_spread = %s\n", f.key, toml_float(f.stat.spread).c_str());
  }
  for (const auto &x : extras) std::printf("%s = %s\n", x.key, toml_float(x.value).c_str());
  std::printf("\n[calibration.methods]\n");
  std::printf("spread = %s\n",
              toml_string("<figure>_spread: max - min over the repetitions of that figure "
                          "within this run, in the figure's unit")
                  .c_str());
  for (const auto &f : figs) std::printf("%s = %s\n", f.key, toml_string(f.method).c_str());
  for (const auto &x : extras)
    if (!x.method.empty()) std::printf("%s = %s\n", x.key, toml_string(x.method).c_str());
  (void)sm_mhz;
  return 0;
}

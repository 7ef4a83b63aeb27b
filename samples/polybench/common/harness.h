// Shared support for the PolyBench-equivalent samples: command line, deterministic inputs,
// device buffers, the reference check, and the timing mode.
//
// Command line of every program:   prog [SIZE...] [--steps T] [--time [REPS]]
//   - SIZEs are positional; when fewer are given than the program takes, the missing ones
//     repeat the last one given (`gemm 300` is 300x300x300); none given: the defaults.
//     A program whose main is KL_MAIN also takes `--sizes S1 S2 ...`: one run per size, in
//     one process (kl::main_sizes).
//   - `--steps T` (programs with a time loop only) sets the number of time steps.
//   - `--time [REPS]` switches to timing mode: the reference check is skipped, and each
//     kernel launch is preceded by one warm-up launch of the same kernel with the same
//     arguments and then timed REPS (default 5) times with a pair of cudaEvents. Each timed
//     repetition is queued behind a gate (a host function that holds the stream until the
//     CPU has queued the start event, the launches and the stop event, so that the events
//     time the GPU and not the CPU's queueing) and launches the kernel n times back to
//     back, n set from one timed launch so that a repetition lasts about 100 us (at most
//     100; 1 for kernels of 100 us or more); its time is the mean per launch. This is how
//     klaraptor's collector times shapes, so the two agree. At the end one line per launch
//     site and data size:
//
//       KL_TIME <kernel> <d1>x<d2>... median_ms=<t> block=<bx>x<by>x<bz> launches=<k>
//
//     <d1>x<d2>... are the kernel's data parameters in the order of its annotation;
//     median_ms is the median over the REPS repetitions of the time of one launch; for a
//     launch site in a host loop (k launches of the same kernel with the same data sizes per
//     program run, e.g. LU's k loop or a time loop) it is the sum over the k launches of
//     each launch's median, i.e. what that site costs in one run of the program. block is the
//     shape the kernel really ran with, read back from the device (KL_RECORD_BLOCK), so it is
//     the one klaraptor chose when the launch was rewritten. Then one line per kernel (for
//     launch sites that name their kernel function) with what the CUDA occupancy API
//     suggests:
//
//       KL_OCC <kernel> block=<n> min_grid=<g>
//
//     from cudaOccupancyMaxPotentialBlockSize(&g, &n, kernel, 0, 0): the 1-D block size that
//     maximises occupancy (no dynamic shared memory, no block-size limit) and the smallest
//     grid that reaches it. The accuracy study (bench/accuracy) compares it with klaraptor.
//
// In check mode the program compares every output with a CPU reference computed in double
// precision from the same float inputs. The error measure is max_i |gpu_i - ref_i| /
// max_i |ref_i| (normwise in the max norm, so entries that cancel to near zero do not
// dominate); each program states its tolerance. A NaN or an infinity anywhere fails, and
// outputs that the kernels write in full are poisoned with NaN before the launches, so an
// element that no thread wrote fails the check too.
#pragma once

#if !defined(KL_CPU_EMULATION)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// The main of a program that takes --sizes (kl::main_sizes, below): `KL_MAIN(argc, argv) {
// ... }` in place of `int main(int argc, char **argv) { ... }`; the body is one run.
#define KL_MAIN(argc, argv)                                                                \
  static int kl_main_run(int argc, char **argv);                                           \
  int main(int argc, char **argv) { return kl::main_sizes(argc, argv, kl_main_run); }      \
  static int kl_main_run(int argc, char **argv)

#define KL_CHECK(call)                                                                   \
  do {                                                                                   \
    cudaError_t kl_err_ = (call);                                                        \
    if (kl_err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: CUDA error: %s (%s)\n", __FILE__, __LINE__,           \
                   cudaGetErrorString(kl_err_), #call);                                  \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

// The block shape of the most recent launch that executed KL_RECORD_BLOCK(): written by
// thread (0,0,0) of block (0,0,0). One copy per translation unit (static).
static __device__ unsigned kl_seen_block[3];

#define KL_RECORD_BLOCK()                                                                 \
  do {                                                                                    \
    if ((threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == \
        0u) {                                                                             \
      kl_seen_block[0] = blockDim.x;                                                      \
      kl_seen_block[1] = blockDim.y;                                                      \
      kl_seen_block[2] = blockDim.z;                                                      \
    }                                                                                     \
  } while (0)

namespace kl {

// Ceiling division for grid sizes.
inline unsigned cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

// ---------------------------------------------------------------------------------------
// Command line

struct Options {
  std::vector<long> sizes;
  long steps = 0;
  bool time = false;
  int reps = 5;
};

[[noreturn]] inline void usage_exit(const char *prog, const std::vector<const char *> &names,
                                    long steps_default, const char *why) {
  std::fprintf(stderr, "%s: %s\nusage: %s", prog, why, prog);
  for (size_t i = 0; i < names.size(); ++i) std::fprintf(stderr, " [%s", names[i]);
  for (size_t i = 0; i < names.size(); ++i) std::fprintf(stderr, "]");
  if (steps_default > 0) std::fprintf(stderr, " [--steps T]");
  std::fprintf(stderr, " [--time [REPS]]\n");
  std::exit(1);
}

inline bool parse_long(const char *s, long *out) {
  if (!s || !*s) return false;
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// names/defaults: the positional sizes; min_size: the smallest legal size; steps_default:
// 0 when the program has no time loop.
inline Options parse(int argc, char **argv, const std::vector<const char *> &names,
                     const std::vector<long> &defaults, long min_size = 1,
                     long steps_default = 0) {
  const char *prog = argc > 0 ? argv[0] : "prog";
  if (const char *slash = std::strrchr(prog, '/')) prog = slash + 1;
  Options o;
  o.steps = steps_default;
  char why[256];
  for (int a = 1; a < argc; ++a) {
    long v;
    if (std::strcmp(argv[a], "--time") == 0) {
      o.time = true;
      if (a + 1 < argc && parse_long(argv[a + 1], &v)) {
        if (v < 1 || v > 1000) usage_exit(prog, names, steps_default, "REPS must be 1..1000");
        o.reps = (int)v;
        ++a;
      }
    } else if (std::strcmp(argv[a], "--steps") == 0 && steps_default > 0) {
      if (a + 1 >= argc || !parse_long(argv[a + 1], &v) || v < 1 || v > 1000000)
        usage_exit(prog, names, steps_default, "--steps needs a count 1..1000000");
      o.steps = v;
      ++a;
    } else if (std::strcmp(argv[a], "-h") == 0 || std::strcmp(argv[a], "--help") == 0) {
      usage_exit(prog, names, steps_default, "help");
    } else if (parse_long(argv[a], &v)) {
      if (o.sizes.size() == names.size()) {
        std::snprintf(why, sizeof why, "too many sizes (it takes %zu)", names.size());
        usage_exit(prog, names, steps_default, why);
      }
      if (v < min_size || v > INT_MAX) {
        std::snprintf(why, sizeof why, "%s must be %ld..%d, not %s",
                      names[o.sizes.size()], min_size, INT_MAX, argv[a]);
        usage_exit(prog, names, steps_default, why);
      }
      o.sizes.push_back(v);
    } else {
      std::snprintf(why, sizeof why, "unexpected argument '%s'", argv[a]);
      usage_exit(prog, names, steps_default, why);
    }
  }
  if (o.sizes.empty()) o.sizes = defaults;
  while (o.sizes.size() < names.size()) o.sizes.push_back(o.sizes.back());
  return o;
}

// ---------------------------------------------------------------------------------------
// Several data sizes in one process
//
//   prog --sizes S1 S2 ... [--steps T] [--time [REPS]]
//
// runs the program once per size Si, in order, in this one process, each run exactly as
// `prog <Si's values> [--steps T] [--time [REPS]]` would run alone: its own inputs, device
// buffers, reference check and output. A size is its values separated by commas (`64,48,40`
// is `prog 64 48 40`; `300` is `prog 300`). klaraptor's profile recipes use it
// (`profile(run="./gemm --sizes {SIZES}", …)`): every profile size of a kernel in one
// process, which pays CUDA's and the profiler's start once instead of once per size. The
// exit status is the first nonzero one of the runs (so every size runs even when one fails
// its check, as a sweep of accumulating kernels does); a run that exits by itself (a usage
// error, KL_CHECK's CUDA error) ends the process there.
//
// A program takes --sizes when its main is written
//
//   KL_MAIN(argc, argv) { ... }                  // instead of int main(int argc, char **argv)
//
// whose body is one run (kl::parse reads its sizes as before). Its state must be its own:
// a run must not rely on a static variable another run of the same process changed.

// The values of one size after --sizes ("64,48,40"), as separate arguments; false when
// `s` is not such a list (an option that follows the sizes).
inline bool split_size(const char *s, std::vector<std::string> *values) {
  std::vector<std::string> out;
  std::string piece;
  for (const char *p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      long v;
      if (!parse_long(piece.c_str(), &v)) return false;
      out.push_back(piece);
      piece.clear();
      if (*p == '\0') break;
    } else {
      piece += *p;
    }
  }
  *values = std::move(out);
  return true;
}

typedef int (*MainRun)(int argc, char **argv);

[[noreturn]] inline void sizes_usage_exit(const char *prog, const char *why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s --sizes SIZE [SIZE...] [other options], each SIZE the "
               "values of one run separated by commas (e.g. --sizes 64,64 128,96)\n",
               prog, why, prog);
  std::exit(1);
}

// The program's main with --sizes (above): `run` once per size, or once as given when the
// command line has no --sizes.
inline int main_sizes(int argc, char **argv, MainRun run) {
  const char *prog = argc > 0 ? argv[0] : "prog";
  if (const char *slash = std::strrchr(prog, '/')) prog = slash + 1;
  std::vector<std::vector<std::string>> sizes;
  std::vector<std::string> rest;
  bool given = false;
  char why[256];
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--sizes") != 0) {
      rest.push_back(argv[a]);
      continue;
    }
    if (given) sizes_usage_exit(prog, "--sizes is given twice");
    given = true;
    std::vector<std::string> values;
    while (a + 1 < argc && split_size(argv[a + 1], &values)) {
      sizes.push_back(values);
      ++a;
    }
    if (a + 1 < argc && argv[a + 1][0] != '-') {
      std::snprintf(why, sizeof why, "'%s' is not a size (its values separated by commas)",
                    argv[a + 1]);
      sizes_usage_exit(prog, why);
    }
    if (sizes.empty()) sizes_usage_exit(prog, "--sizes needs at least one size");
  }
  if (!given) return run(argc, argv);
  // A size also given as an argument would be taken with each run's.
  for (size_t i = 0; i < rest.size(); ++i) {
    long v;
    const bool counted = i > 0 && (rest[i - 1] == "--time" || rest[i - 1] == "--steps");
    if (!counted && parse_long(rest[i].c_str(), &v)) {
      std::snprintf(why, sizeof why,
                    "with --sizes, every size is given after it ('%s' is given apart)",
                    rest[i].c_str());
      sizes_usage_exit(prog, why);
    }
  }
  int status = 0;
  for (const std::vector<std::string> &values : sizes) {
    std::vector<std::string> args;
    args.push_back(argc > 0 ? argv[0] : "prog");
    args.insert(args.end(), values.begin(), values.end());
    args.insert(args.end(), rest.begin(), rest.end());
    std::vector<char *> ptrs;
    for (std::string &a : args) ptrs.push_back(&a[0]);
    ptrs.push_back(nullptr);
    const int rc = run((int)args.size(), ptrs.data());
    std::fflush(stdout);
    if (status == 0 && rc != 0) status = rc;
  }
  return status;
}

// "512x384x100" for the KL_TIME lines and the check report.
inline std::string dims(std::initializer_list<long> d) {
  std::string s;
  for (long v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Deterministic inputs

// A value in [0, 1) determined by (seed, index): an integer hash, no global state, so the
// inputs do not depend on the order they are generated in.
inline float unit(uint32_t seed, uint64_t index) {
  uint64_t x = index * 0x9E3779B97F4A7C15ull + (uint64_t)(seed + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return (float)(x >> 40) * (1.0f / 16777216.0f);
}

// n values uniform in [lo, hi).
inline std::vector<float> fill(size_t n, uint32_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * unit(seed, i);
  return v;
}

// ---------------------------------------------------------------------------------------
// Device buffers

template <class T> class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    KL_CHECK(cudaMalloc((void **)&p_, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T> &host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(p_); }

  T *get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T> &host) {
    if (host.size() != n_) {
      std::fprintf(stderr, "internal error: upload of %zu elements into a buffer of %zu\n",
                   host.size(), n_);
      std::exit(2);
    }
    KL_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    KL_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xff: a NaN for float, so an element no thread writes fails the check.
  void poison() { KL_CHECK(cudaMemset(p_, 0xff, n_ * sizeof(T))); }
  void zero() { KL_CHECK(cudaMemset(p_, 0, n_ * sizeof(T))); }

private:
  T *p_ = nullptr;
  size_t n_;
};

// ---------------------------------------------------------------------------------------
// Timing

class Timer {
public:
  explicit Timer(const Options &o) : on_(o.time), reps_(o.reps) {
    if (on_) {
      KL_CHECK(cudaEventCreate(&start_));
      KL_CHECK(cudaEventCreate(&stop_));
    }
  }
  Timer(const Timer &) = delete;
  Timer &operator=(const Timer &) = delete;
  ~Timer() {
    if (on_) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
  }
  bool on() const { return on_; }

  // Runs one launch site: `launch` must perform exactly one <<<...>>> launch. In check mode
  // it runs once; in timing mode once to warm up and then reps times, each timed. With the
  // kernel function given as well, timing mode also reports its KL_OCC line.
  template <class Kernel, class Launch>
  void run(const char *kernel, const std::string &size, Kernel *func, Launch &&launch) {
    if (on_) occupancy(kernel, func);
    run(kernel, size, std::forward<Launch>(launch));
  }

  template <class Launch> void run(const char *kernel, const std::string &size, Launch &&launch) {
    if (!on_) {
      launch();
      KL_CHECK(cudaGetLastError());
      return;
    }
    const unsigned none[3] = {0, 0, 0};
    KL_CHECK(cudaMemcpyToSymbol(kl_seen_block, none, sizeof none));
    launch();
    KL_CHECK(cudaGetLastError());
    KL_CHECK(cudaDeviceSynchronize());
    const int n = batch(timed(launch, 1));
    std::vector<double> ms((size_t)reps_);
    for (int r = 0; r < reps_; ++r) ms[(size_t)r] = timed(launch, n);
    std::sort(ms.begin(), ms.end());
    double median = reps_ % 2 ? ms[(size_t)reps_ / 2]
                              : 0.5 * (ms[(size_t)reps_ / 2 - 1] + ms[(size_t)reps_ / 2]);
    unsigned seen[3];
    KL_CHECK(cudaMemcpyFromSymbol(seen, kl_seen_block, sizeof seen));
    std::string block = std::to_string(seen[0]) + "x" + std::to_string(seen[1]) + "x" +
                        std::to_string(seen[2]);
    for (Site &s : sites_) {
      if (s.kernel == kernel && s.size == size && s.block == block) {
        s.total_ms += median;
        s.launches += 1;
        return;
      }
    }
    sites_.push_back(Site{kernel, size, block, median, 1});
  }

  void report() const {
    for (const Site &s : sites_)
      std::printf("KL_TIME %s %s median_ms=%.6f block=%s launches=%ld\n", s.kernel.c_str(),
                  s.size.c_str(), s.total_ms, s.block.c_str(), s.launches);
    for (const Occupancy &o : occ_)
      std::printf("KL_OCC %s block=%d min_grid=%d\n", o.kernel.c_str(), o.block, o.min_grid);
  }

private:
  // How long one timed repetition should last, and the most launches it may hold.
  static constexpr double kRepetitionMs = 0.1;
  static constexpr int kMaxLaunches = 100;

  static int batch(double one_ms) {
    if (!(one_ms > 0) || one_ms >= kRepetitionMs) return 1;
    return (int)std::min<double>(kMaxLaunches, std::ceil(kRepetitionMs / one_ms));
  }

  // The gate: a host function on the stream that returns once `open` is set.
#if !defined(KL_CPU_EMULATION)
  static void CUDART_CB hold(void *open) {
    auto *flag = static_cast<std::atomic<int> *>(open);
    while (!flag->load(std::memory_order_acquire)) std::this_thread::yield();
  }
#endif

  // One timed repetition: the gate, the start event, n launches, the stop event, then the
  // gate opens. The mean time of one launch, in ms.
  template <class Launch> double timed(Launch &launch, int n) {
    cudaError_t err = cudaSuccess;
#if !defined(KL_CPU_EMULATION)
    open_.store(0, std::memory_order_release);
    err = cudaLaunchHostFunc(0, hold, &open_);
#endif
    if (err == cudaSuccess) err = cudaEventRecord(start_);
    for (int i = 0; i < n && err == cudaSuccess; ++i) {
      launch();
      err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaEventRecord(stop_);
    open_.store(1, std::memory_order_release); // never left closed, even on an error
    KL_CHECK(err);
    KL_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    KL_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return (double)ms / n;
  }

  struct Occupancy {
    std::string kernel;
    int block, min_grid;
  };

  // Asks the occupancy API once per kernel (the answer depends on the kernel's registers and
  // shared memory, not on the data size).
  template <class Kernel> void occupancy(const char *kernel, Kernel *func) {
    for (const Occupancy &o : occ_)
      if (o.kernel == kernel) return;
#if !defined(KL_CPU_EMULATION)
    int block = 0, min_grid = 0;
    KL_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, func, 0, 0));
    occ_.push_back(Occupancy{kernel, block, min_grid});
#else
    (void)kernel; // the emulation has no occupancy API: no KL_OCC lines
    (void)func;
#endif
  }

  struct Site {
    std::string kernel, size, block;
    double total_ms;
    long launches;
  };
  bool on_;
  int reps_;
  cudaEvent_t start_{}, stop_{};
  std::atomic<int> open_{1};
  std::vector<Site> sites_;
  std::vector<Occupancy> occ_;
};

// ---------------------------------------------------------------------------------------
// Reference check

class Checker {
public:
  Checker(const char *program, std::string size) : program_(program), size_(std::move(size)) {}

  // Compares n values of gpu with ref; tol bounds max|gpu - ref| / max|ref|.
  bool compare(const char *what, const std::vector<float> &gpu, const std::vector<double> &ref,
               double tol) {
    if (gpu.size() != ref.size()) {
      std::printf("%s %s: %s: %zu values from the GPU, %zu in the reference  FAIL\n", program_,
                  size_.c_str(), what, gpu.size(), ref.size());
      ok_ = false;
      return false;
    }
    double scale = 0, err = 0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
      scale = std::max(scale, std::fabs(ref[i]));
      if (!std::isfinite(gpu[i])) {
        if (bad++ == 0) worst = i;
        continue;
      }
      double e = std::fabs((double)gpu[i] - ref[i]);
      if (e > err) {
        err = e;
        if (bad == 0) worst = i;
      }
    }
    double rel = scale > 0 ? err / scale : err;
    bool ok = bad == 0 && rel <= tol;
    if (bad)
      std::printf("%s %s: %s: %zu non-finite values (first at index %zu)  FAIL\n", program_,
                  size_.c_str(), what, bad, worst);
    else
      std::printf("%s %s: %s: max_err/max_ref=%.3e (tolerance %.0e, worst at index %zu)  %s\n",
                  program_, size_.c_str(), what, rel, tol, worst, ok ? "ok" : "FAIL");
    ok_ = ok_ && ok;
    return ok;
  }

  // Prints the verdict; the program's exit status.
  int finish() const {
    std::printf("%s\n", ok_ ? "PASS" : "FAIL");
    return ok_ ? 0 : 1;
  }

private:
  const char *program_;
  std::string size_;
  bool ok_ = true;
};

// The float values widened, for references that start from the GPU inputs.
inline std::vector<double> widen(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

} // namespace kl

// Ways to hold a stream while a timed launch is queued (issue 41: the runtime's gate), each
// measured in a fresh process, since what matters is what the process's first one costs:
//
//   mapped    a word of pinned host memory (cudaHostAlloc, mapped and portable) waited on by
//             the driver's cuStreamWaitValue32 (the runtime's gate up to 2026-11-29)
//   default   the same with cudaHostAlloc's default flags
//   register  a page of the program's own memory pinned by cudaHostRegister, then waited on
//             (register0, registerro, register2: its flags varied, a second page; below)
//   hostfunc  cudaLaunchHostFunc: a host function that returns once the host releases it
//   none      no gate (the window holds the launch's latency)
//
//   nvcc -O2 -arch=sm_90 gatemodes.cu -o gatemodes -ldl && ./gatemodes <mode> [launches]
// prints "<figure> <value>" lines: the first gated launch's host time (making the gate, the
// three calls, the release), the median host time of a later gated launch, the median window
// a short kernel reads with the gate, and the median wall of one gated launch to its end.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <atomic>
#include <vector>

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// About 3 us on one SM: the length of the short kernels whose windows the gate protects.
__global__ void spin(long long cycles, int *sink) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (sink) *sink = 1;
}

typedef int (*wait_fn)(void *stream, unsigned long long addr, unsigned int value,
                       unsigned int flags);
static wait_fn g_wait;
static volatile uint32_t *g_word;
static unsigned long long g_addr;
static std::atomic<uint32_t> g_released{0};
static uint32_t g_next;
alignas(4096) static char g_page[4096];

static void CUDART_CB hold(void *arg) {
  uint32_t v = (uint32_t)(uintptr_t)arg;
  while ((int32_t)(v - g_released.load(std::memory_order_acquire)) > 0) {
  }
}

static int make_gate(const char *mode) {
  if (!strcmp(mode, "none") || !strcmp(mode, "hostfunc")) return 0;
  void *self = dlopen(nullptr, RTLD_LAZY);
  g_wait = self ? (wait_fn)dlsym(self, "cuStreamWaitValue32_v2") : nullptr;
  if (!g_wait) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) g_wait = (wait_fn)dlsym(h, "cuStreamWaitValue32_v2");
  }
  if (!g_wait) return -1;
  void *word = nullptr, *dev = nullptr;
  cudaError_t e;
  if (!strcmp(mode, "mapped"))
    e = cudaHostAlloc(&word, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  else if (!strcmp(mode, "default"))
    e = cudaHostAlloc(&word, 64, cudaHostAllocDefault);
  else if (!strncmp(mode, "register", 8)) {
    // register: mapped and portable; register0: the default flags; registerro: mapped and
    // read-only (the GPU only reads the word); register2: a second page registered after the
    // first (what the first one's cost is made of), timed on its own line
    unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable;
    if (!strcmp(mode, "register0")) flags = cudaHostRegisterDefault;
    if (!strcmp(mode, "registerro")) flags = cudaHostRegisterMapped | cudaHostRegisterReadOnly;
    word = g_page;
    e = cudaHostRegister(g_page, sizeof g_page, flags);
    if (!strcmp(mode, "register2")) {
      static char *second = (char *)aligned_alloc(4096, 4096);
      double r0 = now_us();
      cudaError_t e2 = cudaHostRegister(second, 4096, flags);
      printf("second_register_us %.1f (rc %d)\n", now_us() - r0, (int)e2);
    }
  } else
    return -2;
  if (e != cudaSuccess) return -3;
  if (cudaHostGetDevicePointer(&dev, word, 0) != cudaSuccess) return -4;
  g_word = (volatile uint32_t *)word;
  *g_word = 0;
  g_addr = (unsigned long long)(uintptr_t)dev;
  return 0;
}

static uint32_t close_gate(const char *mode, cudaStream_t s) {
  uint32_t v = ++g_next;
  if (!strcmp(mode, "hostfunc")) {
    if (cudaLaunchHostFunc(s, hold, (void *)(uintptr_t)v) != cudaSuccess) return 0;
    return v;
  }
  if (!g_wait) return 0;
  if (g_wait(s, g_addr, v, 0) != 0) return 0;
  return v;
}

static void open_gate(const char *mode, uint32_t v) {
  if (!v) return;
  if (!strcmp(mode, "hostfunc"))
    g_released.store(v, std::memory_order_release);
  else
    __atomic_store_n(g_word, v, __ATOMIC_RELEASE);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "mapped";
  int n = argc > 2 ? atoi(argv[2]) : 200;
  cudaStream_t s;
  cudaFree(0);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const long long cycles = 6000; /* about 3 us at the H200's 1980 MHz */
  spin<<<1, 32, 0, s>>>(cycles, nullptr);
  cudaStreamSynchronize(s);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);

  // The first gated launch: the gate made, closed, the three calls, the release.
  double t0 = now_us();
  int made = make_gate(mode);
  double t1 = now_us();
  uint32_t v = close_gate(mode, s);
  cudaEventRecord(a, s);
  spin<<<1, 32, 0, s>>>(cycles, nullptr);
  cudaEventRecord(b, s);
  open_gate(mode, v);
  double t2 = now_us();
  cudaStreamSynchronize(s);
  float first_ms = 0;
  cudaEventElapsedTime(&first_ms, a, b);
  printf("mode %s\nmake_rc %d\nfirst_make_us %.1f\nfirst_launch_us %.1f\nfirst_window_us %.2f\n",
         mode, made, t1 - t0, t2 - t1, first_ms * 1e3);

  std::vector<double> host, window, wall, ungated;
  for (int i = 0; i < n; i++) {
    double u0 = now_us();
    uint32_t g = close_gate(mode, s);
    cudaEventRecord(a, s);
    spin<<<1, 32, 0, s>>>(cycles, nullptr);
    cudaEventRecord(b, s);
    open_gate(mode, g);
    double u1 = now_us();
    cudaStreamSynchronize(s);
    double u2 = now_us();
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    host.push_back(u1 - u0);
    window.push_back(ms * 1e3);
    wall.push_back(u2 - u0);
    // the same launch without a gate, for its wall
    double w0 = now_us();
    cudaEventRecord(a, s);
    spin<<<1, 32, 0, s>>>(cycles, nullptr);
    cudaEventRecord(b, s);
    cudaStreamSynchronize(s);
    ungated.push_back(now_us() - w0);
  }
  cudaError_t err = cudaGetLastError();
  printf("launches %d\nhost_us %.2f\nwindow_us %.2f\nwall_us %.2f\nungated_wall_us %.2f\nerror %s\n",
         n, median(host), median(window), median(wall), median(ungated), cudaGetErrorString(err));
  return 0;
}

// Whether a stream held by the driver's cuStreamWaitValue32 on a word of pinned host memory,
// released once the start event, the launch and the end event are queued (the runtime's gate,
// runtime-shim/src/klaraptor_refine.inc), takes the launch's latency out of an event window on
// an idle stream, and what holding costs. A small kernel, launched alone with a synchronisation
// after each launch: its windows without the gate, with it, with it and 50 us of host work
// between launches, on the default stream and a created one; the same kernel back to back (its
// time on a busy stream); and a synchronised loop of 2000 launches with and without the gate.
//
//   nvcc -O2 -arch=sm_90 bench/gate/gatetest.cu -o gatetest -ldl
//   ./gatetest [n=65536] [reps=1] [block=256]
// Results: bench/results/refine-paired-h200-2026-11-28.md ("The gate").
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <algorithm>
#include <vector>
typedef int (*waitfn)(void *, unsigned long long, uint32_t, unsigned);
__global__ void tiny(float *x, int n, int reps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; for (int r = 0; r < reps; r++) v = v * 1.0001f + 0.5f; x[i] = v; }
}
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double pct(std::vector<double> v, double p) { std::sort(v.begin(), v.end()); return v[(size_t)(p * (v.size() - 1))]; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 65536, reps = argc > 2 ? atoi(argv[2]) : 1, block = argc > 3 ? atoi(argv[3]) : 256;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY);
  waitfn w = (waitfn)dlsym(h, "cuStreamWaitValue32_v2");
  if (!w) w = (waitfn)dlsym(h, "cuStreamWaitValue32");
  printf("wait fn %p\n", (void *)w);
  int attr = -1; int (*getattr)(int *, int, int) = (int (*)(int *, int, int))dlsym(h, "cuDeviceGetAttribute");
  float *x; cudaMalloc(&x, n * 4 * 2);
  volatile uint32_t *flag; cudaHostAlloc((void **)&flag, 4096, cudaHostAllocMapped | cudaHostAllocPortable);
  *flag = 0; void *dflag; cudaHostGetDevicePointer(&dflag, (void *)flag, 0);
  if (getattr) { getattr(&attr, 92, 0); printf("attr92(mem ops v1) %d\n", attr); getattr(&attr, 94, 0); printf("attr94 %d\n", attr); }
  cudaStream_t streams[2] = {0, 0}; cudaStreamCreate(&streams[1]);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  int grid = (n + block - 1) / block;
  for (int i = 0; i < 20; i++) tiny<<<grid, block>>>(x, n, reps);
  cudaDeviceSynchronize();
  // reference: back to back, busy stream
  cudaEventRecord(a); for (int i = 0; i < 1000; i++) tiny<<<grid, block>>>(x, n, reps); cudaEventRecord(b); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b); printf("n=%d reps=%d block=%d back-to-back per launch %.3f us\n", n, reps, block, ms * 1000 / 1000);
  uint32_t v = 0;
  for (int si = 0; si < 2; si++) {
    cudaStream_t s = streams[si];
    for (int mode = 0; mode < 3; mode++) {
      std::vector<double> win, host;
      for (int it = 0; it < 300; it++) {
        double t0 = now_us();
        int rc = 0;
        if (mode >= 1) { ++v; rc = w(s, (unsigned long long)(uintptr_t)dflag, v, 0 /*GEQ*/); }
        cudaEventRecord(a, s);
        tiny<<<grid, block, 0, s>>>(x, n, reps);
        cudaEventRecord(b, s);
        if (mode >= 1) { __atomic_store_n((uint32_t *)flag, v, __ATOMIC_RELEASE); }
        double t1 = now_us();
        if (rc) { printf("wait rc %d\n", rc); break; }
        cudaStreamSynchronize(s);
        if (mode == 2) { double t2 = now_us(); while (now_us() - t2 < 50) {} }  // host gap
        float e; cudaEventElapsedTime(&e, a, b); win.push_back(e * 1000); host.push_back(t1 - t0);
      }
      if (!win.empty())
        printf("stream %s mode %s: window median %.3f p10 %.3f p90 %.3f us; host enqueue median %.2f us\n", si ? "created" : "default",
               mode == 0 ? "plain" : mode == 1 ? "gated" : "gated+gap", med(win), pct(win, 0.1), pct(win, 0.9), med(host));
    }
  }
  // wall cost: a sync'd loop of 2000 launches, plain vs gated
  for (int mode = 0; mode < 2; mode++) {
    double t0 = now_us();
    for (int it = 0; it < 2000; it++) {
      if (mode) { ++v; w(0, (unsigned long long)(uintptr_t)dflag, v, 0); }
      cudaEventRecord(a, 0); tiny<<<grid, block>>>(x, n, reps); cudaEventRecord(b, 0);
      if (mode) __atomic_store_n((uint32_t *)flag, v, __ATOMIC_RELEASE);
      cudaDeviceSynchronize();
    }
    printf("sync loop %s: %.2f us per iteration\n", mode ? "gated" : "plain", (now_us() - t0) / 2000);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}

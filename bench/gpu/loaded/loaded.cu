// DRAM under load (docs/model.md, "The issue bound ... Tried again"): how many warps per SM
// does a streaming kernel need to reach the GPU's DRAM bandwidth, and what latency does a
// request see on the way there? The model's MWP takes the unloaded latency (a dependent
// chain of loads, the calibration's mem_latency_cycles) for a request on a busy bus.
//
// Each launch puts W warps on every SM in one wave (grid = SMs x blocks of min(W, 8) warps)
// and walks arrays of 64 Mi floats (256 MiB each, past any L2) with a grid-stride loop that
// is not unrolled, so that a warp keeps a known number of requests in flight: `sum` (one
// coalesced 128-byte load an iteration), `copy` (one load, one store) and `saxpy` (two
// loads, one store). Times are the minimum of cudaEvent-timed launches after a warm-up.
// Little's law gives the latency a request saw: bytes in flight / bandwidth, with W warps x
// SMs x (loads an iteration x 128 bytes) in flight.
//
//   loaded [reps]   prints: kernel warps_per_sm blocks threads_per_block us GBps latency_ns latency_cycles
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "../cuda_check.h"

__global__ void sum(const float *x, float *out, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  float acc = 0.0f;
#pragma unroll 1
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    acc += x[i];
  if (acc == 12345.678f) out[0] = acc; // never true for the inputs: keeps the loads
}

__global__ void copy(const float *x, float *y, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
#pragma unroll 1
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = x[i];
}

__global__ void saxpy(float a, const float *x, float *y, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
#pragma unroll 1
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = a * x[i] + y[i];
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  const size_t n = (size_t)64 << 20;
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  float *x, *y, *out;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMalloc(&out, sizeof(float)));
  CHECK(cudaMemset(x, 0, n * sizeof(float)));
  CHECK(cudaMemset(y, 0, n * sizeof(float)));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("# %s, %d SMs, SM clock %d MHz, %d launches each (minimum)\n", prop.name, sms,
              clock_khz / 1000, reps);
  std::printf("kernel\twarps_per_sm\tblocks\tthreads_per_block\tus\tGBps\tlatency_ns\tlatency_cycles\n");
  const int warps[] = {2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64};
  const char *names[] = {"sum", "copy", "saxpy"};
  const double bytes_per_elem[] = {4, 8, 12};
  const double loads_per_iter[] = {1, 1, 2};
  for (int k = 0; k < 3; ++k) {
    for (int w : warps) {
      const int block_warps = std::min(w, 8);
      const int threads = 32 * block_warps;
      const int blocks = sms * (w / block_warps);
      float best = 1e30f;
      for (int r = -2; r < reps; ++r) {
        CHECK(cudaEventRecord(a));
        if (k == 0) sum<<<blocks, threads>>>(x, out, n);
        if (k == 1) copy<<<blocks, threads>>>(x, y, n);
        if (k == 2) saxpy<<<blocks, threads>>>(1.5f, x, y, n);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaGetLastError());
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 0) best = std::min(best, ms);
      }
      const double us = best * 1e3;
      const double gbps = bytes_per_elem[k] * (double)n / (us * 1e3);
      const double in_flight = (double)w * sms * loads_per_iter[k] * 128.0;
      const double lat_ns = in_flight / gbps; // bytes / (bytes per ns)
      std::printf("%s\t%d\t%d\t%d\t%.1f\t%.0f\t%.0f\t%.0f\n", names[k], w, blocks, threads, us,
                  gbps, lat_ns, lat_ns * clock_khz / 1e6);
    }
  }
  return 0;
}

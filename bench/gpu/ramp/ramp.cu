// The first wave's block ramp (docs/model.md): does an SM that receives B blocks of a wave
// finish later than one that receives the same warps in one block? Each launch puts the
// same warps on every SM in one wave: W warps per SM either as W one-warp blocks or as one
// W-warp block (and B blocks of W/B warps between). Each warp does a short dependent chain
// of global loads (latency-bound, about a microsecond), so the waves' work is the same and
// only how the blocks start differs. Times are medians of cudaEvent-timed launches.
//
//   ramp [reps]     prints: warps_per_sm blocks_per_sm threads_per_block blocks median_us
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "../cuda_check.h"

__global__ void chase(const unsigned *next, unsigned *out, int steps) {
  unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) & 1023u;
  for (int s = 0; s < steps; ++s) i = next[i];
  if (i == 0xffffffffu) out[0] = i; // never true: keeps the chain
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, %d reps per launch\n", prop.name, sms, reps);
  std::vector<unsigned> h(1024);
  for (unsigned k = 0; k < 1024; ++k) h[k] = (k * 389u + 7u) & 1023u;
  unsigned *next, *out;
  CHECK(cudaMalloc(&next, 1024 * sizeof(unsigned)));
  CHECK(cudaMalloc(&out, sizeof(unsigned)));
  CHECK(cudaMemcpy(next, h.data(), 1024 * sizeof(unsigned), cudaMemcpyHostToDevice));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int steps = 8;
  std::printf("warps_per_sm\tblocks_per_sm\tthreads_per_block\tblocks\tmedian_us\n");
  for (int w : {4, 8, 16}) {
    for (int per = 1; per <= w; per *= 2) {
      int threads = 32 * (w / per);
      int blocks = per * sms;
      for (int r = 0; r < 20; ++r) chase<<<blocks, threads>>>(next, out, steps);
      CHECK(cudaDeviceSynchronize());
      std::vector<float> t(reps);
      for (int r = 0; r < reps; ++r) {
        CHECK(cudaEventRecord(a));
        chase<<<blocks, threads>>>(next, out, steps);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&t[r], a, b));
      }
      std::sort(t.begin(), t.end());
      std::printf("%d\t%d\t%d\t%d\t%.3f\n", w, per, threads, blocks, 1000.0f * t[reps / 2]);
    }
  }
  return 0;
}

// CONV1D_CONST: out[i] = sum_{j=0..R-1} w[j] in[i + j - floor(R/2)] for a signal of N floats
// and a filter of R taps (1 <= R <= kMaxTaps = 64, a run-time value), the signal taken as 0
// outside [0, N). The taps live in constant memory (every thread of a warp reads the same tap
// at the same time: a broadcast). Each block of bx threads computes bx consecutive outputs
// from bx + R - 1 consecutive inputs (its own and a halo of floor(R/2) on the left and
// R - 1 - floor(R/2) on the right), which its threads first stage in shared memory
// (block-stride loop, zeros past the ends) before a __syncthreads; every input is then read
// from global memory about once instead of R times. The staging tile is dynamic shared
// memory sized from the block and the filter at launch: shmem((bx + R - 1) * 4).
// Usage: conv1d_const [N [R]] [--time [REPS]]
#include "idioms.h"

constexpr int kMaxTaps = 64;
__constant__ float kTaps[kMaxTaps];

#pragma klaraptor kernel(conv1d_const) data(N=n, R=taps) dim(1) grid(ceil(N, bx)) \
        shmem((bx + R - 1) * 4) \
        profile(run="./conv1d_const {N} {R}", \
                sizes=[(65536, 17), (131072, 17), (262144, 17), (131072, 5), (262144, 31)])
__global__ void conv1d_const(const float *in, float *out, int n, int taps) {
  extern __shared__ float tile[];
  KL_RECORD_BLOCK();
  const int width = blockDim.x + taps - 1;
  // tile[j] holds in[first + j]: output i = first + floor(R/2) + t reads tile[t .. t + R - 1].
  const long first = (long)blockIdx.x * blockDim.x - taps / 2;
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    const long g = first + j;
    tile[j] = g >= 0 && g < n ? in[g] : 0.0f;
  }
  __syncthreads();
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int j = 0; j < taps; ++j) acc += kTaps[j] * tile[threadIdx.x + j];
  out[i] = acc;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "R"}, {1 << 22, 31});
  const int n = (int)o.sizes[0], taps = (int)o.sizes[1];
  if (taps > kMaxTaps) {
    std::fprintf(stderr, "conv1d_const: R must be at most %d\n", kMaxTaps);
    return 2;
  }
  std::vector<float> W = kl::fill(kMaxTaps, 40, -0.05f, 0.1f);
  KL_CHECK(cudaMemcpyToSymbol(kTaps, W.data(), W.size() * sizeof(float)));
  std::vector<float> X = kl::fill((size_t)n, 41, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufX(X), bufY((size_t)n);
  bufY.poison();
  const float *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  const size_t shmem = ((size_t)block.x + taps - 1) * sizeof(float);
  timer.run("conv1d_const", kl::dims({n, taps}), conv1d_const,
            [&] { conv1d_const<<<grid, block, shmem>>>(dX, dY, n, taps); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n, 0.0);
  for (long i = 0; i < n; ++i)
    for (int j = 0; j < taps; ++j) {
      const long g = i + j - taps / 2;
      if (g >= 0 && g < n) ref[(size_t)i] += (double)W[(size_t)j] * X[(size_t)g];
    }
  kl::Checker check("conv1d_const", kl::dims({n, taps}));
  check.compare("out", bufY.download(), ref, 1e-5);
  return check.finish();
}

// SOFTMAX_ROWS: Y[r][j] = exp(X[r][j] - max_j X[r][j]) / sum_j exp(X[r][j] - max_j X[r][j])
// for an M x N matrix (row-major). One block per row, three passes over the row (block-stride
// loops): its maximum, the sum of the exponentials, the normalised output. Each reduction
// runs first within warps (butterfly __shfl_xor_sync, every lane ends with the warp's value),
// then across the block's warps through 32 floats of shared memory. The block must be whole
// warps: the annotation allows bx % 32 == 0.
// Usage: softmax_rows [M [N]] [--time [REPS]]
#include "idioms.h"

#include <cfloat>

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's maximum (want_max) or sum of v, in every thread. `red` holds one value per
// warp; the first barrier keeps a previous call's readers ahead of this call's writers.
__device__ float block_reduce(float v, float *red, bool want_max) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = want_max ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : (want_max ? -FLT_MAX : 0.0f);
  return want_max ? warp_max(v) : warp_sum(v);
}

#pragma klaraptor kernel(softmax_rows) data(M=m, N=n) dim(1) grid(M) block(bx % 32 == 0) \
        profile(run="./softmax_rows {M} {N}", sizes=[128, 256, (512, 384), 512])
__global__ void softmax_rows(const float *X, float *Y, int m, int n) {
  __shared__ float red[32];
  KL_RECORD_BLOCK();
  const int r = blockIdx.x;
  if (r >= m) return; // the whole block
  const float *x = X + (size_t)r * n;
  float *y = Y + (size_t)r * n;
  float mx = -FLT_MAX;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_reduce(mx, red, true);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += expf(x[j] - mx);
  sum = block_reduce(sum, red, false);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < n; j += blockDim.x) y[j] = expf(x[j] - mx) * inv;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {2048, 2048});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  std::vector<float> X = kl::fill((size_t)m * n, 1, -8.0f, 8.0f);
  kl::DeviceBuffer<float> bufX(X), bufY((size_t)m * n);
  bufY.poison();
  const float *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  if (block.x % 32 != 0) {
    std::fprintf(stderr, "softmax_rows: the block size must be a multiple of 32\n");
    return 2;
  }
  dim3 grid((unsigned)m);
  timer.run("softmax_rows", kl::dims({m, n}), softmax_rows,
            [&] { softmax_rows<<<grid, block>>>(dX, dY, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)m * n);
  for (int r = 0; r < m; ++r) {
    const float *x = &X[(size_t)r * n];
    double mx = x[0], sum = 0.0;
    for (int j = 1; j < n; ++j) mx = std::max(mx, (double)x[j]);
    for (int j = 0; j < n; ++j) sum += std::exp((double)x[j] - mx);
    for (int j = 0; j < n; ++j) ref[(size_t)r * n + j] = std::exp((double)x[j] - mx) / sum;
  }
  kl::Checker check("softmax_rows", kl::dims({m, n}));
  check.compare("Y", bufY.download(), ref, 1e-5);
  return check.finish();
}

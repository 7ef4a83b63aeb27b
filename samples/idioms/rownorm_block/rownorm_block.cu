// ROWNORM_BLOCK: B[r][j] = A[r][j] / ||A[r]||_2 for an M x N matrix (row-major, B the same
// shape): every row scaled to unit length (a zero row stays zero). One block per row, two
// passes over the row by the same block: first the sum of squares (a block-stride loop,
// thread t taking columns t, t + bx, ...), reduced within each warp by a __shfl_xor_sync
// butterfly, the warps' sums through a small shared array (one float per warp, a
// __syncthreads), added by warp 0, which leaves 1 / norm in shared memory for the whole block
// (a second __syncthreads); then the scaled row, written by a second block-stride loop. The
// shuffles use the full warp mask, so the block must be whole warps: the annotation allows
// bx % 32 == 0 (32 shapes). Its study runs square matrices (4096 x 4096) and skinny ones,
// many short rows (65 536 x 64: 64 columns leave most of a large block idle) and a few long
// rows (256 x 65 536: fewer blocks than a GPU has SMs); the profile has one of each kind.
// Usage: rownorm_block [M [N]] [--time [REPS]]
#include "idioms.h"

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

#pragma klaraptor kernel(rownorm_block) data(M=m, N=n) dim(1) grid(M) block(bx % 32 == 0) \
        profile(run="./rownorm_block {M} {N}", \
                sizes=[128, 256, (512, 384), 512, (2048, 64), (64, 2048)])
__global__ void rownorm_block(const float *A, float *B, int m, int n) {
  __shared__ float part[32]; // one sum per warp (at most 32 warps)
  __shared__ float scale;    // 1 / norm, for the whole block
  KL_RECORD_BLOCK();
  const int r = blockIdx.x;
  if (r >= m) return; // the whole block: no thread is left at a barrier
  const float *a = A + (size_t)r * n;
  float *b = B + (size_t)r * n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) ss = fmaf(a[j], a[j], ss);
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float v = lane < warps ? part[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) scale = v > 0.0f ? 1.0f / sqrtf(v) : 0.0f;
  }
  __syncthreads();
  const float inv = scale;
  for (int j = threadIdx.x; j < n; j += blockDim.x) b[j] = a[j] * inv;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {2048, 2048});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  const size_t total = (size_t)m * n;
  std::vector<float> A = kl::fill(total, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  if (block.x % 32 != 0) {
    std::fprintf(stderr, "rownorm_block: the block size must be a multiple of 32\n");
    return 2;
  }
  dim3 grid((unsigned)m);
  timer.run("rownorm_block", kl::dims({m, n}), rownorm_block,
            [&] { rownorm_block<<<grid, block>>>(dA, dB, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < m; ++r) {
    const float *a = &A[(size_t)r * n];
    double ss = 0.0;
    for (int j = 0; j < n; ++j) ss += (double)a[j] * a[j];
    const double inv = ss > 0.0 ? 1.0 / std::sqrt(ss) : 0.0;
    for (int j = 0; j < n; ++j) ref[(size_t)r * n + j] = a[j] * inv;
  }
  kl::Checker check("rownorm_block", kl::dims({m, n}));
  check.compare("B", bufB.download(), ref, 1e-5);
  return check.finish();
}

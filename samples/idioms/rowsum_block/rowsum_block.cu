// ROWSUM_BLOCK: s[r] = sum_j A[r][j] for an M x N matrix (row-major). One block per row: the
// block's threads walk the row with a block-stride loop (thread t adds columns t, t + bx,
// ...), then combine their partial sums by a tree reduction in shared memory (halving the
// active threads at each step, a __syncthreads between steps). The shared array is static,
// sized for the largest block, and the tree needs a power-of-two block: the annotation
// allows the block sizes that divide 1024.
// Usage: rowsum_block [M [N]] [--time [REPS]]
#include "idioms.h"

constexpr int kMaxBlock = 1024;

#pragma klaraptor kernel(rowsum_block) data(M=m, N=n) dim(1) grid(M) \
        block(1024 % bx == 0) \
        profile(run="./rowsum_block {M} {N}", sizes=[128, 256, (512, 384), 512])
__global__ void rowsum_block(const float *A, float *s, int m, int n) {
  __shared__ float part[kMaxBlock];
  KL_RECORD_BLOCK();
  const int r = blockIdx.x;
  if (r >= m) return; // the whole block: no thread is left at a barrier
  const float *row = A + (size_t)r * n;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) acc += row[j];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) s[r] = part[0];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {2048, 2048});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  std::vector<float> A = kl::fill((size_t)m * n, 1, 0.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufS((size_t)m);
  bufS.poison();
  const float *dA = bufA.get();
  float *dS = bufS.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  if (kMaxBlock % block.x != 0) {
    std::fprintf(stderr, "rowsum_block: the block size must divide %d\n", kMaxBlock);
    return 2;
  }
  dim3 grid((unsigned)m);
  timer.run("rowsum_block", kl::dims({m, n}), rowsum_block,
            [&] { rowsum_block<<<grid, block>>>(dA, dS, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)m, 0.0);
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) ref[(size_t)r] += A[(size_t)r * n + j];
  kl::Checker check("rowsum_block", kl::dims({m, n}));
  check.compare("s", bufS.download(), ref, 1e-5);
  return check.finish();
}

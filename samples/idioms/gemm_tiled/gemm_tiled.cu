// GEMM_TILED: C = A B for an M x K matrix A and a K x N matrix B (row-major; C is M x N),
// through square tiles in shared memory. The block is T x T threads (T = bx = by) and
// computes the T x T tile of C whose rows start at blockIdx.y T and whose columns start at
// blockIdx.x T, one entry per thread. It walks K in steps of T: the block loads the T x T
// tile of A (its rows of C, columns k0 .. k0 + T) and the T x T tile of B (rows k0 .. k0 + T,
// its columns of C) into shared memory, one entry of each per thread (consecutive threads
// along a row: the loads coalesce; zeros past the matrices' edges), waits at __syncthreads,
// adds its T products, and waits again before the next loads overwrite the tiles. The tile
// edge is the block edge, so the block must be square (bx == by: 1 x 1 .. 32 x 32, 6 shapes),
// and the two tiles live in dynamic shared memory sized for the block at launch
// (2 T^2 floats: shmem(2 * bx * by * 4)).
// Usage: gemm_tiled [M [N [K]]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(gemm_tiled) data(M=m, N=n, K=k) dim(2) \
        grid(ceil(N, bx), ceil(M, by)) block(bx == by) shmem(2 * bx * by * 4) \
        profile(run="./gemm_tiled {M} {N} {K}", sizes=[64, 128, (256, 128, 192), 256])
__global__ void gemm_tiled(const float *A, const float *B, float *C, int m, int n, int k) {
  extern __shared__ float tiles[];
  KL_RECORD_BLOCK();
  const int t = blockDim.x; // == blockDim.y
  float *As = tiles, *Bs = tiles + t * t;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * t + ty, col = blockIdx.x * t + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += t) {
    As[ty * t + tx] = row < m && k0 + tx < k ? A[(size_t)row * k + k0 + tx] : 0.0f;
    Bs[ty * t + tx] = k0 + ty < k && col < n ? B[(size_t)(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int j = 0; j < t; ++j) acc += As[ty * t + j] * Bs[j * t + tx];
    __syncthreads();
  }
  if (row < m && col < n) C[(size_t)row * n + col] = acc;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N", "K"}, {1024, 1024, 1024});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1], k = (int)o.sizes[2];
  std::vector<float> A = kl::fill((size_t)m * k, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)k * n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufC((size_t)m * n);
  bufC.poison();
  const float *dA = bufA.get(), *dB = bufB.get();
  float *dC = bufC.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(16, 16));
  if (block.x != block.y || block.z != 1) {
    std::fprintf(stderr, "gemm_tiled: the block must be square (bx == by, bz == 1)\n");
    return 2;
  }
  dim3 grid(kl::cdiv(n, block.x), kl::cdiv(m, block.y));
  const size_t shmem = 2 * (size_t)block.x * block.y * sizeof(float);
  timer.run("gemm_tiled", kl::dims({m, n, k}), gemm_tiled,
            [&] { gemm_tiled<<<grid, block, shmem>>>(dA, dB, dC, m, n, k); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)m * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) {
      const double a = A[(size_t)i * k + p];
      const float *b = &B[(size_t)p * n];
      double *c = &ref[(size_t)i * n];
      for (int j = 0; j < n; ++j) c[j] += a * b[j];
    }
  kl::Checker check("gemm_tiled", kl::dims({m, n, k}));
  check.compare("C", bufC.download(), ref, 1e-4);
  return check.finish();
}

// BATCHED_GEMM: C_b = A_b B_b for b = 0 .. B-1, each A_b M x K, B_b K x N, C_b M x N
// (row-major, the batch's matrices one after the other). Many small products in one launch:
// a 2-D block over a product's output (x along the columns j, y along the rows i) and the
// batch on the grid's z axis, one thread per output element.
// Usage: batched_gemm [M [N [K [B]]]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(batched_gemm) data(M=m, N=n, K=k, B=batch) dim(2) \
        grid(ceil(N, bx), ceil(M, by), B) \
        profile(run="./batched_gemm {M} {N} {K} {B}", \
                sizes=[(32, 32, 32, 8), (64, 64, 32, 8), (64, 48, 64, 8), (48, 64, 32, 16), \
                       (64, 64, 64, 16)])
__global__ void batched_gemm(const float *A, const float *Bm, float *C, int m, int n, int k,
                             int batch) {
  KL_RECORD_BLOCK();
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z;
  if (i >= m || j >= n || b >= batch) return;
  const float *a = A + (size_t)b * m * k + (size_t)i * k;
  const float *bb = Bm + (size_t)b * k * n + j;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += a[p] * bb[(size_t)p * n];
  C[(size_t)b * m * n + (size_t)i * n + j] = acc;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N", "K", "B"}, {64, 64, 64, 512});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1], k = (int)o.sizes[2];
  const int batch = (int)o.sizes[3];
  if (batch > 65535) {
    std::fprintf(stderr, "batched_gemm: B must be at most 65535 (the grid's z extent)\n");
    return 2;
  }
  std::vector<float> A = kl::fill((size_t)batch * m * k, 1, -1.0f, 1.0f);
  std::vector<float> Bh = kl::fill((size_t)batch * k * n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(Bh), bufC((size_t)batch * m * n);
  bufC.poison();
  const float *dA = bufA.get(), *dB = bufB.get();
  float *dC = bufC.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(16, 16));
  dim3 grid(kl::cdiv(n, block.x), kl::cdiv(m, block.y), (unsigned)batch);
  timer.run("batched_gemm", kl::dims({m, n, k, batch}), batched_gemm,
            [&] { batched_gemm<<<grid, block>>>(dA, dB, dC, m, n, k, batch); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)batch * m * n, 0.0);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < k; ++p) {
        double a = A[(size_t)b * m * k + (size_t)i * k + p];
        const float *brow = &Bh[(size_t)b * k * n + (size_t)p * n];
        double *crow = &ref[(size_t)b * m * n + (size_t)i * n];
        for (int j = 0; j < n; ++j) crow[j] += a * brow[j];
      }
  kl::Checker check("batched_gemm", kl::dims({m, n, k, batch}));
  check.compare("C", bufC.download(), ref, 1e-4);
  return check.finish();
}

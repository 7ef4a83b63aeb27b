// SYRK: the symmetric rank-k update C = alpha * A A^T + beta * C, with A N x M and C N x N
// (row-major). One 2-D kernel, one thread per element of C (x along the columns j, y along
// the rows i); the whole of C is computed, both triangles.
// Usage: syrk [N [M]] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(syrk) data(N=n, M=m) dim(2) grid(ceil(N, bx), ceil(N, by)) \
        profile(run="./syrk {N} {M}", sizes=[64, 128, (256, 128), 256])
__global__ void syrk(const float *A, float *C, float alpha, float beta, int n, int m) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) {
    float acc = 0.0f;
    for (int k = 0; k < m; ++k) acc += A[(size_t)i * m + k] * A[(size_t)j * m + k];
    C[(size_t)i * n + j] = alpha * acc + beta * C[(size_t)i * n + j];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "M"}, {512, 512});
  const int n = (int)o.sizes[0], m = (int)o.sizes[1];
  const float alpha = 1.5f, beta = 1.2f;
  std::vector<float> A = kl::fill((size_t)n * m, 1, -1.0f, 1.0f);
  std::vector<float> C = kl::fill((size_t)n * n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufC(C);
  float *dA = bufA.get(), *dC = bufC.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(n, block.x), kl::cdiv(n, block.y));
  timer.run("syrk", kl::dims({n, m}), syrk,
            [&] { syrk<<<grid, block>>>(dA, dC, alpha, beta, n, m); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int k = 0; k < m; ++k) acc += (double)A[(size_t)i * m + k] * A[(size_t)j * m + k];
      ref[(size_t)i * n + j] = alpha * acc + beta * (double)C[(size_t)i * n + j];
    }
  kl::Checker check("syrk", kl::dims({n, m}));
  check.compare("C", bufC.download(), ref, 1e-4);
  return check.finish();
}

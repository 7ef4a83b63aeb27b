// GEMM: C = alpha * A * B + beta * C, with A NI x NK, B NK x NJ, C NI x NJ (row-major).
// One 2-D kernel, one thread per element of C (x along the columns j, y along the rows i).
// Usage: gemm [NI [NJ [NK]]] [--time [REPS]], or gemm --sizes NI,NJ,NK ... (one run per size)
#include "harness.h"

#pragma klaraptor kernel(gemm) data(NI=ni, NJ=nj, NK=nk) dim(2) \
        grid(ceil(NJ, bx), ceil(NI, by)) \
        profile(run="./gemm --sizes {SIZES}", sizes=[64, 128, (256, 128, 192), 256])
__global__ void gemm(const float *A, const float *B, float *C, float alpha, float beta, int ni,
                     int nj, int nk) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < ni && j < nj) {
    float acc = 0.0f;
    for (int k = 0; k < nk; ++k) acc += A[(size_t)i * nk + k] * B[(size_t)k * nj + j];
    C[(size_t)i * nj + j] = alpha * acc + beta * C[(size_t)i * nj + j];
  }
}

KL_MAIN(argc, argv) {
  kl::Options o = kl::parse(argc, argv, {"NI", "NJ", "NK"}, {512, 512, 512});
  const int ni = (int)o.sizes[0], nj = (int)o.sizes[1], nk = (int)o.sizes[2];
  const float alpha = 1.5f, beta = 1.2f;
  std::vector<float> A = kl::fill((size_t)ni * nk, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)nk * nj, 2, -1.0f, 1.0f);
  std::vector<float> C = kl::fill((size_t)ni * nj, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufC(C);
  float *dA = bufA.get(), *dB = bufB.get(), *dC = bufC.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(nj, block.x), kl::cdiv(ni, block.y));
  timer.run("gemm", kl::dims({ni, nj, nk}), gemm, [&] {
    gemm<<<grid, block>>>(dA, dB, dC, alpha, beta, ni, nj, nk);
  });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)ni * nj);
  std::vector<double> acc((size_t)nj);
  for (int i = 0; i < ni; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int k = 0; k < nk; ++k) {
      double a = A[(size_t)i * nk + k];
      for (int j = 0; j < nj; ++j) acc[(size_t)j] += a * B[(size_t)k * nj + j];
    }
    for (int j = 0; j < nj; ++j)
      ref[(size_t)i * nj + j] = alpha * acc[(size_t)j] + beta * (double)C[(size_t)i * nj + j];
  }
  kl::Checker check("gemm", kl::dims({ni, nj, nk}));
  check.compare("C", bufC.download(), ref, 1e-4);
  return check.finish();
}

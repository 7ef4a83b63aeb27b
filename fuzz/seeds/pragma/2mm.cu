// 2MM: D = alpha * A * B * C + beta * D, as two matrix products through T = alpha * A * B.
// A is NI x NK, B NK x NJ, T NI x NJ, C NJ x NL, D NI x NL (row-major). Two 2-D kernels, one
// thread per element of the product they compute (x along the columns, y along the rows).
// Usage: 2mm [NI [NJ [NK [NL]]]] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(mm2_t) data(NI=ni, NJ=nj, NK=nk) dim(2) \
        grid(ceil(NJ, bx), ceil(NI, by)) \
        profile(run="./2mm {NI} {NJ} {NK} {NJ}", sizes=[64, 128, (256, 128, 192), 256])
__global__ void mm2_t(const float *A, const float *B, float *T, float alpha, int ni, int nj,
                      int nk) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < ni && j < nj) {
    float acc = 0.0f;
    for (int k = 0; k < nk; ++k) acc += A[(size_t)i * nk + k] * B[(size_t)k * nj + j];
    T[(size_t)i * nj + j] = alpha * acc;
  }
}

#pragma klaraptor kernel(mm2_d) data(NI=ni, NL=nl, NJ=nj) dim(2) \
        grid(ceil(NL, bx), ceil(NI, by)) \
        profile(run="./2mm {NI} {NJ} {NJ} {NL}", sizes=[64, 128, (128, 256, 192), 256])
__global__ void mm2_d(const float *T, const float *C, float *D, float beta, int ni, int nl,
                      int nj) {
  KL_RECORD_BLOCK();
  int l = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < ni && l < nl) {
    float acc = 0.0f;
    for (int j = 0; j < nj; ++j) acc += T[(size_t)i * nj + j] * C[(size_t)j * nl + l];
    D[(size_t)i * nl + l] = beta * D[(size_t)i * nl + l] + acc;
  }
}

// out (n x m) = scale * X (n x p) * Y (p x m), in double.
static std::vector<double> product(const std::vector<double> &X, const std::vector<double> &Y,
                                   int n, int m, int p, double scale) {
  std::vector<double> out((size_t)n * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < p; ++k) {
      double x = scale * X[(size_t)i * p + k];
      for (int j = 0; j < m; ++j) out[(size_t)i * m + j] += x * Y[(size_t)k * m + j];
    }
  return out;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NI", "NJ", "NK", "NL"}, {512, 512, 512, 512});
  const int ni = (int)o.sizes[0], nj = (int)o.sizes[1], nk = (int)o.sizes[2],
            nl = (int)o.sizes[3];
  const float alpha = 1.5f, beta = 1.2f;
  std::vector<float> A = kl::fill((size_t)ni * nk, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)nk * nj, 2, -1.0f, 1.0f);
  std::vector<float> C = kl::fill((size_t)nj * nl, 3, -1.0f, 1.0f);
  std::vector<float> D = kl::fill((size_t)ni * nl, 4, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufC(C), bufD(D), bufT((size_t)ni * nj);
  bufT.poison();
  float *dA = bufA.get(), *dB = bufB.get(), *dC = bufC.get(), *dD = bufD.get(),
        *dT = bufT.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid_t(kl::cdiv(nj, block.x), kl::cdiv(ni, block.y));
  timer.run("mm2_t", kl::dims({ni, nj, nk}), mm2_t, [&] {
    mm2_t<<<grid_t, block>>>(dA, dB, dT, alpha, ni, nj, nk);
  });
  dim3 grid_d(kl::cdiv(nl, block.x), kl::cdiv(ni, block.y));
  timer.run("mm2_d", kl::dims({ni, nl, nj}), mm2_d, [&] {
    mm2_d<<<grid_d, block>>>(dT, dC, dD, beta, ni, nl, nj);
  });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> T = product(kl::widen(A), kl::widen(B), ni, nj, nk, alpha);
  std::vector<double> ref = product(T, kl::widen(C), ni, nl, nj, 1.0);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += beta * (double)D[i];
  kl::Checker check("2mm", kl::dims({ni, nj, nk, nl}));
  check.compare("T", bufT.download(), T, 1e-4);
  check.compare("D", bufD.download(), ref, 1e-4);
  return check.finish();
}

// 3MM: G = (A * B) * (C * D), as three matrix products E = A * B, F = C * D, G = E * F.
// A is NI x NK, B NK x NJ, C NJ x NM, D NM x NL; E is NI x NJ, F NJ x NL, G NI x NL
// (row-major). Three 2-D kernels, one thread per element of the product each computes (x
// along the columns, y along the rows).
// Usage: 3mm [NI [NJ [NK [NL [NM]]]]] [--time [REPS]]
#include "harness.h"

// out (rows x cols) = X (rows x inner) * Y (inner x cols), one element per thread.
__device__ __forceinline__ void product_element(const float *X, const float *Y, float *out,
                                                int rows, int cols, int inner) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) {
    float acc = 0.0f;
    for (int k = 0; k < inner; ++k) acc += X[(size_t)r * inner + k] * Y[(size_t)k * cols + c];
    out[(size_t)r * cols + c] = acc;
  }
}

#pragma klaraptor kernel(mm3_e) data(NI=ni, NJ=nj, NK=nk) dim(2) \
        grid(ceil(NJ, bx), ceil(NI, by)) \
        profile(run="./3mm {NI} {NJ} {NK} {NJ} {NK}", sizes=[64, 128, (256, 128, 192), 256])
__global__ void mm3_e(const float *A, const float *B, float *E, int ni, int nj, int nk) {
  KL_RECORD_BLOCK();
  product_element(A, B, E, ni, nj, nk);
}

#pragma klaraptor kernel(mm3_f) data(NJ=nj, NL=nl, NM=nm) dim(2) \
        grid(ceil(NL, bx), ceil(NJ, by)) \
        profile(run="./3mm {NJ} {NJ} {NM} {NL} {NM}", sizes=[64, 128, (128, 256, 192), 256])
__global__ void mm3_f(const float *C, const float *D, float *F, int nj, int nl, int nm) {
  KL_RECORD_BLOCK();
  product_element(C, D, F, nj, nl, nm);
}

#pragma klaraptor kernel(mm3_g) data(NI=ni, NL=nl, NJ=nj) dim(2) \
        grid(ceil(NL, bx), ceil(NI, by)) \
        profile(run="./3mm {NI} {NJ} {NJ} {NL} {NJ}", sizes=[64, 128, (192, 256, 128), 256])
__global__ void mm3_g(const float *E, const float *F, float *G, int ni, int nl, int nj) {
  KL_RECORD_BLOCK();
  product_element(E, F, G, ni, nl, nj);
}

// X (n x p) * Y (p x m), in double.
static std::vector<double> product(const std::vector<double> &X, const std::vector<double> &Y,
                                   int n, int m, int p) {
  std::vector<double> out((size_t)n * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < p; ++k) {
      double x = X[(size_t)i * p + k];
      for (int j = 0; j < m; ++j) out[(size_t)i * m + j] += x * Y[(size_t)k * m + j];
    }
  return out;
}

int main(int argc, char **argv) {
  kl::Options o =
      kl::parse(argc, argv, {"NI", "NJ", "NK", "NL", "NM"}, {512, 512, 512, 512, 512});
  const int ni = (int)o.sizes[0], nj = (int)o.sizes[1], nk = (int)o.sizes[2],
            nl = (int)o.sizes[3], nm = (int)o.sizes[4];
  std::vector<float> A = kl::fill((size_t)ni * nk, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)nk * nj, 2, -1.0f, 1.0f);
  std::vector<float> C = kl::fill((size_t)nj * nm, 3, -1.0f, 1.0f);
  std::vector<float> D = kl::fill((size_t)nm * nl, 4, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufC(C), bufD(D);
  kl::DeviceBuffer<float> bufE((size_t)ni * nj), bufF((size_t)nj * nl), bufG((size_t)ni * nl);
  bufE.poison();
  bufF.poison();
  bufG.poison();
  float *dA = bufA.get(), *dB = bufB.get(), *dC = bufC.get(), *dD = bufD.get();
  float *dE = bufE.get(), *dF = bufF.get(), *dG = bufG.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid_e(kl::cdiv(nj, block.x), kl::cdiv(ni, block.y));
  timer.run("mm3_e", kl::dims({ni, nj, nk}), mm3_e,
            [&] { mm3_e<<<grid_e, block>>>(dA, dB, dE, ni, nj, nk); });
  dim3 grid_f(kl::cdiv(nl, block.x), kl::cdiv(nj, block.y));
  timer.run("mm3_f", kl::dims({nj, nl, nm}), mm3_f,
            [&] { mm3_f<<<grid_f, block>>>(dC, dD, dF, nj, nl, nm); });
  dim3 grid_g(kl::cdiv(nl, block.x), kl::cdiv(ni, block.y));
  timer.run("mm3_g", kl::dims({ni, nl, nj}), mm3_g,
            [&] { mm3_g<<<grid_g, block>>>(dE, dF, dG, ni, nl, nj); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> E = product(kl::widen(A), kl::widen(B), ni, nj, nk);
  std::vector<double> F = product(kl::widen(C), kl::widen(D), nj, nl, nm);
  std::vector<double> G = product(E, F, ni, nl, nj);
  kl::Checker check("3mm", kl::dims({ni, nj, nk, nl, nm}));
  check.compare("E", bufE.download(), E, 1e-4);
  check.compare("F", bufF.download(), F, 1e-4);
  check.compare("G", bufG.download(), G, 1e-4);
  return check.finish();
}

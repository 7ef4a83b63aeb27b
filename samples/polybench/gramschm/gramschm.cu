// GRAMSCHM: the QR factorisation A = Q R of an M x N matrix (M >= N, row-major) by classical
// Gram-Schmidt. For k = 0..N-1, in a host loop:
//   R[k][k] = sqrt(sum_i A[i][k]^2)                     gs_norm: 1-D over i, each thread adds
//                                                        A[i][k]^2 into nrm[k] (atomicAdd)
//   Q[i][k] = A[i][k] / R[k][k]                          gs_q:    1-D over i
//   R[k][j] = sum_i Q[i][k] A[i][j];  A[i][j] -= Q[i][k] R[k][j]   (j > k)
//                                                        gs_update: 1-D over j, a column each
// A is overwritten. R below the diagonal stays zero.
// Usage: gramschm [M [N]] [--time [REPS]]    (M >= N)
#include "harness.h"

#pragma klaraptor kernel(gs_norm) data(M=m) dim(1) grid(ceil(M, bx)) \
        profile(run="./gramschm {M} {M}", sizes=[128, 256, 384, 512])
__global__ void gs_norm(const float *A, float *nrm, int m, int n, int k) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) {
    float a = A[(size_t)i * n + k];
    atomicAdd(&nrm[k], a * a);
  }
}

#pragma klaraptor kernel(gs_q) data(M=m) dim(1) grid(ceil(M, bx)) \
        profile(run="./gramschm {M} {M}", sizes=[128, 256, 384, 512])
__global__ void gs_q(const float *A, float *Q, float *R, const float *nrm, int m, int n, int k) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) {
    float r = sqrtf(nrm[k]);
    Q[(size_t)i * n + k] = A[(size_t)i * n + k] / r;
    if (i == 0) R[(size_t)k * n + k] = r;
  }
}

#pragma klaraptor kernel(gs_update) data(N=n, M=m) dim(1) grid(ceil(N, bx)) \
        profile(run="./gramschm {M} {N}", sizes=[128, 256, (384, 512), 512])
__global__ void gs_update(float *A, const float *Q, float *R, int m, int n, int k) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j > k && j < n) {
    float r = 0.0f;
    for (int i = 0; i < m; ++i) r += Q[(size_t)i * n + k] * A[(size_t)i * n + j];
    R[(size_t)k * n + j] = r;
    for (int i = 0; i < m; ++i) A[(size_t)i * n + j] -= Q[(size_t)i * n + k] * r;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {512, 512});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  if (m < n) {
    std::fprintf(stderr, "gramschm: M (%d) must be at least N (%d): N columns of length M\n", m, n);
    return 1;
  }
  // Columns well conditioned: uniform entries plus a dominant diagonal.
  std::vector<float> A = kl::fill((size_t)m * n, 1, -1.0f, 1.0f);
  for (int k = 0; k < n; ++k) A[(size_t)k * n + k] += (float)m;
  kl::DeviceBuffer<float> bufA(A), bufQ((size_t)m * n), bufR((size_t)n * n), bufnrm((size_t)n);
  bufQ.poison();
  bufR.zero();
  bufnrm.zero();
  float *dA = bufA.get(), *dQ = bufQ.get(), *dR = bufR.get(), *dnrm = bufnrm.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  const unsigned grid_m = kl::cdiv(m, block), grid_n = kl::cdiv(n, block);
  for (int k = 0; k < n; ++k) {
    timer.run("gs_norm", kl::dims({m}), gs_norm,
              [&] { gs_norm<<<grid_m, block>>>(dA, dnrm, m, n, k); });
    timer.run("gs_q", kl::dims({m}), gs_q,
              [&] { gs_q<<<grid_m, block>>>(dA, dQ, dR, dnrm, m, n, k); });
    timer.run("gs_update", kl::dims({n, m}), gs_update,
              [&] { gs_update<<<grid_n, block>>>(dA, dQ, dR, m, n, k); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> rA = kl::widen(A), rQ((size_t)m * n), rR((size_t)n * n, 0.0);
  for (int k = 0; k < n; ++k) {
    double s = 0;
    for (int i = 0; i < m; ++i) s += rA[(size_t)i * n + k] * rA[(size_t)i * n + k];
    double r = std::sqrt(s);
    rR[(size_t)k * n + k] = r;
    for (int i = 0; i < m; ++i) rQ[(size_t)i * n + k] = rA[(size_t)i * n + k] / r;
    for (int j = k + 1; j < n; ++j) {
      double d = 0;
      for (int i = 0; i < m; ++i) d += rQ[(size_t)i * n + k] * rA[(size_t)i * n + j];
      rR[(size_t)k * n + j] = d;
      for (int i = 0; i < m; ++i) rA[(size_t)i * n + j] -= rQ[(size_t)i * n + k] * d;
    }
  }
  kl::Checker check("gramschm", kl::dims({m, n}));
  check.compare("Q", bufQ.download(), rQ, 1e-4);
  check.compare("R", bufR.download(), rR, 1e-4);
  check.compare("A", bufA.download(), rA, 1e-4);
  return check.finish();
}

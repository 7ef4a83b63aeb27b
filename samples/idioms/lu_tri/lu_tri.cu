// LU_TRI: the Cholesky factor L of a symmetric positive definite N x N matrix (A = L L^T),
// right-looking, in place in the lower triangle of A (row-major; the upper triangle is left
// as it was). Step k (0..N-1) runs two kernels on the default stream, with no
// synchronisation between the steps:
//   chol_column: l_kk = sqrt(a_kk) into the vector D (A's diagonal keeps a_kk, which every
//                thread reads: no thread waits for another), l_ik = a_ik / l_kk for the rows
//                i > k;
//   chol_trailing: a_ij -= l_ik l_jk over the lower triangle of the trailing block,
//                k < j <= i < N: (N-1-k)(N-k)/2 entries, shrinking with the step; a 2-D grid
//                over the whole trailing square, the threads above the diagonal return.
// Both are launched at data size N at every step (k is an argument, not a data size).
// Usage: lu_tri [N] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(chol_column) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./lu_tri {N}", sizes=[64, 128, 192, 256])
__global__ void chol_column(float *A, float *D, int n, int k) {
  KL_RECORD_BLOCK();
  const int i = k + (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const float d = sqrtf(A[(size_t)k * n + k]);
  if (i == k)
    D[k] = d;
  else
    A[(size_t)i * n + k] /= d;
}

#pragma klaraptor kernel(chol_trailing) data(N=n) dim(2) grid(ceil(N, bx), ceil(N, by)) \
        profile(run="./lu_tri {N}", sizes=[64, 128, 192, 256])
__global__ void chol_trailing(float *A, int n, int k) {
  KL_RECORD_BLOCK();
  const int j = k + 1 + (int)(blockIdx.x * blockDim.x + threadIdx.x);
  const int i = k + 1 + (int)(blockIdx.y * blockDim.y + threadIdx.y);
  if (i >= n || j > i) return;
  A[(size_t)i * n + j] -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1024});
  const int n = (int)o.sizes[0];
  // Symmetric, entries in [-1, 1), the diagonal N + 1: positive definite (diagonally
  // dominant).
  std::vector<float> A = kl::fill((size_t)n * n, 1, -1.0f, 1.0f);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) A[(size_t)j * n + i] = A[(size_t)i * n + j];
    A[(size_t)i * n + i] = (float)(n + 1);
  }
  kl::DeviceBuffer<float> buf(A), bufD((size_t)n);
  bufD.poison();
  float *dA = buf.get(), *dD = bufD.get();

  kl::Timer timer(o);
  dim3 b1 = kl::block_shape(dim3(256), 0), b2 = kl::block_shape(dim3(16, 16), 1);
  dim3 g1(kl::cdiv(n, b1.x)), g2(kl::cdiv(n, b2.x), kl::cdiv(n, b2.y));
  for (int k = 0; k < n; ++k) {
    timer.run("chol_column", kl::dims({n}), chol_column,
              [&] { chol_column<<<g1, b1>>>(dA, dD, n, k); });
    timer.run("chol_trailing", kl::dims({n}), chol_trailing,
              [&] { chol_trailing<<<g2, b2>>>(dA, n, k); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  // The reference: the same right-looking factorisation in double. The whole of A is
  // compared: L below the diagonal, the diagonal's last values a_kk and the upper triangle
  // as given; and D, L's diagonal.
  std::vector<double> R(A.begin(), A.end()), RD((size_t)n);
  for (int k = 0; k < n; ++k) {
    const double d = std::sqrt(R[(size_t)k * n + k]);
    RD[(size_t)k] = d;
    for (int i = k + 1; i < n; ++i) R[(size_t)i * n + k] /= d;
    for (int i = k + 1; i < n; ++i)
      for (int j = k + 1; j <= i; ++j)
        R[(size_t)i * n + j] -= R[(size_t)i * n + k] * R[(size_t)j * n + k];
  }
  kl::Checker check("lu_tri", kl::dims({n}));
  check.compare("A (L below the diagonal)", buf.download(), R, 1e-4);
  check.compare("D (the diagonal of L)", bufD.download(), RD, 1e-4);
  return check.finish();
}

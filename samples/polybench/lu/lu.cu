// LU: the LU factorisation of an N x N matrix (row-major) in place, without pivoting (the
// matrix is diagonally dominant). For k = 0..N-1, in a host loop:
//   A[k][j] /= A[k][k]                  (j > k)          lu_scale:  1-D over j
//   A[i][j] -= A[i][k] * A[k][j]        (i > k, j > k)   lu_update: 2-D over (j, i)
// Afterwards the upper triangle holds U with a unit diagonal (implicit) and the lower
// triangle with the diagonal holds L: A = L U.
// Usage: lu [N] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(lu_scale) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./lu {N}", sizes=[64, 128, 192, 256])
__global__ void lu_scale(float *A, int n, int k) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j > k && j < n) A[(size_t)k * n + j] /= A[(size_t)k * n + k];
}

#pragma klaraptor kernel(lu_update) data(N=n) dim(2) grid(ceil(N, bx), ceil(N, by)) \
        profile(run="./lu {N}", sizes=[64, 128, 192, 256])
__global__ void lu_update(float *A, int n, int k) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i > k && j > k && i < n && j < n)
    A[(size_t)i * n + j] -= A[(size_t)i * n + k] * A[(size_t)k * n + j];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {512});
  const int n = (int)o.sizes[0];
  const size_t nn = (size_t)n * n;
  std::vector<float> A = kl::fill(nn, 1, -1.0f, 1.0f);
  for (int k = 0; k < n; ++k) A[(size_t)k * n + k] += (float)n;
  kl::DeviceBuffer<float> bufA(A);
  float *dA = bufA.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  dim3 block2(32, 8);
  dim3 grid2(kl::cdiv(n, block2.x), kl::cdiv(n, block2.y));
  for (int k = 0; k < n; ++k) {
    timer.run("lu_scale", kl::dims({n}), lu_scale,
              [&] { lu_scale<<<kl::cdiv(n, block), block>>>(dA, n, k); });
    timer.run("lu_update", kl::dims({n}), lu_update,
              [&] { lu_update<<<grid2, block2>>>(dA, n, k); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> r = kl::widen(A);
  for (int k = 0; k < n; ++k) {
    for (int j = k + 1; j < n; ++j) r[(size_t)k * n + j] /= r[(size_t)k * n + k];
    for (int i = k + 1; i < n; ++i) {
      double l = r[(size_t)i * n + k];
      for (int j = k + 1; j < n; ++j) r[(size_t)i * n + j] -= l * r[(size_t)k * n + j];
    }
  }
  kl::Checker check("lu", kl::dims({n}));
  check.compare("LU", bufA.download(), r, 1e-4);
  return check.finish();
}

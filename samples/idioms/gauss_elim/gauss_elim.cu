// GAUSS_ELIM: solves A x = b (N x N, diagonally dominant: no pivoting needed) by Gaussian
// elimination on the GPU and back substitution on the host. The augmented matrix [A | b]
// (N rows of N + 1 floats) is reduced to upper-triangular form in N - 1 steps; step t runs two
// kernels, each followed by cudaDeviceSynchronize:
//   ge_pivot_col: the multipliers m_i = a_it / a_tt of the rows i > t, stored in column t;
//   ge_eliminate: a_ij -= m_i a_tj over the trailing block, rows t+1..N-1 and columns
//                 t+1..N (b included): (N-1-t) x (N-t) entries, shrinking with the step.
// Both are launched at the same data size N at every step (the step t is an argument, not a
// data size), so a launch key's launches differ in work: the first step's is the largest.
// The grids are those of the annotations' formulas (of N); threads outside the step's
// trailing block return at once.
// Usage: gauss_elim [N] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(ge_pivot_col) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./gauss_elim {N}", sizes=[64, 128, 192, 256])
__global__ void ge_pivot_col(float *Ab, int n, int t) {
  KL_RECORD_BLOCK();
  const int i = t + 1 + (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const size_t w = (size_t)n + 1;
  Ab[(size_t)i * w + t] /= Ab[(size_t)t * w + t];
}

#pragma klaraptor kernel(ge_eliminate) data(N=n) dim(2) grid(ceil(N, bx), ceil(N, by)) \
        profile(run="./gauss_elim {N}", sizes=[64, 128, 192, 256])
__global__ void ge_eliminate(float *Ab, int n, int t) {
  KL_RECORD_BLOCK();
  const int j = t + 1 + (int)(blockIdx.x * blockDim.x + threadIdx.x); // column, up to n (b)
  const int i = t + 1 + (int)(blockIdx.y * blockDim.y + threadIdx.y); // row
  if (i >= n || j > n) return;
  const size_t w = (size_t)n + 1;
  Ab[(size_t)i * w + j] -= Ab[(size_t)i * w + t] * Ab[(size_t)t * w + j];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1024}, 2);
  const int n = (int)o.sizes[0];
  const size_t w = (size_t)n + 1;
  // Entries in [-1, 1), the diagonal raised to N + 1: strictly diagonally dominant.
  std::vector<float> Ab = kl::fill((size_t)n * w, 1, -1.0f, 1.0f);
  for (int i = 0; i < n; ++i) Ab[(size_t)i * w + i] = (float)(n + 1);
  kl::DeviceBuffer<float> buf(Ab);
  float *dAb = buf.get();

  kl::Timer timer(o);
  dim3 b1 = kl::block_shape(dim3(256), 0), b2 = kl::block_shape(dim3(32, 8), 1);
  dim3 g1(kl::cdiv(n, b1.x)), g2(kl::cdiv(n, b2.x), kl::cdiv(n, b2.y));
  for (int t = 0; t + 1 < n; ++t) {
    timer.run("ge_pivot_col", kl::dims({n}), ge_pivot_col,
              [&] { ge_pivot_col<<<g1, b1>>>(dAb, n, t); });
    KL_CHECK(cudaDeviceSynchronize());
    timer.run("ge_eliminate", kl::dims({n}), ge_eliminate,
              [&] { ge_eliminate<<<g2, b2>>>(dAb, n, t); });
    KL_CHECK(cudaDeviceSynchronize());
  }
  if (timer.on()) {
    timer.report();
    return 0;
  }

  // Back substitution on the GPU's upper triangle, in double.
  std::vector<float> U = buf.download();
  std::vector<float> x((size_t)n);
  for (int i = n - 1; i >= 0; --i) {
    double s = U[(size_t)i * w + n];
    for (int j = i + 1; j < n; ++j) s -= (double)U[(size_t)i * w + j] * x[(size_t)j];
    x[(size_t)i] = (float)(s / U[(size_t)i * w + i]);
  }
  // The reference: the same elimination and substitution in double.
  std::vector<double> R(Ab.begin(), Ab.end()), xr((size_t)n);
  for (int t = 0; t + 1 < n; ++t)
    for (int i = t + 1; i < n; ++i) {
      const double m = R[(size_t)i * w + t] / R[(size_t)t * w + t];
      R[(size_t)i * w + t] = m;
      for (int j = t + 1; j <= n; ++j) R[(size_t)i * w + j] -= m * R[(size_t)t * w + j];
    }
  for (int i = n - 1; i >= 0; --i) {
    double s = R[(size_t)i * w + n];
    for (int j = i + 1; j < n; ++j) s -= R[(size_t)i * w + j] * xr[(size_t)j];
    xr[(size_t)i] = s / R[(size_t)i * w + i];
  }
  kl::Checker check("gauss_elim", kl::dims({n}));
  check.compare("[U | c] (multipliers below the diagonal)", U, R, 1e-4);
  check.compare("x", x, xr, 1e-4);
  return check.finish();
}

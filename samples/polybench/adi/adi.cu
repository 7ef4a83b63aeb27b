// ADI: T steps of an alternating-direction implicit scheme on an N x N field X (row-major).
// Each half-step solves N independent symmetric tridiagonal systems, first along every row,
// then along every column. Along a line x_0..x_{N-1} (a row or a column of X), the system has
// diagonal B and the coupling between neighbours l-1 and l equal to A at position l:
//   A_l x_{l-1} + B_l x_l + A_{l+1} x_{l+1} = X_l.
// It is solved by Gaussian elimination without pivoting (B dominates: B in [4, 5), A in
// [0, 1)), keeping the eliminated diagonal in D:
//   forward:  D_0 = B_0;  D_l = B_l - A_l^2 / D_{l-1};  X_l -= (A_l / D_{l-1}) X_{l-1}
//   backward: X_{N-1} /= D_{N-1};  X_l = (X_l - A_{l+1} X_{l+1}) / D_l.
// Row sweeps are 1-D kernels with one thread per row, walking its row (adi_row_fwd,
// adi_row_back). Column sweeps are sequential along i, so a host loop launches one 1-D
// kernel per i, one thread per column (adi_col_fwd for i = 0..N-1, adi_col_back for
// i = N-1..0).
// Usage: adi [N] [--steps T] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(adi_row_fwd) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./adi {N}", sizes=[128, 256, 384, 512])
__global__ void adi_row_fwd(const float *A, const float *B, float *D, float *X, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    size_t row = (size_t)i * n;
    float d = B[row], x = X[row];
    D[row] = d;
    for (int j = 1; j < n; ++j) {
      float a = A[row + j];
      float f = a / d;
      d = B[row + j] - f * a;
      x = X[row + j] - f * x;
      D[row + j] = d;
      X[row + j] = x;
    }
  }
}

#pragma klaraptor kernel(adi_row_back) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./adi {N}", sizes=[128, 256, 384, 512])
__global__ void adi_row_back(const float *A, const float *D, float *X, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    size_t row = (size_t)i * n;
    float x = X[row + n - 1] / D[row + n - 1];
    X[row + n - 1] = x;
    for (int j = n - 2; j >= 0; --j) {
      x = (X[row + j] - A[row + j + 1] * x) / D[row + j];
      X[row + j] = x;
    }
  }
}

#pragma klaraptor kernel(adi_col_fwd) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./adi {N}", sizes=[128, 256, 384, 512])
__global__ void adi_col_fwd(const float *A, const float *B, float *D, float *X, int n, int i) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) {
    size_t at = (size_t)i * n + j;
    if (i == 0) {
      D[at] = B[at];
    } else {
      float a = A[at];
      float f = a / D[at - n];
      D[at] = B[at] - f * a;
      X[at] -= f * X[at - n];
    }
  }
}

#pragma klaraptor kernel(adi_col_back) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./adi {N}", sizes=[128, 256, 384, 512])
__global__ void adi_col_back(const float *A, const float *D, float *X, int n, int i) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) {
    size_t at = (size_t)i * n + j;
    if (i == n - 1)
      X[at] /= D[at];
    else
      X[at] = (X[at] - A[at + n] * X[at + n]) / D[at];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1024}, 1, 4);
  const int n = (int)o.sizes[0], steps = (int)o.steps;
  const size_t nn = (size_t)n * n;
  std::vector<float> A = kl::fill(nn, 1, 0.0f, 1.0f), B = kl::fill(nn, 2, 4.0f, 5.0f),
                     X = kl::fill(nn, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufX(X), bufD(nn);
  bufD.poison();
  float *dA = bufA.get(), *dB = bufB.get(), *dX = bufX.get(), *dD = bufD.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  const unsigned grid = kl::cdiv(n, block);
  const std::string size = kl::dims({n});
  for (int t = 0; t < steps; ++t) {
    timer.run("adi_row_fwd", size, adi_row_fwd,
              [&] { adi_row_fwd<<<grid, block>>>(dA, dB, dD, dX, n); });
    timer.run("adi_row_back", size, adi_row_back,
              [&] { adi_row_back<<<grid, block>>>(dA, dD, dX, n); });
    for (int i = 0; i < n; ++i)
      timer.run("adi_col_fwd", size, adi_col_fwd,
                [&] { adi_col_fwd<<<grid, block>>>(dA, dB, dD, dX, n, i); });
    for (int i = n - 1; i >= 0; --i)
      timer.run("adi_col_back", size, adi_col_back,
                [&] { adi_col_back<<<grid, block>>>(dA, dD, dX, n, i); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  // The same scheme in double; (stride, step) walk a row (1, n) or a column (n, 1).
  std::vector<double> rX = kl::widen(X), rD(nn);
  auto solve = [&](size_t first, size_t stride) {
    rD[first] = B[first];
    for (int l = 1; l < n; ++l) {
      size_t at = first + (size_t)l * stride;
      double f = A[at] / rD[at - stride];
      rD[at] = B[at] - f * A[at];
      rX[at] -= f * rX[at - stride];
    }
    size_t last = first + (size_t)(n - 1) * stride;
    rX[last] /= rD[last];
    for (int l = n - 2; l >= 0; --l) {
      size_t at = first + (size_t)l * stride;
      rX[at] = (rX[at] - A[at + stride] * rX[at + stride]) / rD[at];
    }
  };
  for (int t = 0; t < steps; ++t) {
    for (int i = 0; i < n; ++i) solve((size_t)i * n, 1);
    for (int j = 0; j < n; ++j) solve((size_t)j, (size_t)n);
  }
  kl::Checker check("adi", kl::dims({n, steps}));
  check.compare("X", bufX.download(), rX, 1e-4);
  check.compare("D", bufD.download(), rD, 1e-5);
  return check.finish();
}

// JACOBI2D: T steps of the five-point Jacobi stencil on an N x N matrix (row-major). Per step:
//   B[i][j] = 0.2 (A[i][j] + A[i][j-1] + A[i][j+1] + A[i-1][j] + A[i+1][j])  (interior);
//   then A[i][j] = B[i][j] on the interior.
// Two 2-D kernels per step (one thread per element, x along j, y along i), launched in a
// host loop. Annotated with the original KLARAPTOR pragmas.
// Usage: jacobi2d [N] [--steps T] [--time [REPS]]
#include "harness.h"

#pragma kernel_info_size_param_idx_jacobi2d_step = 2;
#pragma kernel_info_dim_jacobi2d_step = 2;
__global__ void jacobi2d_step(const float *A, float *B, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= 1 && i < n - 1 && j >= 1 && j < n - 1) {
    size_t at = (size_t)i * n + j;
    B[at] = 0.2f * (A[at] + A[at - 1] + A[at + 1] + A[at - n] + A[at + n]);
  }
}

#pragma kernel_info_size_param_idx_jacobi2d_copy = 2;
#pragma kernel_info_dim_jacobi2d_copy = 2;
__global__ void jacobi2d_copy(float *A, const float *B, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= 1 && i < n - 1 && j >= 1 && j < n - 1) A[(size_t)i * n + j] = B[(size_t)i * n + j];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1024}, 1, 20);
  const int n = (int)o.sizes[0], steps = (int)o.steps;
  const size_t nn = (size_t)n * n;
  std::vector<float> A = kl::fill(nn, 1, -1.0f, 1.0f), B = kl::fill(nn, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B);
  float *dA = bufA.get(), *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(n, block.x), kl::cdiv(n, block.y));
  for (int t = 0; t < steps; ++t) {
    timer.run("jacobi2d_step", kl::dims({n}), jacobi2d_step,
              [&] { jacobi2d_step<<<grid, block>>>(dA, dB, n); });
    timer.run("jacobi2d_copy", kl::dims({n}), jacobi2d_copy,
              [&] { jacobi2d_copy<<<grid, block>>>(dA, dB, n); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> rA = kl::widen(A), rB = kl::widen(B);
  for (int t = 0; t < steps; ++t) {
    for (int i = 1; i < n - 1; ++i)
      for (int j = 1; j < n - 1; ++j) {
        size_t at = (size_t)i * n + j;
        rB[at] = 0.2 * (rA[at] + rA[at - 1] + rA[at + 1] + rA[at - (size_t)n] + rA[at + (size_t)n]);
      }
    for (int i = 1; i < n - 1; ++i)
      for (int j = 1; j < n - 1; ++j) rA[(size_t)i * n + j] = rB[(size_t)i * n + j];
  }
  kl::Checker check("jacobi2d", kl::dims({n, steps}));
  check.compare("A", bufA.download(), rA, 1e-4);
  check.compare("B", bufB.download(), rB, 1e-4);
  return check.finish();
}

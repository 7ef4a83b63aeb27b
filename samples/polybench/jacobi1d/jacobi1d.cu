// JACOBI1D: T steps of the three-point Jacobi stencil on a vector of N. Per step:
//   B[i] = (A[i-1] + A[i] + A[i+1]) / 3   (0 < i < N-1);   then A[i] = B[i] on the same range.
// Two 1-D kernels per step (one thread per element), launched in a host loop.
// Annotated with the original KLARAPTOR pragmas.
// Usage: jacobi1d [N] [--steps T] [--time [REPS]]
#include "harness.h"

#pragma kernel_info_size_param_idx_jacobi1d_step = 2;
#pragma kernel_info_dim_jacobi1d_step = 1;
__global__ void jacobi1d_step(const float *A, float *B, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 1 && i < n - 1) B[i] = (A[i - 1] + A[i] + A[i + 1]) * (1.0f / 3.0f);
}

#pragma kernel_info_size_param_idx_jacobi1d_copy = 2;
#pragma kernel_info_dim_jacobi1d_copy = 1;
__global__ void jacobi1d_copy(float *A, const float *B, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 1 && i < n - 1) A[i] = B[i];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 22}, 1, 20);
  const int n = (int)o.sizes[0], steps = (int)o.steps;
  std::vector<float> A = kl::fill((size_t)n, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B);
  float *dA = bufA.get(), *dB = bufB.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  const unsigned grid = kl::cdiv(n, block);
  for (int t = 0; t < steps; ++t) {
    timer.run("jacobi1d_step", kl::dims({n}), jacobi1d_step,
              [&] { jacobi1d_step<<<grid, block>>>(dA, dB, n); });
    timer.run("jacobi1d_copy", kl::dims({n}), jacobi1d_copy,
              [&] { jacobi1d_copy<<<grid, block>>>(dA, dB, n); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> rA = kl::widen(A), rB = kl::widen(B);
  for (int t = 0; t < steps; ++t) {
    for (int i = 1; i < n - 1; ++i)
      rB[(size_t)i] = (rA[(size_t)i - 1] + rA[(size_t)i] + rA[(size_t)i + 1]) / 3.0;
    for (int i = 1; i < n - 1; ++i) rA[(size_t)i] = rB[(size_t)i];
  }
  kl::Checker check("jacobi1d", kl::dims({n, steps}));
  check.compare("A", bufA.download(), rA, 1e-4);
  check.compare("B", bufB.download(), rB, 1e-4);
  return check.finish();
}

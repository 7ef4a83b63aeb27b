// TRANSPOSE_NAIVE: B = A^T for an R x C matrix A (row-major; B is C x R), one thread per
// element and no staging: thread (c, r) reads A[r][c] (consecutive threads in x read
// consecutive addresses) and writes B[c][r] (consecutive threads in x write R floats apart).
// Which of the two accesses a block shape serves well is the whole question of this kernel.
// Usage: transpose_naive [R [C]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(transpose_naive) data(R=rows, C=cols) dim(2) \
        grid(ceil(C, bx), ceil(R, by)) \
        profile(run="./transpose_naive {R} {C}", sizes=[64, 128, (256, 192), 256])
__global__ void transpose_naive(const float *A, float *B, int rows, int cols) {
  KL_RECORD_BLOCK();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) B[(size_t)c * rows + r] = A[(size_t)r * cols + c];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"R", "C"}, {2048, 2048});
  const int rows = (int)o.sizes[0], cols = (int)o.sizes[1];
  const size_t total = (size_t)rows * cols;
  std::vector<float> A = kl::fill(total, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 8));
  dim3 grid(kl::cdiv(cols, block.x), kl::cdiv(rows, block.y));
  timer.run("transpose_naive", kl::dims({rows, cols}), transpose_naive,
            [&] { transpose_naive<<<grid, block>>>(dA, dB, rows, cols); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[(size_t)c * rows + r] = A[(size_t)r * cols + c];
  kl::Checker check("transpose_naive", kl::dims({rows, cols}));
  check.compare("B", bufB.download(), ref, 0.0);
  return check.finish();
}

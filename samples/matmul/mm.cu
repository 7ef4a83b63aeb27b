#include "kernels.h"

// klaraptor's pragma: the data size is the argument named n, the kernel is 2-D, so the
// grid is ceil(N / bx) x ceil(N / by); to profile it, run the program at n = 64 … 256.
#pragma klaraptor kernel(mm) data(N=n) dim(2) \
    profile(run="./matmul {N}", sizes=[64, 96, 128, 192, 256])

__global__ void mm(const float *A, const float *B, float *C, int n) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < n && col < n) {
    float acc = 0.0f;
    for (int k = 0; k < n; ++k)
      acc += A[row * n + k] * B[k * n + col];
    C[row * n + col] = acc;
  }
}

void gpu_mm(const float *A, const float *B, float *C, int n) {
  dim3 block(32, 8);
  dim3 grid((n + block.x - 1) / block.x, (n + block.y - 1) / block.y);
  mm<<<grid, block>>>(A, B, C, n);
  CHECK(cudaGetLastError());
}

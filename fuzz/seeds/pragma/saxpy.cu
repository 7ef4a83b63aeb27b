#include "kernels.h"

// klaraptor's own pragma: the data size is the argument named n, 1-D blocks of at least
// one warp.
// The program's argument is the matrix order n; saxpy runs on N = n * n elements.
#pragma klaraptor kernel(saxpy) data(N=n) dim(1) grid(ceil(N, bx)) block(bx >= 32) \
    profile(run="./matmul {N}", sizes=[64, 128, 192, 256])

__global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + y[i];
}

void gpu_saxpy(float a, const float *x, float *y, int n) {
  int block = 256;
  saxpy<<<(n + block - 1) / block, block>>>(a, x, y, n);
  CHECK(cudaGetLastError());
}

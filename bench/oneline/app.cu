// bench/oneline/app.cu: a program annotated only with one-line pragmas (issue 40), for the
// GPU check bench/oneline/run.sh.  Usage: ./app [n] [w] [h] [reps]
//
// saxpy has no bounds check and is launched with n / 256 blocks of 256 (its size lives only
// in the grid); scale2d has none either and is launched on w / 16 x h / 16 tiles of 16 x 16.
// Both are correct for a block only when it divides the threads launched exactly: what the
// one-line pragma's exact-cover rule guarantees. The program checks every result.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#pragma klaraptor kernel(saxpy)
__global__ void saxpy(float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = a * x[i] + y[i];
}

#pragma klaraptor kernel(scale2d) dim(2)
__global__ void scale2d(float *m, int pitch) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  m[(size_t)y * pitch + x] += 1.0f;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1 << 24;
  int w = argc > 2 ? std::atoi(argv[2]) : 4096;
  int h = argc > 3 ? std::atoi(argv[3]) : 4096;
  int reps = argc > 4 ? std::atoi(argv[4]) : 200;
  n -= n % 256;
  w -= w % 16;
  h -= h % 16;
  float *x, *y, *m;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess || cudaMalloc(&y, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&m, (size_t)w * h * sizeof(float)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  float *hx = (float *)std::malloc(n * sizeof(float)), *hy = (float *)std::malloc(n * sizeof(float));
  float *hm = (float *)std::malloc((size_t)w * h * sizeof(float));
  for (int i = 0; i < n; i++) { hx[i] = 1.0f; hy[i] = 0.0f; }
  for (size_t i = 0; i < (size_t)w * h; i++) hm[i] = 0.0f;
  cudaMemcpy(x, hx, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(y, hy, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(m, hm, (size_t)w * h * sizeof(float), cudaMemcpyHostToDevice);
  for (int r = 0; r < reps; r++) {
    saxpy<<<n / 256, 256>>>(1.0f, x, y); // the program's own shape: 256
    dim3 b(16, 16), g(w / 16, h / 16);
    scale2d<<<g, b>>>(m, w);
  }
  cudaError_t err = cudaDeviceSynchronize();
  cudaMemcpy(hy, y, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(hm, m, (size_t)w * h * sizeof(float), cudaMemcpyDeviceToHost);
  long bad = 0;
  for (int i = 0; i < n; i++) bad += hy[i] != (float)reps;
  for (size_t i = 0; i < (size_t)w * h; i++) bad += hm[i] != (float)reps;
  std::printf("n=%d w=%d h=%d reps=%d: %s, %ld wrong values (%s)\n", n, w, h, reps,
              bad == 0 && err == cudaSuccess ? "correct" : "WRONG", bad, cudaGetErrorString(err));
  return bad == 0 && err == cudaSuccess ? 0 : 1;
}

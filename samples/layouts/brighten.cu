// A kernel in a .cu file that another .cu includes (`#include "brighten.cu"`), as older CUDA
// code often does; this file is not compiled on its own. Its annotation sits here, beside
// the kernel: klaraptor-cc reads it from the including file's compile.
#pragma once
#include "layouts.h"

// out = gain * in + bias over the n pixels of an image, one thread a pixel.
#pragma klaraptor kernel(brighten) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./layouts {N} 1", sizes=[4096, 16384, 36864, 65536])
__global__ void brighten(const float *in, float *out, float gain, float bias, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = gain * in[i] + bias;
}

static void gpu_brighten(const float *in, float *out, float gain, float bias, int n) {
  const int block = 256;
  brighten<<<(n + block - 1) / block, block>>>(in, out, gain, bias, n);
  CHECK(cudaGetLastError());
}

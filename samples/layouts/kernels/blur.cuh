// A kernel in a header (kernels/blur.cuh), annotated here beside its definition. The
// including file finds it with -Ikernels, and it finds layouts.h with -I.
#pragma once
#include "layouts.h"

// A 3x3 box blur of a w x h row-major image, edges clamped; one thread a pixel, x along
// the row.
#pragma klaraptor kernel(blur3) data(W=w, H=h) dim(2) grid(ceil(W, bx), ceil(H, by)) \
        profile(run="./layouts {W} {H}", sizes=[64, 128, (256, 192), 256])
__global__ void blur3(const float *in, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h)
    return;
  float acc = 0.0f;
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
      int xx = min(max(x + dx, 0), w - 1);
      int yy = min(max(y + dy, 0), h - 1);
      acc += in[(size_t)yy * w + xx];
    }
  out[(size_t)y * w + x] = acc / 9.0f;
}

static void gpu_blur3(const float *in, float *out, int w, int h) {
  dim3 block(32, 8);
  dim3 grid((w + block.x - 1) / block.x, (h + block.y - 1) / block.y);
  blur3<<<grid, block>>>(in, out, w, h);
  CHECK(cudaGetLastError());
}

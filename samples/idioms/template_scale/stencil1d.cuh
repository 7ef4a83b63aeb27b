// The kernel template of template_scale, in a header as templates usually are: its
// annotation sits here, beside the kernel, and klaraptor-cc reads it from the including
// file's compile (an annotation in an included file).
#pragma once
#include "idioms.h"

constexpr int kMaxRadius = 16;
__constant__ float kWeights[2 * kMaxRadius + 1];

#pragma klaraptor kernel(stencil1d) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./template_scale {N} {N}", sizes=[65536, 131072, 196608, 262144])
template <int R> __global__ void stencil1d(const float *in, float *out, int n) {
  static_assert(R <= kMaxRadius, "radius beyond the constant weights");
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
#pragma unroll
  for (int k = -R; k <= R; ++k) {
    int at = i + k;
    at = at < 0 ? 0 : at >= n ? n - 1 : at;
    acc += kWeights[k + R] * in[at];
  }
  out[i] = acc;
}

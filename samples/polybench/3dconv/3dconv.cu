// 3DCONV: a 3 x 3 x 3 convolution of an NI x NJ x NK array (row-major, k fastest). Every
// interior element B[i][j][k] (1 <= i < NI-1, and likewise j, k) is sum over a, b, c in
// {0,1,2} of w(a, b, c) * A[i-1+a][j-1+b][k-1+c]; the border of B stays zero. One 2-D kernel
// computes one plane i (x along k, y along j), launched for each interior plane in a host
// loop.
// Usage: 3dconv [NI [NJ [NK]]] [--time [REPS]]
#include "harness.h"

// The convolution weights: distinct, mixed signs, summing to a moderate value.
__host__ __device__ constexpr float weight(int a, int b, int c) {
  return 0.02f * (float)(9 * a + 3 * b + c + 1) * ((a + b + c) % 2 ? -1.0f : 1.0f);
}

#pragma klaraptor kernel(conv3d) data(NK=nk, NJ=nj) dim(2) \
        grid(ceil(NK, bx), ceil(NJ, by)) \
        profile(run="./3dconv {NJ} {NJ} {NK}", sizes=[32, 64, (96, 128), 128])
__global__ void conv3d(const float *A, float *B, int ni, int nj, int nk, int i) {
  KL_RECORD_BLOCK();
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= 1 && i < ni - 1 && j >= 1 && j < nj - 1 && k >= 1 && k < nk - 1) {
    float acc = 0.0f;
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
      for (int b = 0; b < 3; ++b)
#pragma unroll
        for (int c = 0; c < 3; ++c)
          acc += weight(a, b, c) *
                 A[((size_t)(i - 1 + a) * nj + (j - 1 + b)) * nk + (k - 1 + c)];
    B[((size_t)i * nj + j) * nk + k] = acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NI", "NJ", "NK"}, {128, 128, 128});
  const int ni = (int)o.sizes[0], nj = (int)o.sizes[1], nk = (int)o.sizes[2];
  const size_t n = (size_t)ni * nj * nk;
  std::vector<float> A = kl::fill(n, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(n);
  bufB.zero();
  float *dA = bufA.get(), *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(nk, block.x), kl::cdiv(nj, block.y));
  for (int i = 1; i < ni - 1; ++i)
    timer.run("conv3d", kl::dims({nk, nj}), conv3d,
              [&] { conv3d<<<grid, block>>>(dA, dB, ni, nj, nk, i); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(n, 0.0);
  for (int i = 1; i < ni - 1; ++i)
    for (int j = 1; j < nj - 1; ++j)
      for (int k = 1; k < nk - 1; ++k) {
        double acc = 0;
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b)
            for (int c = 0; c < 3; ++c)
              acc += (double)weight(a, b, c) *
                     A[((size_t)(i - 1 + a) * nj + (j - 1 + b)) * nk + (k - 1 + c)];
        ref[((size_t)i * nj + j) * nk + k] = acc;
      }
  kl::Checker check("3dconv", kl::dims({ni, nj, nk}));
  check.compare("B", bufB.download(), ref, 1e-5);
  return check.finish();
}

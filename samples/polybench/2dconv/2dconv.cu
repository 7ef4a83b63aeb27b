// 2DCONV: a 3 x 3 convolution of an NI x NJ matrix (row-major). Every interior element
// B[i][j] (1 <= i < NI-1, 1 <= j < NJ-1) is sum over a, b in {0,1,2} of
// w(a, b) * A[i-1+a][j-1+b]; the border of B stays zero. One 2-D kernel, one thread per
// element of B (x along the columns j, y along the rows i).
// Usage: 2dconv [NI [NJ]] [--time [REPS]]
#include "harness.h"

// The convolution weights: distinct, mixed signs.
__host__ __device__ constexpr float weight(int a, int b) {
  return 0.1f * (float)(3 * a + b + 1) * ((a + b) % 2 ? -1.0f : 1.0f);
}

#pragma klaraptor kernel(conv2d) data(NI=ni, NJ=nj) dim(2) \
        grid(ceil(NJ, bx), ceil(NI, by)) \
        profile(run="./2dconv {NI} {NJ}", sizes=[64, 128, (256, 192), 256])
__global__ void conv2d(const float *A, float *B, int ni, int nj) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= 1 && i < ni - 1 && j >= 1 && j < nj - 1) {
    float acc = 0.0f;
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
      for (int b = 0; b < 3; ++b) acc += weight(a, b) * A[(size_t)(i - 1 + a) * nj + (j - 1 + b)];
    B[(size_t)i * nj + j] = acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NI", "NJ"}, {2048, 2048});
  const int ni = (int)o.sizes[0], nj = (int)o.sizes[1];
  std::vector<float> A = kl::fill((size_t)ni * nj, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB((size_t)ni * nj);
  bufB.zero();
  float *dA = bufA.get(), *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(nj, block.x), kl::cdiv(ni, block.y));
  timer.run("conv2d", kl::dims({ni, nj}), conv2d, [&] { conv2d<<<grid, block>>>(dA, dB, ni, nj); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)ni * nj, 0.0);
  for (int i = 1; i < ni - 1; ++i)
    for (int j = 1; j < nj - 1; ++j) {
      double acc = 0;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b)
          acc += (double)weight(a, b) * A[(size_t)(i - 1 + a) * nj + (j - 1 + b)];
      ref[(size_t)i * nj + j] = acc;
    }
  kl::Checker check("2dconv", kl::dims({ni, nj}));
  check.compare("B", bufB.download(), ref, 1e-5);
  return check.finish();
}

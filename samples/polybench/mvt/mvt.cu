// MVT: x1 = x1 + A y1 and x2 = x2 + A^T y2, with A N x N (row-major), vectors of N.
// Two 1-D kernels, one thread per element of x1 (a row of A each) and of x2 (a column each).
// Usage: mvt [N] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(mvt_x1) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./mvt {N}", sizes=[256, 512, 1024, 2048])
__global__ void mvt_x1(const float *A, const float *y1, float *x1, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = x1[i];
    for (int j = 0; j < n; ++j) acc += A[(size_t)i * n + j] * y1[j];
    x1[i] = acc;
  }
}

#pragma klaraptor kernel(mvt_x2) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./mvt {N}", sizes=[256, 512, 1024, 2048])
__global__ void mvt_x2(const float *A, const float *y2, float *x2, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = x2[i];
    for (int j = 0; j < n; ++j) acc += A[(size_t)j * n + i] * y2[j];
    x2[i] = acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {4096});
  const int n = (int)o.sizes[0];
  std::vector<float> A = kl::fill((size_t)n * n, 1, -1.0f, 1.0f);
  std::vector<float> x1 = kl::fill((size_t)n, 2, -1.0f, 1.0f);
  std::vector<float> x2 = kl::fill((size_t)n, 3, -1.0f, 1.0f);
  std::vector<float> y1 = kl::fill((size_t)n, 4, -1.0f, 1.0f);
  std::vector<float> y2 = kl::fill((size_t)n, 5, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufx1(x1), bufx2(x2), bufy1(y1), bufy2(y2);
  float *dA = bufA.get(), *dx1 = bufx1.get(), *dx2 = bufx2.get(), *dy1 = bufy1.get(),
        *dy2 = bufy2.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  timer.run("mvt_x1", kl::dims({n}), mvt_x1,
            [&] { mvt_x1<<<kl::cdiv(n, block), block>>>(dA, dy1, dx1, n); });
  timer.run("mvt_x2", kl::dims({n}), mvt_x2,
            [&] { mvt_x2<<<kl::cdiv(n, block), block>>>(dA, dy2, dx2, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> r1 = kl::widen(x1), r2 = kl::widen(x2);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double a = A[(size_t)i * n + j];
      r1[(size_t)i] += a * y1[(size_t)j];
      r2[(size_t)j] += a * y2[(size_t)i];
    }
  kl::Checker check("mvt", kl::dims({n}));
  check.compare("x1", bufx1.download(), r1, 1e-4);
  check.compare("x2", bufx2.download(), r2, 1e-4);
  return check.finish();
}

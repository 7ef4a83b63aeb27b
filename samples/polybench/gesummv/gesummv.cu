// GESUMMV: y = alpha * A x + beta * B x, with A and B N x N (row-major), x and y of N.
// One 1-D kernel, one thread per element of y (a row of A and of B each).
// Usage: gesummv [N] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(gesummv) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./gesummv {N}", sizes=[256, 512, 1024, 2048])
__global__ void gesummv(const float *A, const float *B, const float *x, float *y, float alpha,
                        float beta, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float ax = 0.0f, bx = 0.0f;
    for (int j = 0; j < n; ++j) {
      ax += A[(size_t)i * n + j] * x[j];
      bx += B[(size_t)i * n + j] * x[j];
    }
    y[i] = alpha * ax + beta * bx;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {4096});
  const int n = (int)o.sizes[0];
  const float alpha = 1.5f, beta = 1.2f;
  std::vector<float> A = kl::fill((size_t)n * n, 1, -1.0f, 1.0f);
  std::vector<float> B = kl::fill((size_t)n * n, 2, -1.0f, 1.0f);
  std::vector<float> x = kl::fill((size_t)n, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(B), bufx(x), bufy((size_t)n);
  bufy.poison();
  float *dA = bufA.get(), *dB = bufB.get(), *dx = bufx.get(), *dy = bufy.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  timer.run("gesummv", kl::dims({n}), gesummv,
            [&] { gesummv<<<kl::cdiv(n, block), block>>>(dA, dB, dx, dy, alpha, beta, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> y((size_t)n);
  for (int i = 0; i < n; ++i) {
    double ax = 0, bx = 0;
    for (int j = 0; j < n; ++j) {
      ax += (double)A[(size_t)i * n + j] * x[(size_t)j];
      bx += (double)B[(size_t)i * n + j] * x[(size_t)j];
    }
    y[(size_t)i] = alpha * ax + beta * bx;
  }
  kl::Checker check("gesummv", kl::dims({n}));
  check.compare("y", bufy.download(), y, 1e-4);
  return check.finish();
}

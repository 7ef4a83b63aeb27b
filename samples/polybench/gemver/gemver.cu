// GEMVER: with A N x N (row-major) and vectors of N,
//   A <- A + u1 v1^T + u2 v2^T;  x <- x + beta * A^T y + z;  w <- w + alpha * A x.
// Three kernels: a 2-D one for the rank-2 update (one thread per element of A, x along the
// columns, y along the rows), then two 1-D ones, one thread per element of x (a column of A
// each) and of w (a row of A each).
// Usage: gemver [N] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(gemver_a) data(N=n) dim(2) grid(ceil(N, bx), ceil(N, by)) \
        profile(run="./gemver {N}", sizes=[64, 128, 192, 256])
__global__ void gemver_a(float *A, const float *u1, const float *v1, const float *u2,
                         const float *v2, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) A[(size_t)i * n + j] += u1[i] * v1[j] + u2[i] * v2[j];
}

#pragma klaraptor kernel(gemver_x) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./gemver {N}", sizes=[256, 512, 1024, 2048])
__global__ void gemver_x(const float *A, float *x, const float *y, const float *z, float beta,
                         int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc += A[(size_t)j * n + i] * y[j];
    x[i] = x[i] + beta * acc + z[i];
  }
}

#pragma klaraptor kernel(gemver_w) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./gemver {N}", sizes=[256, 512, 1024, 2048])
__global__ void gemver_w(const float *A, const float *x, float *w, float alpha, int n) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc += A[(size_t)i * n + j] * x[j];
    w[i] += alpha * acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {4096});
  const int n = (int)o.sizes[0];
  const float alpha = 1.5f, beta = 1.2f;
  const size_t nn = (size_t)n * n;
  std::vector<float> A = kl::fill(nn, 1, -1.0f, 1.0f);
  auto vec = [n](uint32_t seed) { return kl::fill((size_t)n, seed, -1.0f, 1.0f); };
  std::vector<float> u1 = vec(2), v1 = vec(3), u2 = vec(4), v2 = vec(5);
  std::vector<float> x = vec(6), y = vec(7), z = vec(8), w = vec(9);
  kl::DeviceBuffer<float> bufA(A), bufu1(u1), bufv1(v1), bufu2(u2), bufv2(v2), bufx(x), bufy(y),
      bufz(z), bufw(w);
  float *dA = bufA.get(), *du1 = bufu1.get(), *dv1 = bufv1.get(), *du2 = bufu2.get(),
        *dv2 = bufv2.get(), *dx = bufx.get(), *dy = bufy.get(), *dz = bufz.get(),
        *dw = bufw.get();

  kl::Timer timer(o);
  dim3 block2(32, 8);
  dim3 grid2(kl::cdiv(n, block2.x), kl::cdiv(n, block2.y));
  timer.run("gemver_a", kl::dims({n}), gemver_a,
            [&] { gemver_a<<<grid2, block2>>>(dA, du1, dv1, du2, dv2, n); });
  const unsigned block = 256;
  timer.run("gemver_x", kl::dims({n}), gemver_x,
            [&] { gemver_x<<<kl::cdiv(n, block), block>>>(dA, dx, dy, dz, beta, n); });
  timer.run("gemver_w", kl::dims({n}), gemver_w,
            [&] { gemver_w<<<kl::cdiv(n, block), block>>>(dA, dx, dw, alpha, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> rA(nn), rx = kl::widen(x), rw = kl::widen(w), acc((size_t)n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      rA[(size_t)i * n + j] = (double)A[(size_t)i * n + j] + (double)u1[(size_t)i] * v1[(size_t)j] +
                              (double)u2[(size_t)i] * v2[(size_t)j];
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) acc[(size_t)i] += rA[(size_t)j * n + i] * y[(size_t)j];
  for (int i = 0; i < n; ++i) rx[(size_t)i] += beta * acc[(size_t)i] + z[(size_t)i];
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < n; ++j) s += rA[(size_t)i * n + j] * rx[(size_t)j];
    rw[(size_t)i] += alpha * s;
  }
  kl::Checker check("gemver", kl::dims({n}));
  check.compare("A", bufA.download(), rA, 1e-5);
  check.compare("x", bufx.download(), rx, 1e-4);
  check.compare("w", bufw.download(), rw, 1e-4);
  return check.finish();
}

// BICG: the two matrix-vector products of the BiCG method, s = A^T r and q = A p, with A
// NX x NY (row-major), r and q of NX, p and s of NY. Two 1-D kernels: one thread per element
// of s (a column of A each) and one per element of q (a row of A each).
// The kernels are annotated in klaraptor.toml beside this file, not in the source.
// Usage: bicg [NX [NY]] [--time [REPS]]
#include "harness.h"

__global__ void bicg_s(const float *A, const float *r, float *s, int nx, int ny) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < ny) {
    float acc = 0.0f;
    for (int i = 0; i < nx; ++i) acc += r[i] * A[(size_t)i * ny + j];
    s[j] = acc;
  }
}

__global__ void bicg_q(const float *A, const float *p, float *q, int nx, int ny) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nx) {
    float acc = 0.0f;
    for (int j = 0; j < ny; ++j) acc += A[(size_t)i * ny + j] * p[j];
    q[i] = acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NX", "NY"}, {4096, 4096});
  const int nx = (int)o.sizes[0], ny = (int)o.sizes[1];
  std::vector<float> A = kl::fill((size_t)nx * ny, 1, -1.0f, 1.0f);
  std::vector<float> r = kl::fill((size_t)nx, 2, -1.0f, 1.0f);
  std::vector<float> p = kl::fill((size_t)ny, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufr(r), bufp(p), bufs((size_t)ny), bufq((size_t)nx);
  bufs.poison();
  bufq.poison();
  float *dA = bufA.get(), *dr = bufr.get(), *dp = bufp.get(), *ds = bufs.get(), *dq = bufq.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  timer.run("bicg_s", kl::dims({ny, nx}), bicg_s,
            [&] { bicg_s<<<kl::cdiv(ny, block), block>>>(dA, dr, ds, nx, ny); });
  timer.run("bicg_q", kl::dims({nx, ny}), bicg_q,
            [&] { bicg_q<<<kl::cdiv(nx, block), block>>>(dA, dp, dq, nx, ny); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> s((size_t)ny, 0.0), q((size_t)nx, 0.0);
  for (int i = 0; i < nx; ++i)
    for (int j = 0; j < ny; ++j) {
      double a = A[(size_t)i * ny + j];
      s[(size_t)j] += (double)r[(size_t)i] * a;
      q[(size_t)i] += a * p[(size_t)j];
    }
  kl::Checker check("bicg", kl::dims({nx, ny}));
  check.compare("s", bufs.download(), s, 1e-4);
  check.compare("q", bufq.download(), q, 1e-4);
  return check.finish();
}

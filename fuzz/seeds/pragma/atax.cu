// ATAX: y = A^T (A x), with A NX x NY (row-major), x of NY, y of NY, through tmp = A x of
// NX. Two 1-D kernels: one thread per element of tmp (a row of A each), then one thread per
// element of y (a column of A each).
// Usage: atax [NX [NY]] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(atax_ax) data(NX=nx, NY=ny) dim(1) grid(ceil(NX, bx)) \
        profile(run="./atax {NX} {NY}", sizes=[256, 512, (2048, 1024), 2048])
__global__ void atax_ax(const float *A, const float *x, float *tmp, int nx, int ny) {
  KL_RECORD_BLOCK();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nx) {
    float acc = 0.0f;
    for (int j = 0; j < ny; ++j) acc += A[(size_t)i * ny + j] * x[j];
    tmp[i] = acc;
  }
}

#pragma klaraptor kernel(atax_aty) data(NY=ny, NX=nx) dim(1) grid(ceil(NY, bx)) \
        profile(run="./atax {NX} {NY}", sizes=[256, 512, (1024, 2048), 2048])
__global__ void atax_aty(const float *A, const float *tmp, float *y, int nx, int ny) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < ny) {
    float acc = 0.0f;
    for (int i = 0; i < nx; ++i) acc += A[(size_t)i * ny + j] * tmp[i];
    y[j] = acc;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NX", "NY"}, {4096, 4096});
  const int nx = (int)o.sizes[0], ny = (int)o.sizes[1];
  std::vector<float> A = kl::fill((size_t)nx * ny, 1, -1.0f, 1.0f);
  std::vector<float> x = kl::fill((size_t)ny, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufx(x), buftmp((size_t)nx), bufy((size_t)ny);
  buftmp.poison();
  bufy.poison();
  float *dA = bufA.get(), *dx = bufx.get(), *dtmp = buftmp.get(), *dy = bufy.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  timer.run("atax_ax", kl::dims({nx, ny}), atax_ax,
            [&] { atax_ax<<<kl::cdiv(nx, block), block>>>(dA, dx, dtmp, nx, ny); });
  timer.run("atax_aty", kl::dims({ny, nx}), atax_aty,
            [&] { atax_aty<<<kl::cdiv(ny, block), block>>>(dA, dtmp, dy, nx, ny); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> tmp((size_t)nx, 0.0), y((size_t)ny, 0.0);
  for (int i = 0; i < nx; ++i) {
    double acc = 0;
    for (int j = 0; j < ny; ++j) acc += (double)A[(size_t)i * ny + j] * x[j];
    tmp[(size_t)i] = acc;
  }
  for (int i = 0; i < nx; ++i)
    for (int j = 0; j < ny; ++j) y[(size_t)j] += (double)A[(size_t)i * ny + j] * tmp[(size_t)i];
  kl::Checker check("atax", kl::dims({nx, ny}));
  check.compare("tmp", buftmp.download(), tmp, 1e-4);
  check.compare("y", bufy.download(), y, 1e-4);
  return check.finish();
}

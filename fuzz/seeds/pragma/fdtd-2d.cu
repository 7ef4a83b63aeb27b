// FDTD-2D: a two-dimensional finite-difference time-domain simulation of the fields ex, ey
// and hz on an NX x NY grid (row-major), driven by a source along row 0. For t = 0..T-1:
//   ey[0][j] = src(t);  ey[i][j] -= 0.5 (hz[i][j] - hz[i-1][j])               (i >= 1)
//   ex[i][j] -= 0.5 (hz[i][j] - hz[i][j-1])                                   (j >= 1)
//   hz[i][j] -= 0.7 (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j])  (i < NX-1, j < NY-1)
// Three 2-D kernels per time step, one thread per grid point (x along j, y along i),
// launched in a host loop over t.
// Usage: fdtd-2d [NX [NY]] [--steps T] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(fdtd_ey) data(NX=nx, NY=ny) dim(2) \
        grid(ceil(NY, bx), ceil(NX, by)) \
        profile(run="./fdtd-2d {NX} {NY}", sizes=[64, 128, (256, 192), 256])
__global__ void fdtd_ey(float *ey, const float *hz, const float *src, int nx, int ny, int t) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < nx && j < ny) {
    size_t at = (size_t)i * ny + j;
    if (i == 0)
      ey[at] = src[t];
    else
      ey[at] -= 0.5f * (hz[at] - hz[at - ny]);
  }
}

#pragma klaraptor kernel(fdtd_ex) data(NX=nx, NY=ny) dim(2) \
        grid(ceil(NY, bx), ceil(NX, by)) \
        profile(run="./fdtd-2d {NX} {NY}", sizes=[64, 128, (256, 192), 256])
__global__ void fdtd_ex(float *ex, const float *hz, int nx, int ny) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < nx && j >= 1 && j < ny) {
    size_t at = (size_t)i * ny + j;
    ex[at] -= 0.5f * (hz[at] - hz[at - 1]);
  }
}

#pragma klaraptor kernel(fdtd_hz) data(NX=nx, NY=ny) dim(2) \
        grid(ceil(NY, bx), ceil(NX, by)) \
        profile(run="./fdtd-2d {NX} {NY}", sizes=[64, 128, (256, 192), 256])
__global__ void fdtd_hz(float *hz, const float *ex, const float *ey, int nx, int ny) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < nx - 1 && j < ny - 1) {
    size_t at = (size_t)i * ny + j;
    hz[at] -= 0.7f * (ex[at + 1] - ex[at] + ey[at + ny] - ey[at]);
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NX", "NY"}, {1024, 1024}, 1, 20);
  const int nx = (int)o.sizes[0], ny = (int)o.sizes[1], steps = (int)o.steps;
  const size_t n = (size_t)nx * ny;
  std::vector<float> ex = kl::fill(n, 1, -1.0f, 1.0f), ey = kl::fill(n, 2, -1.0f, 1.0f),
                     hz = kl::fill(n, 3, -1.0f, 1.0f), src((size_t)steps);
  for (int t = 0; t < steps; ++t) src[(size_t)t] = std::sin(0.3f * (float)t);
  kl::DeviceBuffer<float> bufex(ex), bufey(ey), bufhz(hz), bufsrc(src);
  float *dex = bufex.get(), *dey = bufey.get(), *dhz = bufhz.get(), *dsrc = bufsrc.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(ny, block.x), kl::cdiv(nx, block.y));
  const std::string size = kl::dims({nx, ny});
  for (int t = 0; t < steps; ++t) {
    timer.run("fdtd_ey", size, fdtd_ey,
              [&] { fdtd_ey<<<grid, block>>>(dey, dhz, dsrc, nx, ny, t); });
    timer.run("fdtd_ex", size, fdtd_ex, [&] { fdtd_ex<<<grid, block>>>(dex, dhz, nx, ny); });
    timer.run("fdtd_hz", size, fdtd_hz, [&] { fdtd_hz<<<grid, block>>>(dhz, dex, dey, nx, ny); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> rex = kl::widen(ex), rey = kl::widen(ey), rhz = kl::widen(hz);
  for (int t = 0; t < steps; ++t) {
    for (int j = 0; j < ny; ++j) rey[(size_t)j] = src[(size_t)t];
    for (int i = 1; i < nx; ++i)
      for (int j = 0; j < ny; ++j) {
        size_t at = (size_t)i * ny + j;
        rey[at] -= 0.5 * (rhz[at] - rhz[at - (size_t)ny]);
      }
    for (int i = 0; i < nx; ++i)
      for (int j = 1; j < ny; ++j) {
        size_t at = (size_t)i * ny + j;
        rex[at] -= 0.5 * (rhz[at] - rhz[at - 1]);
      }
    for (int i = 0; i < nx - 1; ++i)
      for (int j = 0; j < ny - 1; ++j) {
        size_t at = (size_t)i * ny + j;
        rhz[at] -= 0.7 * (rex[at + 1] - rex[at] + rey[at + (size_t)ny] - rey[at]);
      }
  }
  kl::Checker check("fdtd-2d", kl::dims({nx, ny, steps}));
  check.compare("ex", bufex.download(), rex, 1e-4);
  check.compare("ey", bufey.download(), rey, 1e-4);
  check.compare("hz", bufhz.download(), rhz, 1e-4);
  return check.finish();
}

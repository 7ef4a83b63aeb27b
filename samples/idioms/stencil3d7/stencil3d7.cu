// STENCIL3D7: one Jacobi-style sweep of the 7-point stencil on an NX x NY x NZ grid (x the
// contiguous index): at interior points
//   out = c0 in[x,y,z] + c1 (in[x-1] + in[x+1] + in[y-1] + in[y+1] + in[z-1] + in[z+1]),
// and out = in on the boundary. One thread per point, 3-D blocks on a 3-D grid.
// Usage: stencil3d7 [NX [NY [NZ]]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(stencil3d7) data(NX=nx, NY=ny, NZ=nz) dim(3) \
        grid(ceil(NX, bx), ceil(NY, by), ceil(NZ, bz)) \
        profile(run="./stencil3d7 {NX} {NY} {NZ}", sizes=[32, 48, (64, 48, 32), 64])
__global__ void stencil3d7(const float *in, float *out, int nx, int ny, int nz, float c0,
                           float c1) {
  KL_RECORD_BLOCK();
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= nx || y >= ny || z >= nz) return;
  const size_t plane = (size_t)nx * ny;
  const size_t at = (size_t)z * plane + (size_t)y * nx + x;
  if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1) {
    out[at] = in[at];
    return;
  }
  out[at] = c0 * in[at] +
            c1 * (in[at - 1] + in[at + 1] + in[at - nx] + in[at + nx] + in[at - plane] +
                  in[at + plane]);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NX", "NY", "NZ"}, {128, 128, 128});
  const int nx = (int)o.sizes[0], ny = (int)o.sizes[1], nz = (int)o.sizes[2];
  const float c0 = 0.4f, c1 = 0.1f;
  const size_t total = (size_t)nx * ny * nz;
  std::vector<float> In = kl::fill(total, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufIn(In), bufOut(total);
  bufOut.poison();
  const float *dIn = bufIn.get();
  float *dOut = bufOut.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 4, 2));
  dim3 grid(kl::cdiv(nx, block.x), kl::cdiv(ny, block.y), kl::cdiv(nz, block.z));
  timer.run("stencil3d7", kl::dims({nx, ny, nz}), stencil3d7,
            [&] { stencil3d7<<<grid, block>>>(dIn, dOut, nx, ny, nz, c0, c1); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  const size_t plane = (size_t)nx * ny;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        size_t at = (size_t)z * plane + (size_t)y * nx + x;
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1) {
          ref[at] = In[at];
          continue;
        }
        ref[at] = (double)c0 * In[at] +
                  (double)c1 * ((double)In[at - 1] + In[at + 1] + In[at - (size_t)nx] +
                                In[at + (size_t)nx] + In[at - plane] + In[at + plane]);
      }
  kl::Checker check("stencil3d7", kl::dims({nx, ny, nz}));
  check.compare("out", bufOut.download(), ref, 1e-5);
  return check.finish();
}

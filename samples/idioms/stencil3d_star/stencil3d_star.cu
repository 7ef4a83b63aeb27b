// STENCIL3D_STAR: one Jacobi-style sweep of a 3-D star stencil of radius R on a grid of
// nx x ny x nz points (x the contiguous index): at a point at least R away from every face
//   out = c[0] in[x,y,z] + sum_{k=1..R} c[k] (in[x-k] + in[x+k] + in[y-k] + in[y+k]
//                                              + in[z-k] + in[z+k]),
// 6 R + 1 reads, and out = in within R of a face. The kernel is a template over R,
// instantiated twice: R = 2 (13 points) on an NX x NY x NZ grid and R = 4 (25 points) on an
// MX x MY x MZ grid; one annotation covers both instantiations (one model each). One thread
// per point, 3-D blocks on a 3-D grid; the halo is read from global memory (no shared-memory
// staging: neighbouring threads' reads overlap in the caches). The weights travel by value
// in a small struct argument.
// Usage: stencil3d_star [NX [NY [NZ [MX [MY [MZ]]]]]] [--time [REPS]]
//        (KL_BLOCK=b2/b4: one shape per instantiation, R = 2 first)
#include "idioms.h"

// The weights of a radius-R star: c[0] the centre's, c[k] the six points at distance k.
template <int R> struct StarWeights {
  float c[R + 1];
};

#pragma klaraptor kernel(star3d) data(NX=nx, NY=ny, NZ=nz) dim(3) \
        grid(ceil(NX, bx), ceil(NY, by), ceil(NZ, bz)) \
        profile(run="./stencil3d_star {NX} {NY} {NZ} {NX} {NY} {NZ}", \
                sizes=[32, 48, (64, 48, 40), 64])
template <int R>
__global__ void star3d(const float *in, float *out, int nx, int ny, int nz, StarWeights<R> w) {
  KL_RECORD_BLOCK();
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x >= nx || y >= ny || z >= nz) return;
  const size_t row = (size_t)nx, plane = (size_t)nx * ny;
  const size_t at = (size_t)z * plane + (size_t)y * row + x;
  if (x < R || y < R || z < R || x >= nx - R || y >= ny - R || z >= nz - R) {
    out[at] = in[at];
    return;
  }
  float acc = w.c[0] * in[at];
#pragma unroll
  for (int k = 1; k <= R; ++k) {
    const size_t dy = k * row, dz = k * plane;
    acc += w.c[k] * (((in[at - k] + in[at + k]) + (in[at - dy] + in[at + dy])) +
                     (in[at - dz] + in[at + dz]));
  }
  out[at] = acc;
}

// The sweep in double from the same float inputs.
template <int R>
std::vector<double> reference(const std::vector<float> &in, int nx, int ny, int nz,
                              const StarWeights<R> &w) {
  std::vector<double> ref(in.size());
  const size_t row = (size_t)nx, plane = (size_t)nx * ny;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        const size_t at = (size_t)z * plane + (size_t)y * row + x;
        if (x < R || y < R || z < R || x >= nx - R || y >= ny - R || z >= nz - R) {
          ref[at] = in[at];
          continue;
        }
        double acc = (double)w.c[0] * in[at];
        for (int k = 1; k <= R; ++k) {
          const size_t dy = k * row, dz = k * plane;
          acc += (double)w.c[k] * ((double)in[at - k] + in[at + k] + in[at - dy] + in[at + dy] +
                                   in[at - dz] + in[at + dz]);
        }
        ref[at] = acc;
      }
  return ref;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NX", "NY", "NZ", "MX", "MY", "MZ"},
                            {128, 128, 128, 160, 128, 96});
  const int nx = (int)o.sizes[0], ny = (int)o.sizes[1], nz = (int)o.sizes[2];
  const int mx = (int)o.sizes[3], my = (int)o.sizes[4], mz = (int)o.sizes[5];
  const StarWeights<2> w2{{0.4f, 0.07f, 0.03f}};
  const StarWeights<4> w4{{0.28f, 0.06f, 0.03f, 0.02f, 0.01f}};
  const size_t total2 = (size_t)nx * ny * nz, total4 = (size_t)mx * my * mz;
  std::vector<float> In2 = kl::fill(total2, 40, -1.0f, 1.0f);
  std::vector<float> In4 = kl::fill(total4, 41, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufIn2(In2), bufOut2(total2), bufIn4(In4), bufOut4(total4);
  bufOut2.poison();
  bufOut4.poison();
  const float *dIn2 = bufIn2.get(), *dIn4 = bufIn4.get();
  float *dOut2 = bufOut2.get(), *dOut4 = bufOut4.get();

  kl::Timer timer(o);
  dim3 block2 = kl::block_shape(dim3(32, 4, 2), 0);
  dim3 block4 = kl::block_shape(dim3(32, 4, 2), 1);
  dim3 grid2(kl::cdiv(nx, block2.x), kl::cdiv(ny, block2.y), kl::cdiv(nz, block2.z));
  dim3 grid4(kl::cdiv(mx, block4.x), kl::cdiv(my, block4.y), kl::cdiv(mz, block4.z));
  timer.run("star3d", kl::dims({nx, ny, nz}), star3d<2>,
            [&] { star3d<2><<<grid2, block2>>>(dIn2, dOut2, nx, ny, nz, w2); });
  timer.run("star3d", kl::dims({mx, my, mz}), star3d<4>,
            [&] { star3d<4><<<grid4, block4>>>(dIn4, dOut4, mx, my, mz, w4); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  kl::Checker check("stencil3d_star", kl::dims({nx, ny, nz, mx, my, mz}));
  check.compare("out (R=2)", bufOut2.download(), reference<2>(In2, nx, ny, nz, w2), 1e-5);
  check.compare("out (R=4)", bufOut4.download(), reference<4>(In4, mx, my, mz, w4), 1e-5);
  return check.finish();
}

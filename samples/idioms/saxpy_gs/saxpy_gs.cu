// SAXPY_GS: y = a x + y on vectors of N floats, with a grid-stride loop: each thread starts
// at its global index and steps by the number of threads launched, and the launch caps the
// grid at a fixed number of blocks (kMaxBlocks: 8 blocks for each of the 132 SMs of an H100
// SXM), as code that sizes its grid to the GPU rather than to the data does. Past
// 1056 x blockDim elements every thread loops more than once.
// Usage: saxpy_gs [N] [--time [REPS]]
#include "idioms.h"

constexpr long kMaxBlocks = 1056;

#pragma klaraptor kernel(saxpy_gs) data(N=n) dim(1) \
        grid(min(ceil(N, bx), 1056)) \
        profile(run="./saxpy_gs {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void saxpy_gs(int n, float a, const float *x, float *y) {
  KL_RECORD_BLOCK();
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride)
    y[i] = a * x[i] + y[i];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 22});
  const int n = (int)o.sizes[0];
  const float a = 1.75f;
  std::vector<float> X = kl::fill((size_t)n, 1, -1.0f, 1.0f);
  std::vector<float> Y = kl::fill((size_t)n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufX(X), bufY(Y);
  const float *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid((unsigned)std::min<long>(kl::cdiv(n, block.x), kMaxBlocks));
  timer.run("saxpy_gs", kl::dims({n}), saxpy_gs,
            [&] { saxpy_gs<<<grid, block>>>(n, a, dX, dY); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n);
  for (size_t i = 0; i < (size_t)n; ++i) ref[i] = (double)a * X[i] + (double)Y[i];
  kl::Checker check("saxpy_gs", kl::dims({n}));
  check.compare("y", bufY.download(), ref, 1e-5);
  return check.finish();
}

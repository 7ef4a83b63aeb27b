// STREAMS_AXPBY: z = a x + b y on two independent pairs of vectors, of N and of M floats, the
// first on one CUDA stream and the second on another, so the two launches may run at the same
// time (the program queues both before it waits for either). The same kernel at two sizes
// on two streams: a launch klaraptor rewrites must keep its stream.
// Timing mode times each launch on its own, between events on the legacy default stream
// (the streams are created blocking, so they order against it).
// Usage: streams_axpby [N [M]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(axpby) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./streams_axpby {N} {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void axpby(int n, float a, const float *x, float b, const float *y, float *z) {
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = a * x[i] + b * y[i];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "M"}, {1 << 22, 3 << 20});
  const int n = (int)o.sizes[0], m = (int)o.sizes[1];
  const float a = 1.25f, b = -0.5f;
  std::vector<float> X1 = kl::fill((size_t)n, 1, -1.0f, 1.0f), Y1 = kl::fill((size_t)n, 2, -1.0f, 1.0f);
  std::vector<float> X2 = kl::fill((size_t)m, 3, -1.0f, 1.0f), Y2 = kl::fill((size_t)m, 4, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufX1(X1), bufY1(Y1), bufZ1((size_t)n);
  kl::DeviceBuffer<float> bufX2(X2), bufY2(Y2), bufZ2((size_t)m);
  bufZ1.poison();
  bufZ2.poison();
  const float *dX1 = bufX1.get(), *dY1 = bufY1.get(), *dX2 = bufX2.get(), *dY2 = bufY2.get();
  float *dZ1 = bufZ1.get(), *dZ2 = bufZ2.get();
  cudaStream_t s1, s2;
  KL_CHECK(cudaStreamCreate(&s1));
  KL_CHECK(cudaStreamCreate(&s2));

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid1(kl::cdiv(n, block.x)), grid2(kl::cdiv(m, block.x));
  timer.run("axpby", kl::dims({n}), axpby,
            [&] { axpby<<<grid1, block, 0, s1>>>(n, a, dX1, b, dY1, dZ1); });
  timer.run("axpby", kl::dims({m}), axpby,
            [&] { axpby<<<grid2, block, 0, s2>>>(m, a, dX2, b, dY2, dZ2); });
  KL_CHECK(cudaStreamSynchronize(s1));
  KL_CHECK(cudaStreamSynchronize(s2));
  KL_CHECK(cudaDeviceSynchronize());
  KL_CHECK(cudaStreamDestroy(s1));
  KL_CHECK(cudaStreamDestroy(s2));
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> r1((size_t)n), r2((size_t)m);
  for (size_t i = 0; i < (size_t)n; ++i) r1[i] = (double)a * X1[i] + (double)b * Y1[i];
  for (size_t i = 0; i < (size_t)m; ++i) r2[i] = (double)a * X2[i] + (double)b * Y2[i];
  kl::Checker check("streams_axpby", kl::dims({n, m}));
  check.compare("z1 (stream 1)", bufZ1.download(), r1, 1e-5);
  check.compare("z2 (stream 2)", bufZ2.download(), r2, 1e-5);
  return check.finish();
}

// TEN_LAUNCH: ten smoothing sweeps of a vector of N floats, y_i = (x_{i-1} + 2 x_i +
// x_{i+1}) / 4 (the ends held fixed), the buffers swapped after each: one kernel launched
// ten times a run, back to back on the default stream, with no host work or
// synchronisation between the launches. A launch key (kernel, N) that gets ten launches a
// run: fewer than one run's worth of refinement.
// Usage: ten_launch [N] [--time [REPS]]
#include "idioms.h"

constexpr int kLaunches = 10;

#pragma klaraptor kernel(smooth3) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./ten_launch {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void smooth3(const float *x, float *y, int n) {
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = i == 0 || i == n - 1 ? x[i] : 0.25f * (x[i - 1] + 2.0f * x[i] + x[i + 1]);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 22});
  const int n = (int)o.sizes[0];
  std::vector<float> X = kl::fill((size_t)n, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(X), bufB((size_t)n);
  bufB.poison();
  float *cur = bufA.get(), *next = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  for (int s = 0; s < kLaunches; ++s) {
    timer.run("smooth3", kl::dims({n}), smooth3,
              [&] { smooth3<<<grid, block>>>(cur, next, n); });
    std::swap(cur, next);
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  // After an even number of sweeps the result is back in the first buffer.
  std::vector<double> a(X.begin(), X.end()), b((size_t)n);
  for (int s = 0; s < kLaunches; ++s) {
    for (int i = 0; i < n; ++i)
      b[(size_t)i] = i == 0 || i == n - 1 ? a[(size_t)i]
                                          : 0.25 * (a[(size_t)i - 1] + 2.0 * a[(size_t)i] +
                                                    a[(size_t)i + 1]);
    std::swap(a, b);
  }
  static_assert(kLaunches % 2 == 0, "the result is read from the first buffer");
  kl::Checker check("ten_launch", kl::dims({n}));
  check.compare("x after ten sweeps", bufA.download(), a, 1e-5);
  return check.finish();
}

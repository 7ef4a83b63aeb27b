// TEMPLATE_SCALE: a 1-D convolution of radius R, out[i] = sum_{k=-R..R} w[k+R] in[i+k] (the
// input clamped at the ends), written once as a kernel template over R and instantiated
// twice: R = 3 on a vector of N floats, R = 16 on one of M floats. The weights live in
// constant memory (every thread reads the same weight at the same time: a broadcast). One
// annotation (in stencil1d.cuh, included) covers both instantiations; klaraptor profiles and
// models each on its own.
// Usage: template_scale [N [M]] [--time [REPS]]
#include "idioms.h"

#include "stencil1d.cuh"

template <int R>
std::vector<double> reference(const std::vector<float> &in, const std::vector<float> &w) {
  const long n = (long)in.size();
  std::vector<double> ref((size_t)n, 0.0);
  for (long i = 0; i < n; ++i)
    for (int k = -R; k <= R; ++k) {
      long at = i + k;
      at = at < 0 ? 0 : at >= n ? n - 1 : at;
      ref[(size_t)i] += (double)w[(size_t)(k + R)] * in[(size_t)at];
    }
  return ref;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "M"}, {1 << 22, 3 << 20});
  const int n = (int)o.sizes[0], m = (int)o.sizes[1];
  std::vector<float> W = kl::fill(2 * kMaxRadius + 1, 30, 0.0f, 0.1f);
  KL_CHECK(cudaMemcpyToSymbol(kWeights, W.data(), W.size() * sizeof(float)));
  std::vector<float> X = kl::fill((size_t)n, 31, -1.0f, 1.0f);
  std::vector<float> Y = kl::fill((size_t)m, 32, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufX(X), bufOx((size_t)n), bufY(Y), bufOy((size_t)m);
  bufOx.poison();
  bufOy.poison();
  const float *dX = bufX.get(), *dY = bufY.get();
  float *dOx = bufOx.get(), *dOy = bufOy.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid_n(kl::cdiv(n, block.x)), grid_m(kl::cdiv(m, block.x));
  timer.run("stencil1d", kl::dims({n}), stencil1d<3>,
            [&] { stencil1d<3><<<grid_n, block>>>(dX, dOx, n); });
  timer.run("stencil1d", kl::dims({m}), stencil1d<16>,
            [&] { stencil1d<16><<<grid_m, block>>>(dY, dOy, m); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  kl::Checker check("template_scale", kl::dims({n, m}));
  check.compare("out (R=3)", bufOx.download(), reference<3>(X, W), 1e-5);
  check.compare("out (R=16)", bufOy.download(), reference<16>(Y, W), 1e-5);
  return check.finish();
}

// HISTOGRAM_ATOMIC: h[v] = #{i : key[i] == v} for N integer keys in [0, BINS), one thread
// per key, each adding 1 to its bin in global memory with an integer atomicAdd. The keys
// are skewed (key = floor(BINS u^2), u uniform from a hash of i): low bins are hot, so the
// atomics of a warp collide on the same addresses more often the fewer bins there are.
// Usage: histogram_atomic [N [BINS]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(histogram_atomic) data(N=n, BINS=bins) dim(1) grid(ceil(N, bx)) \
        profile(run="./histogram_atomic {N} {BINS}", \
                sizes=[(65536, 256), (131072, 256), (262144, 256), (131072, 32), \
                       (262144, 1024)])
__global__ void histogram_atomic(const int *key, unsigned *hist, int n, int bins) {
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int v = key[i];
  if (v >= 0 && v < bins) atomicAdd(&hist[v], 1u);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "BINS"}, {1 << 22, 256});
  const int n = (int)o.sizes[0], bins = (int)o.sizes[1];
  std::vector<int> key((size_t)n);
  for (size_t i = 0; i < (size_t)n; ++i) {
    float u = kl::unit(21, i);
    int v = (int)((float)bins * u * u);
    key[i] = v < bins ? v : bins - 1;
  }
  kl::DeviceBuffer<int> bufKey(key);
  kl::DeviceBuffer<unsigned> bufHist((size_t)bins);
  bufHist.zero();
  const int *dKey = bufKey.get();
  unsigned *dHist = bufHist.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  timer.run("histogram_atomic", kl::dims({n, bins}), histogram_atomic,
            [&] { histogram_atomic<<<grid, block>>>(dKey, dHist, n, bins); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)bins, 0.0);
  for (int v : key) ref[(size_t)v] += 1.0;
  kl::Checker check("histogram_atomic", kl::dims({n, bins}));
  check.compare("h", kl::to_float(bufHist.download()), ref, 0.0);
  return check.finish();
}

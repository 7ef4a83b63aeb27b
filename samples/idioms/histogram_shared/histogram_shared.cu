// HISTOGRAM_SHARED: h[v] = #{i : key[i] == v} for N integer keys in [0, BINS), with a
// private histogram per block in shared memory. A block zeroes its BINS counters
// (block-stride loop), waits at __syncthreads, counts its keys into them with shared-memory
// integer atomicAdds (a grid-stride loop: the launch caps the grid at kMaxBlocks = 264 blocks,
// 2 for each of the 132 SMs of an H100 SXM, so every block counts many keys), waits again and
// adds its nonzero counters to the global histogram with global atomicAdds: BINS global
// atomics per block at most, instead of one per key. The counters are dynamic shared memory,
// BINS unsigned ints (shmem(BINS * 4)); BINS is at most kMaxBins = 12 288 (48 KiB, what a
// block may have without opting in to more). The keys are skewed (key = floor(BINS u^3), u
// uniform from a hash of i): low bins are hot, so a warp's shared atomics collide often.
// Usage: histogram_shared [N [BINS]] [--time [REPS]]
#include "idioms.h"

constexpr long kMaxBlocks = 264;
constexpr int kMaxBins = 12288;

#pragma klaraptor kernel(histogram_shared) data(N=n, BINS=bins) dim(1) \
        grid(min(ceil(N, bx), 264)) shmem(BINS * 4) \
        profile(run="./histogram_shared {N} {BINS}", \
                sizes=[(65536, 256), (131072, 256), (262144, 256), (131072, 32), \
                       (262144, 4096)])
__global__ void histogram_shared(const int *key, unsigned *hist, int n, int bins) {
  extern __shared__ unsigned local[];
  KL_RECORD_BLOCK();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0u;
  __syncthreads();
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
    const int v = key[i];
    if (v >= 0 && v < bins) atomicAdd(&local[v], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    const unsigned c = local[b];
    if (c != 0u) atomicAdd(&hist[b], c);
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "BINS"}, {1 << 22, 256});
  const int n = (int)o.sizes[0], bins = (int)o.sizes[1];
  if (bins > kMaxBins) {
    std::fprintf(stderr, "histogram_shared: BINS must be at most %d\n", kMaxBins);
    return 2;
  }
  std::vector<int> key((size_t)n);
  for (size_t i = 0; i < (size_t)n; ++i) {
    float u = kl::unit(22, i);
    int v = (int)((float)bins * u * u * u);
    key[i] = v < bins ? v : bins - 1;
  }
  kl::DeviceBuffer<int> bufKey(key);
  kl::DeviceBuffer<unsigned> bufHist((size_t)bins);
  bufHist.zero();
  const int *dKey = bufKey.get();
  unsigned *dHist = bufHist.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid((unsigned)std::min<long>(kl::cdiv(n, block.x), kMaxBlocks));
  const size_t shmem = (size_t)bins * sizeof(unsigned);
  timer.run("histogram_shared", kl::dims({n, bins}), histogram_shared,
            [&] { histogram_shared<<<grid, block, shmem>>>(dKey, dHist, n, bins); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)bins, 0.0);
  for (int v : key) ref[(size_t)v] += 1.0;
  kl::Checker check("histogram_shared", kl::dims({n, bins}));
  check.compare("h", kl::to_float(bufHist.download()), ref, 0.0);
  return check.finish();
}

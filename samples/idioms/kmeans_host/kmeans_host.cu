// KMEANS_HOST: k-means clustering of N points of 4 coordinates into K clusters, 10
// iterations of a host loop. Each iteration allocates a device buffer for the centroids,
// copies them in, runs the short assignment kernel (each point's nearest centroid), copies
// the assignments back, frees the buffer and recomputes the centroids on the host: a short
// kernel in a host-bound loop, with allocations and copies each iteration.
// The points lie around K well separated centres, so every assignment is decided by a wide
// margin and the GPU's and the reference's float rounding never disagree.
// Usage: kmeans_host [N [K]] [--time [REPS]]
#include "idioms.h"

constexpr int kDim = 4;
constexpr int kIterations = 10;

#pragma klaraptor kernel(kmeans_assign) data(N=n, K=k) dim(1) grid(ceil(N, bx)) \
        profile(run="./kmeans_host {N} {K}", \
                sizes=[(65536, 16), (131072, 16), (196608, 16), (262144, 16), (131072, 8)])
__global__ void kmeans_assign(const float *pts, const float *cent, int *assign, int n, int k) {
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float p[kDim];
  for (int d = 0; d < kDim; ++d) p[d] = pts[(size_t)d * n + i]; // coordinate-major: coalesced
  int best = 0;
  float best_d2 = 0.0f;
  for (int c = 0; c < k; ++c) {
    float d2 = 0.0f;
    for (int d = 0; d < kDim; ++d) {
      const float e = p[d] - cent[c * kDim + d];
      d2 += e * e;
    }
    if (c == 0 || d2 < best_d2) {
      best = c;
      best_d2 = d2;
    }
  }
  assign[i] = best;
}

// The centroids of the points assigned to each cluster (a cluster left empty keeps its
// centroid), in double.
static void update(const std::vector<float> &pts, const std::vector<int> &assign, int n, int k,
                   std::vector<float> &cent) {
  std::vector<double> sum((size_t)k * kDim, 0.0);
  std::vector<long> cnt((size_t)k, 0);
  for (int i = 0; i < n; ++i) {
    const int c = assign[(size_t)i];
    ++cnt[(size_t)c];
    for (int d = 0; d < kDim; ++d) sum[(size_t)c * kDim + d] += pts[(size_t)d * n + i];
  }
  for (int c = 0; c < k; ++c)
    if (cnt[(size_t)c])
      for (int d = 0; d < kDim; ++d)
        cent[(size_t)c * kDim + d] = (float)(sum[(size_t)c * kDim + d] / cnt[(size_t)c]);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "K"}, {1 << 20, 16});
  const int n = (int)o.sizes[0], k = (int)o.sizes[1];
  if (k > 4096) {
    std::fprintf(stderr, "kmeans_host: K must be at most 4096\n");
    return 2;
  }
  // Centre c at 10 * (c, c mod 3, c mod 5, c mod 7); point i around centre i mod K, within
  // 0.5 in each coordinate; the first centroids 1 off the centres.
  std::vector<float> noise = kl::fill((size_t)kDim * n, 1, -0.5f, 0.5f);
  std::vector<float> pts((size_t)kDim * n), cent((size_t)k * kDim);
  auto centre = [](int c, int d) {
    const int m[kDim] = {c, c % 3, c % 5, c % 7};
    return 10.0f * (float)m[d];
  };
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < kDim; ++d)
      pts[(size_t)d * n + i] = centre(i % k, d) + noise[(size_t)d * n + i];
  for (int c = 0; c < k; ++c)
    for (int d = 0; d < kDim; ++d) cent[(size_t)c * kDim + d] = centre(c, d) + 1.0f;
  std::vector<float> cent0 = cent;
  kl::DeviceBuffer<float> bufP(pts);
  kl::DeviceBuffer<int> bufA((size_t)n);
  bufA.poison();
  const float *dP = bufP.get();
  int *dA = bufA.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  std::vector<int> assign((size_t)n);
  for (int it = 0; it < kIterations; ++it) {
    float *dC = nullptr;
    KL_CHECK(cudaMalloc((void **)&dC, cent.size() * sizeof(float)));
    KL_CHECK(cudaMemcpy(dC, cent.data(), cent.size() * sizeof(float), cudaMemcpyHostToDevice));
    timer.run("kmeans_assign", kl::dims({n, k}), kmeans_assign,
              [&] { kmeans_assign<<<grid, block>>>(dP, dC, dA, n, k); });
    KL_CHECK(cudaMemcpy(assign.data(), dA, assign.size() * sizeof(int), cudaMemcpyDeviceToHost));
    KL_CHECK(cudaFree(dC));
    update(pts, assign, n, k, cent);
  }
  if (timer.on()) {
    timer.report();
    return 0;
  }

  // The reference: the same iterations, distances in double.
  std::vector<int> ra((size_t)n);
  std::vector<float> rc = cent0;
  for (int it = 0; it < kIterations; ++it) {
    for (int i = 0; i < n; ++i) {
      int best = 0;
      double best_d2 = 0;
      for (int c = 0; c < k; ++c) {
        double d2 = 0;
        for (int d = 0; d < kDim; ++d) {
          const double e = (double)pts[(size_t)d * n + i] - rc[(size_t)c * kDim + d];
          d2 += e * e;
        }
        if (c == 0 || d2 < best_d2) {
          best = c;
          best_d2 = d2;
        }
      }
      ra[(size_t)i] = best;
    }
    update(pts, ra, n, k, rc);
  }
  kl::Checker check("kmeans_host", kl::dims({n, k}));
  check.compare("assignments", kl::to_float(assign), kl::widen(kl::to_float(ra)), 0);
  check.compare("centroids", cent, kl::widen(rc), 1e-6);
  return check.finish();
}

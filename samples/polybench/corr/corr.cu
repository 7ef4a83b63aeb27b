// CORR: the correlation matrix of M variables observed N times. data is N x M (row-major:
// row i is observation i); sym is M x M with sym[a][b] = the correlation of variables a, b.
//   mean[j] = (1/N) sum_i data[i][j]
//   std[j]  = sqrt((1/N) sum_i (data[i][j] - mean[j])^2), replaced by 1 when <= 0.1
//   data[i][j] <- (data[i][j] - mean[j]) / (sqrt(N) std[j])
//   sym[a][b] = sum_i data[i][a] data[i][b]   (a != b), sym[a][a] = 1
// Four kernels: mean and std are 1-D (one thread per variable), the normalisation is 2-D
// (one thread per element of data, x along the variables, y along the observations), and the
// matrix is 1-D (one thread per row a, which fills sym[a][b] and sym[b][a] for b > a).
// Usage: corr [M [N]] [--time [REPS]]
#include "harness.h"

#define STD_FLOOR 0.1f

#pragma klaraptor kernel(corr_mean) data(M=m, N=n) dim(1) grid(ceil(M, bx)) \
        profile(run="./corr {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void corr_mean(const float *data, float *mean, int m, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += data[(size_t)i * m + j];
    mean[j] = acc / (float)n;
  }
}

#pragma klaraptor kernel(corr_std) data(M=m, N=n) dim(1) grid(ceil(M, bx)) \
        profile(run="./corr {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void corr_std(const float *data, const float *mean, float *std, int m, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) {
      float d = data[(size_t)i * m + j] - mean[j];
      acc += d * d;
    }
    float s = sqrtf(acc / (float)n);
    std[j] = s <= STD_FLOOR ? 1.0f : s;
  }
}

#pragma klaraptor kernel(corr_center) data(M=m, N=n) dim(2) \
        grid(ceil(M, bx), ceil(N, by)) \
        profile(run="./corr {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void corr_center(float *data, const float *mean, const float *std, int m, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < m)
    data[(size_t)i * m + j] = (data[(size_t)i * m + j] - mean[j]) / (sqrtf((float)n) * std[j]);
}

#pragma klaraptor kernel(corr_matrix) data(M=m, N=n) dim(1) grid(ceil(M, bx)) \
        profile(run="./corr {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void corr_matrix(const float *data, float *sym, int m, int n) {
  KL_RECORD_BLOCK();
  int a = blockIdx.x * blockDim.x + threadIdx.x;
  if (a < m) {
    sym[(size_t)a * m + a] = 1.0f;
    for (int b = a + 1; b < m; ++b) {
      float acc = 0.0f;
      for (int i = 0; i < n; ++i) acc += data[(size_t)i * m + a] * data[(size_t)i * m + b];
      sym[(size_t)a * m + b] = acc;
      sym[(size_t)b * m + a] = acc;
    }
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {512, 512});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  std::vector<float> data = kl::fill((size_t)n * m, 1, 0.0f, 1.0f);
  // A few constant variables exercise the floor on the standard deviation.
  for (int j = 0; j < m; j += 7)
    for (int i = 0; i < n; ++i) data[(size_t)i * m + j] = 0.25f;
  kl::DeviceBuffer<float> bufdata(data), bufmean((size_t)m), bufstd((size_t)m),
      bufsym((size_t)m * m);
  bufmean.poison();
  bufstd.poison();
  bufsym.poison();
  float *ddata = bufdata.get(), *dmean = bufmean.get(), *dstd = bufstd.get(),
        *dsym = bufsym.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  dim3 block2(32, 8);
  dim3 grid2(kl::cdiv(m, block2.x), kl::cdiv(n, block2.y));
  const std::string size = kl::dims({m, n});
  timer.run("corr_mean", size, corr_mean,
            [&] { corr_mean<<<kl::cdiv(m, block), block>>>(ddata, dmean, m, n); });
  timer.run("corr_std", size, corr_std,
            [&] { corr_std<<<kl::cdiv(m, block), block>>>(ddata, dmean, dstd, m, n); });
  timer.run("corr_center", size, corr_center,
            [&] { corr_center<<<grid2, block2>>>(ddata, dmean, dstd, m, n); });
  timer.run("corr_matrix", size, corr_matrix,
            [&] { corr_matrix<<<kl::cdiv(m, block), block>>>(ddata, dsym, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> mean((size_t)m, 0.0), sd((size_t)m, 0.0), d = kl::widen(data);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) mean[(size_t)j] += d[(size_t)i * m + j];
  for (int j = 0; j < m; ++j) mean[(size_t)j] /= n;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      double t = d[(size_t)i * m + j] - mean[(size_t)j];
      sd[(size_t)j] += t * t;
    }
  for (int j = 0; j < m; ++j) {
    sd[(size_t)j] = std::sqrt(sd[(size_t)j] / n);
    if (sd[(size_t)j] <= STD_FLOOR) sd[(size_t)j] = 1.0;
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      d[(size_t)i * m + j] =
          (d[(size_t)i * m + j] - mean[(size_t)j]) / (std::sqrt((double)n) * sd[(size_t)j]);
  std::vector<double> sym((size_t)m * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < m; ++a) {
      double x = d[(size_t)i * m + a];
      for (int b = a + 1; b < m; ++b) sym[(size_t)a * m + b] += x * d[(size_t)i * m + b];
    }
  for (int a = 0; a < m; ++a) {
    sym[(size_t)a * m + a] = 1.0;
    for (int b = a + 1; b < m; ++b) sym[(size_t)b * m + a] = sym[(size_t)a * m + b];
  }
  kl::Checker check("corr", kl::dims({m, n}));
  check.compare("mean", bufmean.download(), mean, 1e-4);
  check.compare("std", bufstd.download(), sd, 1e-4);
  check.compare("data", bufdata.download(), d, 1e-4);
  check.compare("sym", bufsym.download(), sym, 1e-4);
  return check.finish();
}

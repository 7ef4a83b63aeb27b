// COVAR: the covariance matrix of M variables observed N times. data is N x M (row-major:
// row i is observation i); sym is M x M.
//   mean[j] = (1/N) sum_i data[i][j];  data[i][j] <- data[i][j] - mean[j]
//   sym[a][b] = sym[b][a] = (1/(N-1)) sum_i data[i][a] data[i][b]   (b >= a)
// Three kernels: the means are 1-D (one thread per variable), the centring is 2-D (one
// thread per element of data, x along the variables, y along the observations), and the
// matrix is 1-D (one thread per row a, which fills sym[a][b] and sym[b][a] for b >= a).
// Usage: covar [M [N]] [--time [REPS]]    (N >= 2)
#include "harness.h"

#pragma klaraptor kernel(covar_mean) data(M=m, N=n) dim(1) grid(ceil(M, bx)) \
        profile(run="./covar {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void covar_mean(const float *data, float *mean, int m, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += data[(size_t)i * m + j];
    mean[j] = acc / (float)n;
  }
}

#pragma klaraptor kernel(covar_center) data(M=m, N=n) dim(2) \
        grid(ceil(M, bx), ceil(N, by)) \
        profile(run="./covar {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void covar_center(float *data, const float *mean, int m, int n) {
  KL_RECORD_BLOCK();
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < m) data[(size_t)i * m + j] -= mean[j];
}

#pragma klaraptor kernel(covar_matrix) data(M=m, N=n) dim(1) grid(ceil(M, bx)) \
        profile(run="./covar {M} {N}", sizes=[64, 128, (256, 192), 256])
__global__ void covar_matrix(const float *data, float *sym, int m, int n) {
  KL_RECORD_BLOCK();
  int a = blockIdx.x * blockDim.x + threadIdx.x;
  if (a < m) {
    for (int b = a; b < m; ++b) {
      float acc = 0.0f;
      for (int i = 0; i < n; ++i) acc += data[(size_t)i * m + a] * data[(size_t)i * m + b];
      acc /= (float)(n - 1);
      sym[(size_t)a * m + b] = acc;
      sym[(size_t)b * m + a] = acc;
    }
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {512, 512}, 2);
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  std::vector<float> data = kl::fill((size_t)n * m, 1, 0.0f, 1.0f);
  kl::DeviceBuffer<float> bufdata(data), bufmean((size_t)m), bufsym((size_t)m * m);
  bufmean.poison();
  bufsym.poison();
  float *ddata = bufdata.get(), *dmean = bufmean.get(), *dsym = bufsym.get();

  kl::Timer timer(o);
  const unsigned block = 256;
  dim3 block2(32, 8);
  dim3 grid2(kl::cdiv(m, block2.x), kl::cdiv(n, block2.y));
  const std::string size = kl::dims({m, n});
  timer.run("covar_mean", size, covar_mean,
            [&] { covar_mean<<<kl::cdiv(m, block), block>>>(ddata, dmean, m, n); });
  timer.run("covar_center", size, covar_center,
            [&] { covar_center<<<grid2, block2>>>(ddata, dmean, m, n); });
  timer.run("covar_matrix", size, covar_matrix,
            [&] { covar_matrix<<<kl::cdiv(m, block), block>>>(ddata, dsym, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> mean((size_t)m, 0.0), d = kl::widen(data);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) mean[(size_t)j] += d[(size_t)i * m + j];
  for (int j = 0; j < m; ++j) mean[(size_t)j] /= n;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) d[(size_t)i * m + j] -= mean[(size_t)j];
  std::vector<double> sym((size_t)m * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < m; ++a) {
      double x = d[(size_t)i * m + a];
      for (int b = a; b < m; ++b) sym[(size_t)a * m + b] += x * d[(size_t)i * m + b];
    }
  for (int a = 0; a < m; ++a)
    for (int b = a; b < m; ++b) {
      sym[(size_t)a * m + b] /= (n - 1);
      sym[(size_t)b * m + a] = sym[(size_t)a * m + b];
    }
  kl::Checker check("covar", kl::dims({m, n}));
  check.compare("mean", bufmean.download(), mean, 1e-4);
  check.compare("data", bufdata.download(), d, 1e-4);
  check.compare("sym", bufsym.download(), sym, 1e-4);
  return check.finish();
}

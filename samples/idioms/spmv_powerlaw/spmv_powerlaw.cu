// SPMV_POWERLAW: y = A x for a sparse N x N matrix A in compressed sparse row form (row
// pointers, column indices, values), one thread per row, as spmv_csr, but with row lengths
// from a power law: row i holds floor(3 (1 - u)^(-1 / 1.3)) entries (u uniform in [0, 1)
// from a hash of i, so P(length >= L) = (3 / L)^1.3 for L >= 3), capped at
// min(kMaxRow = 2048, N). Most rows are short (median 5, mean ~11), a few are very long: about
// 2 in 10 000 rows reach the cap, one in 100 holds 100 entries or more. Every entry's
// column is a hash of its position, anywhere in the matrix (no band), so x is gathered from
// scattered places. A warp runs as long as its longest row (~55 entries for half the warps),
// and the few warps that hold a capped row run ~40 x longer than those: the load imbalance
// of one thread per row on a skewed (web- or graph-like) matrix. Deterministic: the same N
// gives the same matrix.
// Usage: spmv_powerlaw [N] [--time [REPS]]
#include "idioms.h"

#include <cmath>

constexpr long kMaxRow = 2048;

#pragma klaraptor kernel(spmv_powerlaw) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./spmv_powerlaw {N}", sizes=[2048, 4096, 6144, 8192])
__global__ void spmv_powerlaw(int n, const int *rowptr, const int *col, const float *val,
                              const float *x, float *y) {
  KL_RECORD_BLOCK();
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n) return;
  float acc = 0.0f;
  for (int k = rowptr[row]; k < rowptr[row + 1]; ++k) acc += val[k] * x[col[k]];
  y[row] = acc;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 18});
  const int n = (int)o.sizes[0];
  // The row lengths (inverse transform of a Pareto law of exponent 1.3 and minimum 3),
  // then the columns and values.
  const long cap = std::min<long>(kMaxRow, n);
  std::vector<int> rowptr((size_t)n + 1, 0);
  long nnz_l = 0;
  for (int i = 0; i < n; ++i) {
    const double u = kl::unit(21, (uint64_t)i);
    const double len = std::floor(3.0 * std::pow(1.0 - u, -1.0 / 1.3));
    nnz_l += len >= (double)cap ? cap : (long)len;
    if (nnz_l > INT_MAX) {
      std::fprintf(stderr, "spmv_powerlaw: N = %d gives more than %d entries\n", n, INT_MAX);
      return 1;
    }
    rowptr[(size_t)i + 1] = (int)nnz_l;
  }
  const size_t nnz = (size_t)nnz_l;
  std::vector<int> col(nnz);
  for (size_t k = 0; k < nnz; ++k) col[k] = (int)((long)(kl::unit(22, k) * (float)n) % n);
  std::vector<float> val = kl::fill(nnz, 23, -1.0f, 1.0f);
  std::vector<float> X = kl::fill((size_t)n, 24, -1.0f, 1.0f);
  kl::DeviceBuffer<int> bufRow(rowptr), bufCol(col);
  kl::DeviceBuffer<float> bufVal(val), bufX(X), bufY((size_t)n);
  bufY.poison();
  const int *dRow = bufRow.get(), *dCol = bufCol.get();
  const float *dVal = bufVal.get(), *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  timer.run("spmv_powerlaw", kl::dims({n}), spmv_powerlaw,
            [&] { spmv_powerlaw<<<grid, block>>>(n, dRow, dCol, dVal, dX, dY); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = rowptr[(size_t)i]; k < rowptr[(size_t)i + 1]; ++k)
      ref[(size_t)i] += (double)val[(size_t)k] * X[(size_t)col[(size_t)k]];
  kl::Checker check("spmv_powerlaw", kl::dims({n}));
  check.compare("y", bufY.download(), ref, 1e-4);
  return check.finish();
}

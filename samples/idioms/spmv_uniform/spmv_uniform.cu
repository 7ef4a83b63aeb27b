// SPMV_UNIFORM: y = A x for a sparse N x N matrix A in compressed sparse row form (row
// pointers, column indices, values), one thread per row, with every row the same length:
// kRowLen = 24 entries (min(24, N) when N is smaller), at columns spread over the whole
// matrix: entry k of row i sits at column (i + k * step + o) mod N, step = floor(N / 24) and
// o a hash of (i, k) in [0, step), so a row's columns are distinct, one in each 24th of the
// matrix, and x is gathered from scattered places. The kernel is spmv_csr's (and
// spmv_powerlaw's); what differs is the matrix: spmv_csr's rows are skewed (2 to 91
// entries, mean ~24, half of them in a band around the diagonal), spmv_powerlaw's follow a
// power law (3 to 2048 entries), these are all 24 long, so every thread of a warp loops
// the same count and the work is balanced. A program of its own so that the model sees the
// three row-length distributions as three kernels. Deterministic: the same N gives the
// same matrix.
// Usage: spmv_uniform [N] [--time [REPS]]
#include "idioms.h"

constexpr int kRowLen = 24;

#pragma klaraptor kernel(spmv_uniform) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./spmv_uniform {N}", sizes=[2048, 4096, 6144, 8192])
__global__ void spmv_uniform(int n, const int *rowptr, const int *col, const float *val,
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
  const int len = std::min(kRowLen, n);
  if ((long)n * len > INT_MAX) {
    std::fprintf(stderr, "spmv_uniform: N = %d gives more than %d entries\n", n, INT_MAX);
    return 1;
  }
  const long step = std::max<long>(1, n / kRowLen);
  std::vector<int> rowptr((size_t)n + 1);
  for (int i = 0; i <= n; ++i) rowptr[(size_t)i] = i * len;
  const size_t nnz = (size_t)n * len;
  std::vector<int> col(nnz);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < len; ++k) {
      const size_t at = (size_t)i * len + k;
      const long off = (long)(kl::unit(32, at) * (float)step) % step;
      col[at] = (int)(((long)i + k * step + off) % n);
    }
  std::vector<float> val = kl::fill(nnz, 33, -1.0f, 1.0f);
  std::vector<float> X = kl::fill((size_t)n, 34, -1.0f, 1.0f);
  kl::DeviceBuffer<int> bufRow(rowptr), bufCol(col);
  kl::DeviceBuffer<float> bufVal(val), bufX(X), bufY((size_t)n);
  bufY.poison();
  const int *dRow = bufRow.get(), *dCol = bufCol.get();
  const float *dVal = bufVal.get(), *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  timer.run("spmv_uniform", kl::dims({n}), spmv_uniform,
            [&] { spmv_uniform<<<grid, block>>>(n, dRow, dCol, dVal, dX, dY); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = rowptr[(size_t)i]; k < rowptr[(size_t)i + 1]; ++k)
      ref[(size_t)i] += (double)val[(size_t)k] * X[(size_t)col[(size_t)k]];
  kl::Checker check("spmv_uniform", kl::dims({n}));
  check.compare("y", bufY.download(), ref, 1e-4);
  return check.finish();
}

// SPMV_CSR: y = A x for a sparse N x N matrix A in compressed sparse row form (row pointers,
// column indices, values), one thread per row. The rows are deliberately uneven: row i holds
// 2 + floor(90 u^3) entries (u uniform in [0, 1) from a hash of i: most rows short, a few
// up to 91 long, mean ~24), half of them within a band around the diagonal and half at
// hashed columns anywhere, so the threads of a warp loop for different counts and gather x
// from scattered places. Deterministic: the same N gives the same matrix.
// Usage: spmv_csr [N] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(spmv_csr) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./spmv_csr {N}", sizes=[2048, 4096, 6144, 8192])
__global__ void spmv_csr(int n, const int *rowptr, const int *col, const float *val,
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
  // The matrix: row lengths, then columns and values.
  std::vector<int> rowptr((size_t)n + 1, 0);
  for (int i = 0; i < n; ++i) {
    float u = kl::unit(11, (uint64_t)i);
    long len = 2 + (long)(90.0f * u * u * u);
    if (len > n) len = n;
    rowptr[(size_t)i + 1] = rowptr[(size_t)i] + (int)len;
  }
  const size_t nnz = (size_t)rowptr[(size_t)n];
  std::vector<int> col(nnz);
  for (int i = 0; i < n; ++i) {
    const int begin = rowptr[(size_t)i], len = rowptr[(size_t)i + 1] - begin;
    for (int k = 0; k < len; ++k) {
      long c;
      if (k % 2 == 0) // the band: i - len/2 .. i + len/2, wrapped into the matrix
        c = ((long)i + k - len / 2 + n) % n;
      else
        c = (long)(kl::unit(12, (uint64_t)begin + k) * (float)n) % n;
      col[(size_t)begin + k] = (int)c;
    }
  }
  std::vector<float> val = kl::fill(nnz, 13, -1.0f, 1.0f);
  std::vector<float> X = kl::fill((size_t)n, 14, -1.0f, 1.0f);
  kl::DeviceBuffer<int> bufRow(rowptr), bufCol(col);
  kl::DeviceBuffer<float> bufVal(val), bufX(X), bufY((size_t)n);
  bufY.poison();
  const int *dRow = bufRow.get(), *dCol = bufCol.get();
  const float *dVal = bufVal.get(), *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  dim3 grid(kl::cdiv(n, block.x));
  timer.run("spmv_csr", kl::dims({n}), spmv_csr,
            [&] { spmv_csr<<<grid, block>>>(n, dRow, dCol, dVal, dX, dY); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = rowptr[(size_t)i]; k < rowptr[(size_t)i + 1]; ++k)
      ref[(size_t)i] += (double)val[(size_t)k] * X[(size_t)col[(size_t)k]];
  kl::Checker check("spmv_csr", kl::dims({n}));
  check.compare("y", bufY.download(), ref, 1e-4);
  return check.finish();
}

// MATVEC_WARP: y = A x for a dense M x N matrix A (row-major). One warp per row: the block
// is 32 x by, lane threadIdx.x walks the row with a stride of 32 (lane l adds columns l,
// l + 32, ...: the warp reads consecutive addresses), then the 32 partial sums are combined
// by a butterfly of __shfl_xor_sync (every lane ends with the row's sum) and lane 0 writes
// it. A block holds by rows, row blockIdx.x * by + threadIdx.y: the rows run along the
// grid's x axis (grid ceil(M, by) x 1), so M is not bound by the y axis' 65535 blocks. The
// lanes must be a whole warp: the annotation allows bx == 32 (by 1 .. 32).
// Usage: matvec_warp [M [N]] [--time [REPS]]
#include "idioms.h"

constexpr unsigned kWarp = 32;

#pragma klaraptor kernel(matvec_warp) data(M=m, N=n) dim(2) grid(ceil(M, by), 1) \
        block(bx == 32) \
        profile(run="./matvec_warp {M} {N}", sizes=[256, 512, (1024, 768), 1024])
__global__ void matvec_warp(const float *A, const float *x, float *y, int m, int n) {
  KL_RECORD_BLOCK();
  const size_t row = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= (size_t)m) return; // the whole warp: its 32 lanes share the row
  const float *a = A + row * n;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < n; j += kWarp) acc = fmaf(a[j], x[j], acc);
  for (int o = kWarp / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x == 0) y[row] = acc;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"M", "N"}, {4096, 4096});
  const int m = (int)o.sizes[0], n = (int)o.sizes[1];
  std::vector<float> A = kl::fill((size_t)m * n, 1, -1.0f, 1.0f);
  std::vector<float> X = kl::fill((size_t)n, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufX(X), bufY((size_t)m);
  bufY.poison();
  const float *dA = bufA.get(), *dX = bufX.get();
  float *dY = bufY.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 4));
  if (block.x != kWarp || block.z != 1) {
    std::fprintf(stderr, "matvec_warp: the block must be 32 x by\n");
    return 2;
  }
  dim3 grid(kl::cdiv(m, block.y), 1);
  timer.run("matvec_warp", kl::dims({m, n}), matvec_warp,
            [&] { matvec_warp<<<grid, block>>>(dA, dX, dY, m, n); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)m, 0.0);
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) ref[(size_t)r] += (double)A[(size_t)r * n + j] * X[(size_t)j];
  kl::Checker check("matvec_warp", kl::dims({m, n}));
  check.compare("y", bufY.download(), ref, 1e-4);
  return check.finish();
}

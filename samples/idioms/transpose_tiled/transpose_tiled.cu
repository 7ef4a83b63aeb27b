// TRANSPOSE_TILED: B = A^T for an R x C matrix A (row-major; B is C x R). Each block moves
// one 32 x 32 tile through shared memory: it reads the tile's rows of A (consecutive threads
// along a row, so the reads coalesce), waits at __syncthreads, and writes the tile's columns
// as rows of B (coalesced again). The tile is 32 x 33 floats so that reading a column of it
// touches 32 different shared-memory banks. The block is 32 wide and 32 / by rows of the tile
// fall to each thread: the annotation allows bx == 32 with by dividing 32 (6 shapes).
// Usage: transpose_tiled [R [C]] [--time [REPS]]
#include "idioms.h"

constexpr int kTile = 32;

#pragma klaraptor kernel(transpose_tiled) data(R=rows, C=cols) dim(2) \
        grid(ceil(C, 32), ceil(R, 32)) \
        block(bx == 32 && 32 % by == 0) \
        profile(run="./transpose_tiled {R} {C}", sizes=[64, 128, (256, 192), 256])
__global__ void transpose_tiled(const float *A, float *B, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  KL_RECORD_BLOCK();
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int tx = threadIdx.x;
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int r = r0 + dy, c = c0 + tx;
    if (r < rows && c < cols) tile[dy][tx] = A[(size_t)r * cols + c];
  }
  __syncthreads();
  // Row c0 + dy of B holds column c0 + dy of A; its entries r0 + tx come from the tile's
  // column dy.
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int c = c0 + dy, r = r0 + tx;
    if (c < cols && r < rows) B[(size_t)c * rows + r] = tile[tx][dy];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"R", "C"}, {2048, 2048});
  const int rows = (int)o.sizes[0], cols = (int)o.sizes[1];
  const size_t total = (size_t)rows * cols;
  std::vector<float> A = kl::fill(total, 1, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 8));
  if (block.x != (unsigned)kTile || kTile % block.y != 0 || block.z != 1) {
    std::fprintf(stderr, "transpose_tiled: the block must be 32 x by with by dividing 32\n");
    return 2;
  }
  dim3 grid(kl::cdiv(cols, kTile), kl::cdiv(rows, kTile));
  timer.run("transpose_tiled", kl::dims({rows, cols}), transpose_tiled,
            [&] { transpose_tiled<<<grid, block>>>(dA, dB, rows, cols); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[(size_t)c * rows + r] = A[(size_t)r * cols + c];
  kl::Checker check("transpose_tiled", kl::dims({rows, cols}));
  check.compare("B", bufB.download(), ref, 0.0);
  return check.finish();
}

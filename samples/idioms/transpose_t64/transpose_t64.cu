// TRANSPOSE_T64: B = A^T for an R x C matrix A (row-major; B is C x R), through a 64 x 64
// tile of shared memory per block, twice transpose_tiled's edge (4 times its data per block).
// The block is 64 threads wide, one per column of the tile, and by rows tall: each thread
// moves 64 / by rows of the tile (64 at by = 1, 4 at by = 16). The block reads the tile's
// rows of A (consecutive threads along a row: the reads coalesce), waits at __syncthreads,
// then writes the tile's columns as rows of B (coalesced again), reading each column of the
// tile. The tile is stored 64 x 65 floats: with a row pitch of 65 the 32 lanes of a warp
// reading a column touch 32 different shared-memory banks. 16 640 bytes of static shared
// memory per block. The annotation allows bx == 64 with by dividing 64 (by = 1, 2, 4, 8, 16:
// 5 shapes; 64 x 32 would be 2048 threads).
// Usage: transpose_t64 [R [C]] [--time [REPS]]
#include "idioms.h"

constexpr int kTile = 64;

#pragma klaraptor kernel(transpose_t64) data(R=rows, C=cols) dim(2) \
        grid(ceil(C, 64), ceil(R, 64)) \
        block(bx == 64 && 64 % by == 0) \
        profile(run="./transpose_t64 {R} {C}", sizes=[128, 256, (512, 384), 512])
__global__ void transpose_t64(const float *A, float *B, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  KL_RECORD_BLOCK();
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int tx = threadIdx.x;
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int r = r0 + dy, c = c0 + tx;
    if (r < rows && c < cols) tile[dy][tx] = A[(size_t)r * cols + c];
  }
  __syncthreads();
  // Row c0 + dy of B is column c0 + dy of A: its entries r0 + tx are the tile's column dy.
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int c = c0 + dy, r = r0 + tx;
    if (c < cols && r < rows) B[(size_t)c * rows + r] = tile[tx][dy];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"R", "C"}, {2048, 2048});
  const int rows = (int)o.sizes[0], cols = (int)o.sizes[1];
  const size_t total = (size_t)rows * cols;
  std::vector<float> A = kl::fill(total, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(64, 8));
  if (block.x != (unsigned)kTile || kTile % block.y != 0 || block.z != 1) {
    std::fprintf(stderr, "transpose_t64: the block must be 64 x by with by dividing 64\n");
    return 2;
  }
  dim3 grid(kl::cdiv(cols, kTile), kl::cdiv(rows, kTile));
  timer.run("transpose_t64", kl::dims({rows, cols}), transpose_t64,
            [&] { transpose_t64<<<grid, block>>>(dA, dB, rows, cols); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[(size_t)c * rows + r] = A[(size_t)r * cols + c];
  kl::Checker check("transpose_t64", kl::dims({rows, cols}));
  check.compare("B", bufB.download(), ref, 0.0);
  return check.finish();
}

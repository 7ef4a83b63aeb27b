// TRANSPOSE_NOPAD: B = A^T for an R x C matrix A (row-major; B is C x R), through a 32 x 32
// shared tile per block WITHOUT padding: transpose_tiled's kernel with its tile stored
// 32 x 32 instead of 32 x 33, to measure what the padding is for. The block reads the tile's
// rows of A (consecutive threads along a row: coalesced, and a warp writes one row of the
// tile, 32 consecutive words in 32 banks), waits at __syncthreads, then writes the tile's
// columns as rows of B (coalesced), each warp reading a column of the tile: with a row pitch
// of 32 floats its 32 words all lie in the same shared-memory bank, a 32-way bank conflict
// that serialises the read (transpose_tiled's pitch of 33 spreads them over 32 banks). The
// block is 32 wide and 32 / by rows of the tile fall to each thread: the annotation allows
// bx == 32 with by dividing 32 (6 shapes).
// Usage: transpose_nopad [R [C]] [--time [REPS]]
#include "idioms.h"

constexpr int kTile = 32;

#pragma klaraptor kernel(transpose_nopad) data(R=rows, C=cols) dim(2) \
        grid(ceil(C, 32), ceil(R, 32)) \
        block(bx == 32 && 32 % by == 0) \
        profile(run="./transpose_nopad {R} {C}", sizes=[64, 128, (256, 192), 256])
__global__ void transpose_nopad(const float *A, float *B, int rows, int cols) {
  __shared__ float tile[kTile][kTile]; // no padding column: the column reads conflict
  KL_RECORD_BLOCK();
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int tx = threadIdx.x;
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int r = r0 + dy, c = c0 + tx;
    if (r < rows && c < cols) tile[dy][tx] = A[(size_t)r * cols + c];
  }
  __syncthreads();
  // Row c0 + dy of B is column c0 + dy of A: its entries r0 + tx are the tile's column dy,
  // words tx * 32 + dy, all in bank dy.
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int c = c0 + dy, r = r0 + tx;
    if (c < cols && r < rows) B[(size_t)c * rows + r] = tile[tx][dy];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"R", "C"}, {2048, 2048});
  const int rows = (int)o.sizes[0], cols = (int)o.sizes[1];
  const size_t total = (size_t)rows * cols;
  std::vector<float> A = kl::fill(total, 4, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 8));
  if (block.x != (unsigned)kTile || kTile % block.y != 0 || block.z != 1) {
    std::fprintf(stderr, "transpose_nopad: the block must be 32 x by with by dividing 32\n");
    return 2;
  }
  dim3 grid(kl::cdiv(cols, kTile), kl::cdiv(rows, kTile));
  timer.run("transpose_nopad", kl::dims({rows, cols}), transpose_nopad,
            [&] { transpose_nopad<<<grid, block>>>(dA, dB, rows, cols); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[(size_t)c * rows + r] = A[(size_t)r * cols + c];
  kl::Checker check("transpose_nopad", kl::dims({rows, cols}));
  check.compare("B", bufB.download(), ref, 0.0);
  return check.finish();
}

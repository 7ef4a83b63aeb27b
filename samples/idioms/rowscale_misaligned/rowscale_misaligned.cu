// ROWSCALE_MISALIGNED: B[r][c] = A[r][c] * s[r] + t[c] for an R x C matrix (row-major, B the
// same shape): every row scaled by its own factor s[r], every column shifted by its own t[c].
// One thread per element, 2-D block and grid. The point is misaligned rows: the row length C
// is the pitch as it is (no padding), so when C is not a multiple of 32 floats row r starts
// at byte 4 r C, which is not a multiple of the 32-byte sector nor of a warp's 128 bytes: a
// warp's 32 consecutive elements of a row then straddle one more sector (and one more 128-byte
// line) than an aligned warp's, and which rows are aligned changes with C. The profile sizes
// are mostly such C (and R): 67, 100, 197, 253 beside one aligned 128.
// Usage: rowscale_misaligned [R [C]] [--time [REPS]]
#include "idioms.h"

#pragma klaraptor kernel(rowscale_misaligned) data(R=rows, C=cols) dim(2) \
        grid(ceil(C, bx), ceil(R, by)) \
        profile(run="./rowscale_misaligned {R} {C}", \
                sizes=[(64, 67), (96, 100), (128, 128), (200, 197), (256, 253)])
__global__ void rowscale_misaligned(const float *A, const float *s, const float *t, float *B,
                                    int rows, int cols) {
  KL_RECORD_BLOCK();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) {
    const size_t at = (size_t)r * cols + c;
    B[at] = A[at] * s[r] + t[c];
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"R", "C"}, {2048, 2047});
  const int rows = (int)o.sizes[0], cols = (int)o.sizes[1];
  const size_t total = (size_t)rows * cols;
  std::vector<float> A = kl::fill(total, 1, -1.0f, 1.0f);
  std::vector<float> S = kl::fill((size_t)rows, 2, 0.5f, 2.0f);
  std::vector<float> T = kl::fill((size_t)cols, 3, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufS(S), bufT(T), bufB(total);
  bufB.poison();
  const float *dA = bufA.get(), *dS = bufS.get(), *dT = bufT.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 8));
  dim3 grid(kl::cdiv(cols, block.x), kl::cdiv(rows, block.y));
  timer.run("rowscale_misaligned", kl::dims({rows, cols}), rowscale_misaligned,
            [&] { rowscale_misaligned<<<grid, block>>>(dA, dS, dT, dB, rows, cols); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(total);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t at = (size_t)r * cols + c;
      ref[at] = (double)A[at] * S[(size_t)r] + T[(size_t)c];
    }
  kl::Checker check("rowscale_misaligned", kl::dims({rows, cols}));
  check.compare("B", bufB.download(), ref, 1e-5);
  return check.finish();
}

// BLUR2D_256: a 5 x 5 binomial blur of an H x W image (row-major), out[y][x] =
// sum_{i,j=-2..2} b[i] b[j] in[y+i][x+j] / 256 with b = (1, 4, 6, 4, 1) and the image
// clamped at its edges. One thread per output pixel, 25 reads from global memory (no
// staging: neighbouring threads' reads overlap and the caches serve them). The block must
// hold exactly 256 threads, in any rectangle: the annotation allows bx * by == 256 (9 shapes,
// 1 x 256 .. 256 x 1), the question being which rectangle the caches like best.
// Usage: blur2d_256 [H [W]] [--time [REPS]]
#include "idioms.h"

constexpr unsigned kThreads = 256;

// v clamped to 0 .. hi.
__device__ __forceinline__ int clamp_to(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

#pragma klaraptor kernel(blur2d) data(H=h, W=w) dim(2) grid(ceil(W, bx), ceil(H, by)) \
        block(bx * by == 256) \
        profile(run="./blur2d_256 {H} {W}", sizes=[128, 256, (512, 384), 512])
__global__ void blur2d(const float *in, float *out, int h, int w) {
  KL_RECORD_BLOCK();
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (y >= h || x >= w) return;
  const float b[5] = {1.0f, 4.0f, 6.0f, 4.0f, 1.0f};
  float acc = 0.0f;
#pragma unroll
  for (int i = -2; i <= 2; ++i) {
    const int yy = clamp_to(y + i, h - 1);
    const float *row = in + (size_t)yy * w;
    float racc = 0.0f;
#pragma unroll
    for (int j = -2; j <= 2; ++j) racc = fmaf(b[j + 2], row[clamp_to(x + j, w - 1)], racc);
    acc = fmaf(b[i + 2], racc, acc);
  }
  out[(size_t)y * w + x] = acc * (1.0f / 256.0f);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"H", "W"}, {2048, 2048});
  const int h = (int)o.sizes[0], w = (int)o.sizes[1];
  const size_t total = (size_t)h * w;
  std::vector<float> A = kl::fill(total, 1, 0.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufB(total);
  bufB.poison();
  const float *dA = bufA.get();
  float *dB = bufB.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(32, 8));
  if (block.x * block.y != kThreads || block.z != 1) {
    std::fprintf(stderr, "blur2d_256: the block must be 2-D with bx * by == %u\n", kThreads);
    return 2;
  }
  dim3 grid(kl::cdiv(w, block.x), kl::cdiv(h, block.y));
  timer.run("blur2d", kl::dims({h, w}), blur2d,
            [&] { blur2d<<<grid, block>>>(dA, dB, h, w); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  const double b[5] = {1, 4, 6, 4, 1};
  std::vector<double> ref(total);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      double acc = 0.0;
      for (int i = -2; i <= 2; ++i)
        for (int j = -2; j <= 2; ++j) {
          const int yy = std::min(std::max(y + i, 0), h - 1);
          const int xx = std::min(std::max(x + j, 0), w - 1);
          acc += b[i + 2] * b[j + 2] * A[(size_t)yy * w + xx];
        }
      ref[(size_t)y * w + x] = acc / 256.0;
    }
  kl::Checker check("blur2d_256", kl::dims({h, w}));
  check.compare("out", bufB.download(), ref, 1e-5);
  return check.finish();
}

// The layouts sample: its kernels are defined, and annotated, in files that this one
// includes: an included .cu (brighten.cu) and a header (kernels/blur.cuh). Brightens and
// blurs a w x h image on the device and checks both against a CPU reference.
// Usage: layouts [w [h]]   (default 1024 x w)
#include "brighten.cu"
#include "blur.cuh"
#include <algorithm>
#include <cmath>
#include <vector>

int main(int argc, char **argv) {
  const int w = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int h = argc > 2 ? std::atoi(argv[2]) : w;
  if (w <= 0 || h <= 0) {
    std::fprintf(stderr, "usage: %s [w > 0 [h > 0]]\n", argv[0]);
    return 1;
  }
  const size_t nn = (size_t)w * h;
  std::vector<float> img(nn);
  unsigned s = 2463534242u;
  for (auto &v : img) {
    s ^= s << 13; s ^= s >> 17; s ^= s << 5;
    v = (float)(s & 0xffff) / 65536.0f;
  }
  float *d_img, *d_bright, *d_blur;
  CHECK(cudaMalloc(&d_img, nn * sizeof(float)));
  CHECK(cudaMalloc(&d_bright, nn * sizeof(float)));
  CHECK(cudaMalloc(&d_blur, nn * sizeof(float)));
  CHECK(cudaMemcpy(d_img, img.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
  gpu_brighten(d_img, d_bright, 1.5f, 0.25f, (int)nn);
  gpu_blur3(d_bright, d_blur, w, h);
  std::vector<float> bright(nn), blur(nn);
  CHECK(cudaMemcpy(bright.data(), d_bright, nn * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(blur.data(), d_blur, nn * sizeof(float), cudaMemcpyDeviceToHost));

  double worst = 0;
  for (size_t i = 0; i < nn; ++i)
    worst = std::max(worst, std::fabs((1.5 * img[i] + 0.25) - bright[i]));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      double acc = 0;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          int xx = std::min(std::max(x + dx, 0), w - 1);
          int yy = std::min(std::max(y + dy, 0), h - 1);
          acc += bright[(size_t)yy * w + xx];
        }
      worst = std::max(worst, std::fabs(acc / 9.0 - blur[(size_t)y * w + x]));
    }
  bool ok = worst < 1e-5;
  std::printf("w=%d h=%d max_abs_err=%.3e %s\n", w, h, worst, ok ? "OK" : "FAILED");
  CHECK(cudaFree(d_img));
  CHECK(cudaFree(d_bright));
  CHECK(cudaFree(d_blur));
  return ok ? 0 : 1;
}

// Multiplies two random n x n matrices and runs a saxpy on the device, and checks both
// against a CPU reference. Usage: matmul [n]
#include "kernels.h"
#include <cmath>
#include <vector>

static float rnd(unsigned &s) {
  s = s * 1664525u + 1013904223u;
  return (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 512;
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s [n > 0]\n", argv[0]);
    return 1;
  }
  size_t nn = (size_t)n * n;
  std::vector<float> A(nn), B(nn), C(nn), x(nn), y(nn);
  unsigned s = 12345u;
  for (size_t i = 0; i < nn; ++i) {
    A[i] = rnd(s); B[i] = rnd(s); x[i] = rnd(s); y[i] = rnd(s);
  }
  float *dA, *dB, *dC, *dx, *dy;
  CHECK(cudaMalloc(&dA, nn * sizeof(float)));
  CHECK(cudaMalloc(&dB, nn * sizeof(float)));
  CHECK(cudaMalloc(&dC, nn * sizeof(float)));
  CHECK(cudaMalloc(&dx, nn * sizeof(float)));
  CHECK(cudaMalloc(&dy, nn * sizeof(float)));
  CHECK(cudaMemcpy(dA, A.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dx, x.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dC, 0xff, nn * sizeof(float))); // poison: every element must be written

  gpu_mm(dA, dB, dC, n);
  gpu_saxpy(2.0f, dx, dy, (int)nn);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> C_gpu(nn), y_gpu(nn);
  CHECK(cudaMemcpy(C_gpu.data(), dC, nn * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(y_gpu.data(), dy, nn * sizeof(float), cudaMemcpyDeviceToHost));

  double err = 0, ref = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int k = 0; k < n; ++k) acc += (double)A[i * n + k] * B[k * n + j];
      double d = acc - C_gpu[(size_t)i * n + j];
      err += d * d; ref += acc * acc;
    }
  double mm_rel = std::sqrt(err / ref);
  err = ref = 0;
  for (size_t i = 0; i < nn; ++i) {
    double r = 2.0 * x[i] + y[i];
    double d = r - y_gpu[i];
    err += d * d; ref += r * r;
  }
  double saxpy_rel = std::sqrt(err / ref);
  bool ok = mm_rel < 1e-4 && saxpy_rel < 1e-6;
  std::printf("n=%d mm_rel_err=%.3e saxpy_rel_err=%.3e %s\n", n, mm_rel, saxpy_rel, ok ? "OK" : "FAILED");
  cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dx); cudaFree(dy);
  return ok ? 0 : 1;
}

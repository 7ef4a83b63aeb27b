// Launch-injection check and overhead benchmark, built twice (plain nvcc and klaraptor-cc)
// and run on a GPU by bench/gpu/run_launch_check.sh.
//
//   launch_check check <n> <out.bin>   run every kernel (templates, a loop, a stream with
//                                       dynamic shared memory, an unannotated kernel), write
//                                       all results to out.bin and print each kernel's blockDim
//   launch_check bench <launches>       time <launches> launches of an empty annotated kernel
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));   \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

__device__ void record(unsigned *bd) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    bd[0] = blockDim.x; bd[1] = blockDim.y; bd[2] = blockDim.z;
  }
}

#pragma klaraptor kernel(scale) data(n) dim(1)
__global__ void scale(float *x, float a, int n, unsigned *bd) {
  record(bd);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + 1.0f;
}

#pragma klaraptor kernel(axpy) data(n) dim(1) block(bx >= 64)
template <typename T>
__global__ void axpy(T a, const T *x, T *y, int n, unsigned *bd) {
  record(bd);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// 2-D, dynamic shared memory (one row of the block), launched on a stream.
#pragma klaraptor kernel(rowsum) data(N=n) dim(2)
__global__ void rowsum(const float *in, float *out, int n, unsigned *bd) {
  extern __shared__ float tile[];
  record(bd);
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
  float v = (r < n && c < n) ? in[(size_t)r * n + c] : 0.0f;
  if (threadIdx.y == 0) tile[threadIdx.x] = 0.0f;
  __syncthreads();
  atomicAdd(&tile[threadIdx.x], v);
  __syncthreads();
  if (threadIdx.y == 0 && c < n) atomicAdd(&out[c], tile[threadIdx.x]);
}

__global__ void unannotated(float *x, int n, unsigned *bd) {
  record(bd);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] -= 0.5f;
}

#pragma klaraptor kernel(empty) data(n) dim(1)
__global__ void empty(int n) {}

static void fill(std::vector<float> &v, unsigned s) {
  for (auto &x : v) { s = s * 1664525u + 1013904223u; x = (float)((s >> 9) & 0xff) / 16.0f; }
}

int main(int argc, char **argv) {
  if (argc >= 3 && !std::strcmp(argv[1], "bench")) {
    int launches = std::atoi(argv[2]);
    empty<<<1, 32>>>(1);
    CHECK(cudaDeviceSynchronize());
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < launches; ++i) empty<<<1, 32>>>(1);
      CHECK(cudaDeviceSynchronize());
      auto t1 = std::chrono::steady_clock::now();
      std::printf("launches=%d total_us=%.1f per_launch_ns=%.1f\n", launches,
                  std::chrono::duration<double, std::micro>(t1 - t0).count(),
                  std::chrono::duration<double, std::nano>(t1 - t0).count() / launches);
    }
    return 0;
  }
  if (argc < 4 || std::strcmp(argv[1], "check")) {
    std::fprintf(stderr, "usage: %s check <n> <out.bin> | bench <launches>\n", argv[0]);
    return 1;
  }
  int n = std::atoi(argv[2]);
  size_t nn = (size_t)n * n;
  std::vector<float> x(nn), y(nn), m(nn);
  std::vector<double> xd(n), yd(n);
  fill(x, 1); fill(y, 2); fill(m, 3);
  for (int i = 0; i < n; ++i) { xd[i] = x[i] * 0.5; yd[i] = y[i] * 0.25; }
  float *dx, *dy, *dm, *dsum; double *dxd, *dyd; unsigned *bd;
  CHECK(cudaMalloc(&dx, nn * 4)); CHECK(cudaMalloc(&dy, nn * 4)); CHECK(cudaMalloc(&dm, nn * 4));
  CHECK(cudaMalloc(&dsum, n * 4)); CHECK(cudaMalloc(&dxd, n * 8)); CHECK(cudaMalloc(&dyd, n * 8));
  CHECK(cudaMalloc(&bd, 5 * 3 * sizeof(unsigned)));
  CHECK(cudaMemset(bd, 0, 5 * 3 * sizeof(unsigned)));
  CHECK(cudaMemset(dsum, 0, n * 4));
  CHECK(cudaMemcpy(dx, x.data(), nn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), nn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dm, m.data(), nn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dxd, xd.data(), n * 8, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dyd, yd.data(), n * 8, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));

  for (int rep = 0; rep < 3; ++rep) {           // launches in a loop
    int len = (int)nn - rep;                     // a different data size each time
    scale<<<(len + 255) / 256, 256>>>(dx, 0.5f, len, bd + 0);
    CHECK(cudaGetLastError());
  }
  axpy<float><<<(n * n + 127) / 128, 128>>>(2.0f, dx, dy, n * n, bd + 3);
  axpy<double><<<(n + 127) / 128, 128>>>(3.0, dxd, dyd, n, bd + 6);
  dim3 b2(32, 8), g2((n + 31) / 32, (n + 7) / 8);
  rowsum<<<g2, b2, 32 * sizeof(float), st>>>(dm, dsum, n, bd + 9);
  unannotated<<<(n + 63) / 64, 64>>>(dx, n, bd + 12);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  // rowsum's shared tile holds blockDim.x floats: the launch gave 32 * 4 bytes, so a shape
  // with blockDim.x > 32 would overrun it; the check below prints the shape actually used.

  std::vector<float> ox(nn), oy(nn), osum(n); std::vector<double> oyd(n); unsigned obd[15];
  CHECK(cudaMemcpy(ox.data(), dx, nn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(oy.data(), dy, nn * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(osum.data(), dsum, n * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(oyd.data(), dyd, n * 8, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(obd, bd, sizeof obd, cudaMemcpyDeviceToHost));
  FILE *f = std::fopen(argv[3], "wb");
  if (!f) { std::perror(argv[3]); return 1; }
  std::fwrite(ox.data(), 4, nn, f); std::fwrite(oy.data(), 4, nn, f);
  std::fwrite(osum.data(), 4, n, f); std::fwrite(oyd.data(), 8, n, f);
  std::fclose(f);
  const char *names[5] = {"scale", "axpy<float>", "axpy<double>", "rowsum", "unannotated"};
  for (int k = 0; k < 5; ++k)
    std::printf("%s blockDim=%ux%ux%u\n", names[k], obd[3 * k], obd[3 * k + 1], obd[3 * k + 2]);
  return 0;
}

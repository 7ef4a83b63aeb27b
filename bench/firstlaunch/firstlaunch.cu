// What an instrumented program pays at the first launch of each launch key, against the same
// program built by plain nvcc: the matmul sample's saxpy (samples/matmul/saxpy.cu, annotated,
// with committed H200 profiles), launched at KEYS distinct sizes (each a new key: a decision,
// and refinement's setup), each size's first launch timed on the host from just before the
// launch call to just after it, then its second launch (a memo hit) the same way. Before any
// of them: the CUDA context, the allocations and one launch of an unannotated kernel, so that
// module loading is paid outside the figures; and the two ways of reading the device's name
// (the CUDA runtime's cudaGetDeviceProperties, the driver's cuDeviceGetName), each timed.
//
//   firstlaunch [KEYS]        prints "first <n> <us>" and "second <n> <us>" per key, then
//                             "props_us", "driver_name_us"
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dlfcn.h>
#include <vector>

#include "../../samples/matmul/kernels.h"

__global__ void touch(float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  int keys = argc > 1 ? atoi(argv[1]) : 16;
  const int max_n = 1 << 22;
  float *x, *y;
  CHECK(cudaMalloc(&x, max_n * sizeof(float)));
  CHECK(cudaMalloc(&y, max_n * sizeof(float)));
  CHECK(cudaMemset(x, 0, max_n * sizeof(float)));
  CHECK(cudaMemset(y, 0, max_n * sizeof(float)));
  touch<<<max_n / 256, 256>>>(y, max_n);
  CHECK(cudaDeviceSynchronize());
  // saxpy's module is the same as touch's: loaded. Each key's first launch, then its second.
  std::vector<double> first(keys), second(keys);
  for (int k = 0; k < keys; k++) {
    int n = 100000 + 7919 * k;
    double t0 = now_us();
    gpu_saxpy(2.0f, x, y, n);
    double t1 = now_us();
    CHECK(cudaDeviceSynchronize());
    double t2 = now_us();
    gpu_saxpy(2.0f, x, y, n);
    double t3 = now_us();
    CHECK(cudaDeviceSynchronize());
    first[k] = t1 - t0;
    second[k] = t3 - t2;
  }
  for (int k = 0; k < keys; k++)
    printf("first %d %.1f\nsecond %d %.1f\n", 100000 + 7919 * k, first[k], 100000 + 7919 * k,
           second[k]);
  cudaDeviceProp p;
  double t0 = now_us();
  CHECK(cudaGetDeviceProperties(&p, 0));
  double t1 = now_us();
  printf("props_us %.1f\n", t1 - t0);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  typedef int (*get_t)(int *, int);
  typedef int (*name_t)(char *, int, int);
  get_t get = lib ? (get_t)dlsym(lib, "cuDeviceGet") : nullptr;
  name_t name = lib ? (name_t)dlsym(lib, "cuDeviceGetName") : nullptr;
  char buf[256] = {0};
  int dev = 0;
  t0 = now_us();
  int ok = get && name && get(&dev, 0) == 0 && name(buf, sizeof buf, dev) == 0;
  t1 = now_us();
  printf("driver_name_us %.1f %s\n", ok ? t1 - t0 : -1.0, ok ? buf : "(unavailable)");
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  return 0;
}

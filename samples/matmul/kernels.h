#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

// C = A * B for n x n row-major matrices, on the device.
void gpu_mm(const float *A, const float *B, float *C, int n);
// y = a * x + y, on the device.
void gpu_saxpy(float a, const float *x, float *y, int n);

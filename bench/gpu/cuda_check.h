// CHECK(call): a CUDA runtime call that must succeed; on an error the stand-alone GPU
// benchmarks under bench/gpu/ print where and why, and exit with status 2. (launch_check.cu
// keeps its own copy: bench/gpu/clang_backend/build.sh compiles it alone, away from here.)
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));   \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

/* A tiny fake of the five CUDA runtime functions the shim calls, so that the test binary links
 * and runs without cudart or a GPU. It describes two devices: 0 is H200-like, 1 A100-like;
 * fake_cudart_device selects the current one (-1: cudaGetDevice fails with
 * cudaErrorNoDevice). fake_cudart_fail_attr makes cudaDeviceGetAttribute fail for one
 * attribute. */
#include <string.h>

#include <cuda_runtime_api.h>

int fake_cudart_device = 0;
int fake_cudart_fail_attr = -1;
int fake_cudart_last_error = 0;

cudaError_t cudaGetDevice(int *device) {
  if (fake_cudart_device < 0) {
    fake_cudart_last_error = cudaErrorNoDevice;
    return cudaErrorNoDevice;
  }
  *device = fake_cudart_device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = (cudaError_t)fake_cudart_last_error;
  fake_cudart_last_error = 0;
  return e;
}

const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaErrorInvalidValue ? "invalid argument" : "some error";
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (device < 0 || device > 1 || (int)attr == fake_cudart_fail_attr) {
    fake_cudart_last_error = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  int h200 = device == 0;
  switch (attr) {
  case cudaDevAttrMultiProcessorCount: *value = h200 ? 132 : 108; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
  case cudaDevAttrMaxBlockDimX: *value = 1024; break;
  case cudaDevAttrMaxBlockDimY: *value = 1024; break;
  case cudaDevAttrMaxBlockDimZ: *value = 64; break;
  case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
  case cudaDevAttrMaxGridDimY: *value = 65535; break;
  case cudaDevAttrMaxGridDimZ: *value = 65535; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *value = 32; break;
  case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 65536; break;
  case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = 49152; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = h200 ? 232448 : 166912; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = h200 ? 233472 : 167936; break;
  case cudaDevAttrComputeCapabilityMajor: *value = h200 ? 9 : 8; break;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
  default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (device < 0 || device > 1) return cudaErrorInvalidDevice;
  memset(prop, 0x5a, sizeof *prop);
  strcpy(prop->name, device == 0 ? "NVIDIA H200" : "NVIDIA A100-SXM4-80GB");
  return cudaSuccess;
}

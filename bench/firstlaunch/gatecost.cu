// What the runtime's first timed launch pays once per process, step by step (issue 41): the
// gate's pinned word (cudaHostAlloc, mapped and portable, as klaraptor_refine.inc's gate_init
// asks), its device address, the driver's stream wait looked up and first queued, the first
// events created and recorded; each step timed on the host, then the same steps again (what a
// second time costs). The context is made and a kernel run before anything is timed.
//
//   nvcc -O2 -arch=sm_90 gatecost.cu -o gatecost -ldl && ./gatecost
// prints "<step> <us>" lines.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__global__ void touch(int *p) {
  if (p) p[threadIdx.x] += 1;
}

typedef int (*wait_fn)(void *stream, unsigned long long addr, unsigned int value,
                       unsigned int flags);

int main() {
  cudaFree(0);
  touch<<<1, 32>>>(nullptr);
  cudaDeviceSynchronize();
  for (int round = 1; round <= 2; round++) {
    double t0 = now_us();
    cudaEvent_t a, b;
    cudaEventCreateWithFlags(&a, cudaEventDefault);
    double t1 = now_us();
    cudaEventCreateWithFlags(&b, cudaEventDefault);
    double t2 = now_us();
    void *word = nullptr, *dev = nullptr;
    cudaHostAlloc(&word, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    double t3 = now_us();
    cudaHostGetDevicePointer(&dev, word, 0);
    double t4 = now_us();
    void *self = dlopen(nullptr, RTLD_LAZY);
    wait_fn w = self ? (wait_fn)dlsym(self, "cuStreamWaitValue32_v2") : nullptr;
    if (!w) {
      void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (h) w = (wait_fn)dlsym(h, "cuStreamWaitValue32_v2");
    }
    double t5 = now_us();
    *(volatile unsigned *)word = 1;
    int rc = w ? w(nullptr, (unsigned long long)dev, 1, 0) : -1;
    double t6 = now_us();
    cudaEventRecord(a, 0);
    double t7 = now_us();
    touch<<<1, 32>>>(nullptr);
    double t8 = now_us();
    cudaEventRecord(b, 0);
    double t9 = now_us();
    cudaDeviceSynchronize();
    void *plain = nullptr;
    double t10 = now_us();
    cudaHostAlloc(&plain, 64, cudaHostAllocDefault);
    double t11 = now_us();
    printf("round %d\nevent_create %.1f\nevent_create2 %.1f\nhost_alloc_mapped_portable %.1f\n"
           "device_pointer %.1f\nwait_lookup %.1f\nwait_first %.1f (rc %d)\nrecord %.1f\n"
           "launch %.1f\nrecord2 %.1f\nhost_alloc_default %.1f\n",
           round, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, rc, t7 - t6, t8 - t7,
           t9 - t8, t11 - t10);
  }
  return 0;
}

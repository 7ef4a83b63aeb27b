// GPU check of the CUPTI collector (profiler/collector): acts as the runtime shim would.
//
//   check collect <libklaraptor_collector.so> <outdir>   one klaraptor_collect() request per
//       kernel and size over its shapes; <outdir>/<kernel>.jsonl gets the collector's lines;
//       <outdir>/expected.tsv the counts known from the kernels' code.
//   check plain                                           each kernel x size x shape launched
//       once, in the same order, for ncu to measure.
//
// The kernels: saxpy (1-D, coalesced), a naive matmul (2-D), a block sum with static shared
// memory and __syncthreads, a strided copy whose loads are uncoalesced, and a loop of n
// barriers (n is the "size"; a fixed grid) with no block-index read, for the barrier count.
// One saxpy shape (2048 threads) is invalid on purpose: its sample must carry an error and
// the sweep go on. expected.tsv also gets, per shape, the kernel's register count as
// cudaFuncGetAttributes gives it (the collector must report the same).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "../../../runtime-shim/include/klaraptor_collect.h"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "check: %s failed: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, \
              __LINE__);                                                                      \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void matmul(const float *A, const float *B, float *C, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float s = 0.0f;
    for (int k = 0; k < n; k++) s += A[row * n + k] * B[k * n + col];
    C[row * n + col] = s;
  }
}

// Every thread of a block takes part in every barrier: 1 + log2(blockDim.x) per warp.
__global__ void block_sum(const float *in, float *out, int n) {
  __shared__ float s[1024];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Thread i reads element (32 * i) mod n: every lane of a warp touches its own 128-byte line.
__global__ void strided_copy(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[(int)(((long long)i * 32) % n)];
}

// n barriers per thread and nothing else of note: per warp the ADU runs n BAR, two LDC and
// no read of a block or CTA index (nvcc 13.0, sm_90).
__global__ void bar_loop(float *out, int n) {
  float v = threadIdx.x;
  for (int r = 0; r < n; r++) {
    __syncthreads();
    v = v * 0.5f + 1.0f;
  }
  if (v < 0.0f) out[threadIdx.x] = v;  // never: keeps the loop
}

enum Kind { SAXPY, MATMUL, BLOCK_SUM, STRIDED, BAR_LOOP };

// bar_loop's grid: two blocks per SM of an H200.
static const unsigned BAR_LOOP_GRID = 264;

struct Job {
  const char *name;
  Kind kind;
  int n;
  std::vector<dim3> blocks;
  bool own_stream;
};

struct Launch {
  const void *fn;
  void **args;
  std::vector<dim3> blocks, grids;
  cudaStream_t stream;
};

static int launch_shape(void *ctx, int i) {
  Launch *l = (Launch *)ctx;
  cudaError_t e = cudaLaunchKernel(l->fn, l->grids[i], l->blocks[i], l->args, 0, l->stream);
  // The runtime keeps a failed launch as the thread's last error; clear it as the shim must,
  // so that the program's own error checks do not see the collector's failures.
  if (e != cudaSuccess) (void)cudaGetLastError();
  return (int)e;
}

static unsigned ceil_div(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

static dim3 grid_of(const Job &j, dim3 b) {
  switch (j.kind) {
    case MATMUL: return dim3(ceil_div(j.n, b.x), ceil_div(j.n, b.y), 1);
    case BAR_LOOP: return dim3(BAR_LOOP_GRID, 1, 1);
    default: return dim3(ceil_div(j.n, b.x), 1, 1);
  }
}

struct Buffers {
  float *a, *b, *c;
};

static void fill(float *d, size_t n, float v) {
  std::vector<float> h(n, v);
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "collect") == 0 && argc != 4) ||
      (strcmp(argv[1], "collect") != 0 && strcmp(argv[1], "plain") != 0)) {
    fprintf(stderr, "usage: check collect <libklaraptor_collector.so> <outdir> | check plain\n");
    return 2;
  }
  bool collect = strcmp(argv[1], "collect") == 0;

  std::vector<Job> jobs = {
      {"saxpy", SAXPY, 1 << 24, {dim3(32), dim3(128), dim3(256), dim3(1024), dim3(2048)}, false},
      {"saxpy", SAXPY, 1 << 20, {dim3(64), dim3(256)}, false},
      {"matmul", MATMUL, 1024, {dim3(32, 4), dim3(16, 16), dim3(32, 32), dim3(1, 32)}, true},
      {"block_sum", BLOCK_SUM, 1 << 22, {dim3(64), dim3(256), dim3(1024)}, true},
      {"strided_copy", STRIDED, 1 << 22, {dim3(128), dim3(512)}, true},
      {"bar_loop", BAR_LOOP, 16, {dim3(32), dim3(256), dim3(1024)}, true},
      {"bar_loop", BAR_LOOP, 256, {dim3(32), dim3(256), dim3(1024)}, true},
  };

  size_t max_elems = 1 << 24;
  Buffers buf;
  CHECK(cudaMalloc(&buf.a, max_elems * sizeof(float)));
  CHECK(cudaMalloc(&buf.b, max_elems * sizeof(float)));
  CHECK(cudaMalloc(&buf.c, max_elems * sizeof(float)));
  fill(buf.a, max_elems, 1.0f);
  fill(buf.b, max_elems, 2.0f);
  fill(buf.c, max_elems, 0.0f);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  klaraptor_collect_fn collect_fn = nullptr;
  std::string outdir;
  FILE *expected = nullptr;
  if (collect) {
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "check: cannot load %s: %s\n", argv[2], dlerror());
      return 2;
    }
    collect_fn = (klaraptor_collect_fn)dlsym(h, "klaraptor_collect");
    if (!collect_fn) {
      fprintf(stderr, "check: %s has no klaraptor_collect\n", argv[2]);
      return 2;
    }
    outdir = argv[3];
    expected = fopen((outdir + "/expected.tsv").c_str(), "w");
    if (!expected) {
      fprintf(stderr, "check: cannot write %s/expected.tsv\n", outdir.c_str());
      return 2;
    }
    fprintf(expected, "kernel\tn\tblock\tgrid\tfield\tvalue\n");
  }

  int failures = 0;
  for (const Job &j : jobs) {
    int n = j.n;
    float a = 2.0f;
    void *saxpy_args[] = {&n, &a, &buf.a, &buf.b};
    void *matmul_args[] = {&buf.a, &buf.b, &buf.c, &n};
    void *sum_args[] = {&buf.a, &buf.c, &n};
    void *strided_args[] = {&buf.a, &buf.c, &n};
    void *bar_args[] = {&buf.c, &n};
    Launch l;
    switch (j.kind) {
      case SAXPY: l.fn = (const void *)saxpy; l.args = saxpy_args; break;
      case MATMUL: l.fn = (const void *)matmul; l.args = matmul_args; break;
      case BLOCK_SUM: l.fn = (const void *)block_sum; l.args = sum_args; break;
      case STRIDED: l.fn = (const void *)strided_copy; l.args = strided_args; break;
      case BAR_LOOP: l.fn = (const void *)bar_loop; l.args = bar_args; break;
    }
    l.stream = j.own_stream ? stream : 0;
    for (dim3 b : j.blocks) {
      l.blocks.push_back(b);
      l.grids.push_back(grid_of(j, b));
    }
    int m = (int)l.blocks.size();

    if (!collect) {
      for (int i = 0; i < m; i++) {
        int rc = launch_shape(&l, i);
        if (rc == 0) CHECK(cudaStreamSynchronize(l.stream));
        printf("plain %s n=%d block %ux%ux%u grid %ux%ux%u rc=%d\n", j.name, n, l.blocks[i].x,
               l.blocks[i].y, l.blocks[i].z, l.grids[i].x, l.grids[i].y, l.grids[i].z, rc);
      }
      continue;
    }

    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, l.fn));
    std::vector<uint32_t> blocks, grids;
    for (int i = 0; i < m; i++) {
      blocks.insert(blocks.end(), {l.blocks[i].x, l.blocks[i].y, l.blocks[i].z});
      grids.insert(grids.end(), {l.grids[i].x, l.grids[i].y, l.grids[i].z});
      // Counts that follow from the code when every thread of the grid is in range.
      long long threads = (long long)l.blocks[i].x * l.blocks[i].y * l.grids[i].x * l.grids[i].y;
      long long warps = threads / 32;
      char shape[64], grid[64];
      snprintf(shape, sizeof shape, "%ux%ux%u", l.blocks[i].x, l.blocks[i].y, l.blocks[i].z);
      snprintf(grid, sizeof grid, "%ux%ux%u", l.grids[i].x, l.grids[i].y, l.grids[i].z);
      if (l.blocks[i].x * l.blocks[i].y > 1024) continue;
      auto expect = [&](const char *field, long long v) {
        fprintf(expected, "%s\t%d\t%s\t%s\t%s\t%lld\n", j.name, n, shape, grid, field, v);
      };
      expect("regs_per_thread", attr.numRegs);
      switch (j.kind) {
        case SAXPY:
          expect("inst_global_ld", 2 * warps);
          expect("inst_global_st", warps);
          expect("gld_sectors", 2 * threads * 4 / 32);
          expect("gst_sectors", threads * 4 / 32);
          expect("inst_barrier", 0);
          break;
        case BLOCK_SUM: {
          int steps = 0;
          for (unsigned s = l.blocks[i].x / 2; s > 0; s >>= 1) steps++;
          expect("inst_barrier", warps * (1 + steps));
          expect("inst_global_ld", warps);
          expect("smem_static", 4096);
          break;
        }
        case BAR_LOOP:
          expect("inst_barrier", warps * n);
          expect("inst_global_ld", 0);
          break;
        case STRIDED:
          expect("inst_global_ld", warps);
          expect("gld_requests", warps);
          expect("gld_sectors", threads);
          expect("inst_barrier", 0);
          break;
        case MATMUL:
          expect("inst_global_ld", 2LL * n * warps);  // n divides by every block side used
          expect("inst_barrier", 0);
          break;
      }
    }
    int64_t data = n;
    std::string out = outdir + "/" + j.name + ".jsonl";
    klaraptor_collect_request req;
    memset(&req, 0, sizeof req);
    req.abi_version = KLARAPTOR_COLLECT_ABI;
    req.kernel_id = j.name;
    req.kernel_name = j.name;
    req.n_data = 1;
    req.data = &data;
    req.n_shapes = m;
    req.blocks = blocks.data();
    req.grids = grids.data();
    cudaKernel_t k;
    CHECK(cudaGetKernel(&k, l.fn));
    req.kernel = (void *)k;
    req.stream = (void *)l.stream;
    req.dynamic_smem = 0;
    req.runs = 7;
    req.warmup = 2;
    req.out_path = out.c_str();
    req.ctx = &l;
    req.launch = launch_shape;
    int rc = collect_fn(&req);
    printf("collect %s n=%d: %d shape(s), klaraptor_collect returned %d\n", j.name, n, m, rc);
    if (rc != 0) failures++;
    // The program goes on after the collector, as the shim's would.
    cudaError_t after = cudaDeviceSynchronize();
    if (after != cudaSuccess) {
      printf("collect %s: the device is unusable after the collector: %s\n", j.name,
             cudaGetErrorString(after));
      return 3;
    }
    if (cudaGetLastError() != cudaSuccess) {
      printf("collect %s: a launch error leaked out of the collector\n", j.name);
      failures++;
    }
  }
  if (expected) fclose(expected);
  return failures ? 1 : 0;
}

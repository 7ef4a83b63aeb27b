// REDUCE_ATOMIC: two reductions into one float each with float atomicAdd, two ways.
//   sum_shfl_atomic: s = sum_i x[i] for N floats. A grid-stride loop (the launch caps the
//     grid at kMaxBlocks = 1056 blocks, as saxpy_gs does) leaves a partial sum in each thread;
//     each warp adds its lanes' sums by a tree of __shfl_down_sync (offsets 16, 8, 4, 2, 1)
//     and its lane 0 adds the warp's sum to s with one atomicAdd. A block whose size is not a
//     multiple of 32 ends in a partial warp: its shuffles name only the lanes it has and add
//     only values from them, so every block size is correct.
//   dot_smem_atomic: d = sum_i x[i] y[i] for M floats each, one product per thread (grid
//     ceil(M, bx)). The block adds its products by a tree in shared memory (halving the
//     active threads at each step, a __syncthreads between steps), and thread 0 adds the
//     block's sum to d with one atomicAdd. The tree needs a power-of-two block (block(pow2(bx)))
//     and one float per thread of dynamic shared memory (shmem(bx * 4)).
// The atomics add in an order that changes from run to run and with the block: the check
// measures max |gpu - ref| against the sum of the magnitudes of the terms (tolerance 1e-4),
// not against |ref|, which cancellation makes small (the inputs have both signs).
// s and d are zeroed before the launches; in timing mode the repeated launches keep adding.
// Usage: reduce_atomic [N [M]] [--time [REPS]]     (KL_BLOCK=bs/bd: one shape per kernel)
#include "idioms.h"

constexpr long kMaxBlocks = 1056;

#pragma klaraptor kernel(sum_shfl_atomic) data(N=n) dim(1) grid(min(ceil(N, bx), 1056)) \
        profile(run="./reduce_atomic {N} {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void sum_shfl_atomic(const float *x, float *s, int n) {
  KL_RECORD_BLOCK();
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  float acc = 0.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride)
    acc += x[i];
  // This thread's warp: its lane, and how many lanes it has (32 but in a partial last warp).
  const unsigned lane = threadIdx.x % 32, first = threadIdx.x - lane;
  const unsigned lanes = blockDim.x - first < 32 ? blockDim.x - first : 32;
  const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  for (unsigned d = 16; d > 0; d /= 2) {
    const float other = __shfl_down_sync(mask, acc, d);
    if (lane + d < lanes) acc += other;
  }
  if (lane == 0) atomicAdd(s, acc);
}

#pragma klaraptor kernel(dot_smem_atomic) data(M=m) dim(1) grid(ceil(M, bx)) \
        block(pow2(bx)) shmem(bx * 4) \
        profile(run="./reduce_atomic {M} {M}", sizes=[65536, 131072, 196608, 262144])
__global__ void dot_smem_atomic(const float *x, const float *y, float *d, int m) {
  extern __shared__ float part[];
  KL_RECORD_BLOCK();
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  part[threadIdx.x] = i < m ? x[i] * y[i] : 0.0f;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(d, part[0]);
}

// Compares a reduction's result with its reference, the error measured against abs_sum
// (the sum of the magnitudes of the terms): the Checker divides by the largest |reference|
// value it is given, so it gets abs_sum as a second value, identical on both sides.
static void compare_sum(kl::Checker &check, const char *what, float gpu, double ref,
                        double abs_sum, double tol) {
  const float scale = (float)abs_sum;
  check.compare(what, {gpu, scale}, {ref, (double)scale}, tol);
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "M"}, {1 << 22, 3 << 20});
  const int n = (int)o.sizes[0], m = (int)o.sizes[1];
  std::vector<float> X = kl::fill((size_t)n, 50, -1.0f, 1.0f);
  std::vector<float> U = kl::fill((size_t)m, 51, -1.0f, 1.0f);
  std::vector<float> V = kl::fill((size_t)m, 52, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufX(X), bufU(U), bufV(V), bufS(1), bufD(1);
  bufS.zero();
  bufD.zero();
  const float *dX = bufX.get(), *dU = bufU.get(), *dV = bufV.get();
  float *dS = bufS.get(), *dD = bufD.get();

  kl::Timer timer(o);
  dim3 block_s = kl::block_shape(dim3(256), 0);
  dim3 block_d = kl::block_shape(dim3(256), 1);
  if ((block_d.x & (block_d.x - 1)) != 0 || block_d.y != 1 || block_d.z != 1) {
    std::fprintf(stderr, "reduce_atomic: dot_smem_atomic's block size must be a power of two "
                         "(KL_BLOCK=bs/bd gives each kernel its own)\n");
    return 2;
  }
  dim3 grid_s((unsigned)std::min<long>(kl::cdiv(n, block_s.x), kMaxBlocks));
  dim3 grid_d(kl::cdiv(m, block_d.x));
  const size_t shmem_d = block_d.x * sizeof(float);
  timer.run("sum_shfl_atomic", kl::dims({n}), sum_shfl_atomic,
            [&] { sum_shfl_atomic<<<grid_s, block_s>>>(dX, dS, n); });
  timer.run("dot_smem_atomic", kl::dims({m}), dot_smem_atomic,
            [&] { dot_smem_atomic<<<grid_d, block_d, shmem_d>>>(dU, dV, dD, m); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  double s = 0.0, s_abs = 0.0, d = 0.0, d_abs = 0.0;
  for (float v : X) {
    s += v;
    s_abs += std::fabs((double)v);
  }
  for (size_t i = 0; i < (size_t)m; ++i) {
    const double t = (double)U[i] * V[i];
    d += t;
    d_abs += std::fabs(t);
  }
  kl::Checker check("reduce_atomic", kl::dims({n, m}));
  compare_sum(check, "s (err / sum|x|)", bufS.download()[0], s, s_abs, 1e-4);
  compare_sum(check, "d (err / sum|x y|)", bufD.download()[0], d, d_abs, 1e-4);
  return check.finish();
}

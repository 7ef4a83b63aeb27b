// REDUCE: the sum of N floats, by three kernels that each sum one block of the array into a
// per-block partial sum with a tree in shared memory (every step halves the active threads,
// a __syncthreads between steps); the host adds the partial sums. The tree is right only for
// a power-of-two block, so the annotations say block(pow2(bx) ...).
//
//   reduce_detect  dynamic shared memory sized from the block at the launch,
//                  <<<g, b, b * sizeof(float)>>>: klaraptor-cc reads the amount from the
//                  launch (its annotation has no shmem clause) and passes, with the shape it
//                  chooses, the amount for that shape.
//   reduce_clause  the same kernel, launched with an amount computed by a function
//                  (shared_bytes), which klaraptor-cc does not read: the annotation says
//                  shmem(bx * 4).
//   reduce_static  a static __shared__ float[256], indexed by threadIdx.x. Its annotation
//                  asks only for a power of two, NOT for bx <= 256: on purpose, see below.
//
// The inputs are multiples of 1/8 in [-8, 8), so every partial sum and the total are exact
// in float and double: the result is the same for every block shape, bit for bit, and equal
// to the CPU reference. The program prints one line per kernel (the check) and a checksum
// line, so that runs with and without klaraptor (KLARAPTOR_DISABLE=1) can be diffed.
//
// Usage: reduce [N] [--time [REPS]]     (KL_BLOCK=b: launch with b threads, a power of two;
//                                        the program's own shape is 256)
#include "harness.h"

#include <cinttypes>

constexpr unsigned kOwnBlock = 256;
// The size of reduce_static's shared array: the program's own block.
constexpr int kStaticShared = 256;

// gridDim.x of the latest launch, written by thread 0 of block 0: the host adds that many
// partial sums (klaraptor may have changed the grid with the block).
static __device__ unsigned reduce_seen_grid;

// The block's tree: s[] holds blockDim.x floats; the block's partial sum goes to
// partial[blockIdx.x]. blockDim.x must be a power of two.
__device__ __forceinline__ void block_tree(float *s, const float *x, float *partial, int n) {
  const unsigned t = threadIdx.x;
  const long i = (long)blockIdx.x * blockDim.x + t;
  if (blockIdx.x == 0 && t == 0) reduce_seen_grid = gridDim.x;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}

#pragma klaraptor kernel(reduce_detect) data(N=n) dim(1) grid(ceil(N, bx)) \
        block(pow2(bx) && bx >= 32) \
        profile(run="./reduce {N}", sizes=[65536, 262144, 1048576, 2097152])
__global__ void reduce_detect(const float *x, float *partial, int n) {
  extern __shared__ float s[];
  KL_RECORD_BLOCK();
  block_tree(s, x, partial, n);
}

#pragma klaraptor kernel(reduce_clause) data(N=n) dim(1) grid(ceil(N, bx)) \
        block(pow2(bx) && bx >= 32) shmem(bx * 4) \
        profile(run="./reduce {N}", sizes=[65536, 262144, 1048576, 2097152])
__global__ void reduce_clause(const float *x, float *partial, int n) {
  extern __shared__ float s[];
  KL_RECORD_BLOCK();
  block_tree(s, x, partial, n);
}

// DELIBERATELY WRONG for large blocks: the shared array holds kStaticShared (256) floats and
// nothing keeps the block within it (the annotation asks only for a power of two). Shapes of
// 512 and 1024 threads write past the array and fault on the GPU (an illegal address), which
// loses the process's CUDA context. The program's own launch uses 256 threads, so the program
// is right; the kernel is the fixture of a kernel whose large shapes fault: profiling survives
// them (each fault ends the recipe's process, and a new one resumes without the shapes done),
// records them, and the rational program never chooses a shape that faulted.
#pragma klaraptor kernel(reduce_static) data(N=n) dim(1) grid(ceil(N, bx)) \
        block(pow2(bx)) \
        profile(run="./reduce {N}", sizes=[65536, 262144, 1048576, 2097152])
__global__ void reduce_static(const float *x, float *partial, int n) {
  __shared__ float s[kStaticShared];
  KL_RECORD_BLOCK();
  block_tree(s, x, partial, n);
}

// The launches. reduce_detect's amount is the block's threads times sizeof(float), written at
// the launch; reduce_clause's comes from a function.
static size_t shared_bytes(unsigned threads) { return (size_t)threads * sizeof(float); }

static void launch_detect(const float *x, float *partial, int n, unsigned b) {
  reduce_detect<<<kl::cdiv(n, b), b, b * sizeof(float)>>>(x, partial, n);
}
static void launch_clause(const float *x, float *partial, int n, unsigned b) {
  reduce_clause<<<kl::cdiv(n, b), b, shared_bytes(b)>>>(x, partial, n);
}
static void launch_static(const float *x, float *partial, int n, unsigned b) {
  reduce_static<<<kl::cdiv(n, b), b>>>(x, partial, n);
}

// KL_BLOCK=b (a power of two, at most 1024), else the program's own 256.
static unsigned block_size() {
  const char *s = std::getenv("KL_BLOCK");
  if (!s || !*s) return kOwnBlock;
  long v = 0;
  if (!kl::parse_long(s, &v) || v < 1 || v > 1024 || (v & (v - 1)) != 0) {
    std::fprintf(stderr, "KL_BLOCK must be a power of two, 1..1024\n");
    std::exit(2);
  }
  return (unsigned)v;
}

// The sum of the partial sums of the latest launch, in double (exact for these inputs).
static double sum_partials(const kl::DeviceBuffer<float> &partial, int n, const char *kernel,
                           bool *ok) {
  unsigned grid = 0, seen[3] = {0, 0, 0};
  KL_CHECK(cudaMemcpyFromSymbol(&grid, reduce_seen_grid, sizeof grid));
  KL_CHECK(cudaMemcpyFromSymbol(seen, kl_seen_block, sizeof seen));
  if (grid == 0 || grid > partial.size() || seen[0] == 0 || grid != kl::cdiv(n, seen[0])) {
    std::printf("reduce %d: %s: grid %u for block %u  FAIL\n", n, kernel, grid, seen[0]);
    *ok = false;
    return 0.0;
  }
  std::vector<float> p(grid);
  KL_CHECK(cudaMemcpy(p.data(), partial.get(), grid * sizeof(float), cudaMemcpyDeviceToHost));
  double total = 0.0;
  for (float v : p) total += v;
  return total;
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 24});
  const int n = (int)o.sizes[0];
  // Multiples of 1/8 in [-8, 8): a block's sum (at most 1024 of them) is exact in float, the
  // total in double.
  std::vector<float> X((size_t)n);
  for (size_t i = 0; i < X.size(); ++i) X[i] = (float)((int)(kl::unit(40, i) * 128.0f) - 64) / 8.0f;
  double ref = 0.0;
  for (float v : X) ref += v;

  kl::DeviceBuffer<float> bufX(X), bufP((size_t)n); // at most n blocks (one thread each)
  const float *dX = bufX.get();
  float *dP = bufP.get();
  const unsigned b = block_size();

  struct Kernel {
    const char *name;
    void (*launch)(const float *, float *, int, unsigned);
    void (*func)(const float *, float *, int);
  };
  const Kernel kernels[] = {
      {"reduce_detect", launch_detect, reduce_detect},
      {"reduce_clause", launch_clause, reduce_clause},
      {"reduce_static", launch_static, reduce_static},
  };

  kl::Timer timer(o);
  kl::Checker check("reduce", kl::dims({n}));
  std::vector<double> sums;
  bool ok = true;
  for (const Kernel &k : kernels) {
    bufP.poison();
    timer.run(k.name, kl::dims({n}), k.func, [&] { k.launch(dX, dP, n, b); });
    KL_CHECK(cudaDeviceSynchronize());
    if (timer.on()) continue;
    const double s = sum_partials(bufP, n, k.name, &ok);
    check.compare(k.name, {(float)s}, {ref}, 1e-6);
    sums.push_back(s);
  }
  if (timer.on()) {
    timer.report();
    return 0;
  }
  // The checksum: the exact sum times 8 (an integer), the same for every block shape.
  std::printf("reduce N=%d checksum=%" PRId64 " sums=", n, (int64_t)std::llround(ref * 8.0));
  for (size_t i = 0; i < sums.size(); ++i)
    std::printf("%s%" PRId64, i ? "," : "", (int64_t)std::llround(sums[i] * 8.0));
  std::printf("\n");
  if (!ok) {
    std::printf("FAIL\n");
    return 1;
  }
  return check.finish();
}

// DOITGEN: a multiresolution-analysis kernel. A is NR x NQ x NP (row-major, p fastest), C4 is
// NP x NP; each slice r is replaced by its product with C4:
//   A[r][q][p] <- sum_s A[r][q][s] * C4[s][p].
// For each r, in a host loop: a 2-D kernel writes the product into the NQ x NP scratch S (one
// thread per element, x along p, y along q), then a 2-D kernel copies S back into slice r.
// Usage: doitgen [NR [NQ [NP]]] [--time [REPS]]
#include "harness.h"

#pragma klaraptor kernel(doitgen_sum) data(NP=np, NQ=nq) dim(2) \
        grid(ceil(NP, bx), ceil(NQ, by)) \
        profile(run="./doitgen {NQ} {NQ} {NP}", sizes=[32, 48, (96, 64), 96])
__global__ void doitgen_sum(const float *A, const float *C4, float *S, int nq, int np, int r) {
  KL_RECORD_BLOCK();
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  int q = blockIdx.y * blockDim.y + threadIdx.y;
  if (q < nq && p < np) {
    const float *row = A + ((size_t)r * nq + q) * np;
    float acc = 0.0f;
    for (int s = 0; s < np; ++s) acc += row[s] * C4[(size_t)s * np + p];
    S[(size_t)q * np + p] = acc;
  }
}

#pragma klaraptor kernel(doitgen_copy) data(NP=np, NQ=nq) dim(2) \
        grid(ceil(NP, bx), ceil(NQ, by)) \
        profile(run="./doitgen {NQ} {NQ} {NP}", sizes=[32, 48, (96, 64), 96])
__global__ void doitgen_copy(float *A, const float *S, int nq, int np, int r) {
  KL_RECORD_BLOCK();
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  int q = blockIdx.y * blockDim.y + threadIdx.y;
  if (q < nq && p < np) A[((size_t)r * nq + q) * np + p] = S[(size_t)q * np + p];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"NR", "NQ", "NP"}, {128, 128, 128});
  const int nr = (int)o.sizes[0], nq = (int)o.sizes[1], np = (int)o.sizes[2];
  std::vector<float> A = kl::fill((size_t)nr * nq * np, 1, -1.0f, 1.0f);
  std::vector<float> C4 = kl::fill((size_t)np * np, 2, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufA(A), bufC4(C4), bufS((size_t)nq * np);
  float *dA = bufA.get(), *dC4 = bufC4.get(), *dS = bufS.get();

  kl::Timer timer(o);
  dim3 block(32, 8);
  dim3 grid(kl::cdiv(np, block.x), kl::cdiv(nq, block.y));
  const std::string size = kl::dims({np, nq});
  for (int r = 0; r < nr; ++r) {
    timer.run("doitgen_sum", size, doitgen_sum,
              [&] { doitgen_sum<<<grid, block>>>(dA, dC4, dS, nq, np, r); });
    timer.run("doitgen_copy", size, doitgen_copy,
              [&] { doitgen_copy<<<grid, block>>>(dA, dS, nq, np, r); });
  }
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)nr * nq * np, 0.0);
  for (int r = 0; r < nr; ++r)
    for (int q = 0; q < nq; ++q) {
      double *out = &ref[((size_t)r * nq + q) * np];
      for (int s = 0; s < np; ++s) {
        double a = A[((size_t)r * nq + q) * np + s];
        for (int p = 0; p < np; ++p) out[p] += a * C4[(size_t)s * np + p];
      }
    }
  kl::Checker check("doitgen", kl::dims({nr, nq, np}));
  check.compare("A", bufA.download(), ref, 1e-4);
  return check.finish();
}

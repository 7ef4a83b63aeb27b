// NBODY_TILED: the accelerations of an all-pairs n-body step under softened gravity (G = 1):
// for N bodies at positions p_j with masses m_j,
//   a_i = sum_j m_j (p_j - p_i) / (|p_j - p_i|^2 + eps^2)^(3/2),
// the term j = i adding zero. The bodies are float4s (x, y, z, mass); the accelerations go to
// three planes of N floats (ax, ay, az). One thread per body, a 1-D block of bx threads: the
// block walks the bodies in tiles of bx, each thread loading one body of the tile into
// dynamic shared memory (bx float4s: shmem(bx * 16)), a __syncthreads, every thread adding
// the tile's bodies to its own acceleration (the same body read by all threads: a broadcast),
// a __syncthreads before the next tile overwrites it. The last tile may be partial; threads
// past N load, wait and add with the others but write nothing, so every block size is
// correct (no constraint). Work N^2 interactions, data 32 N bytes.
// Usage: nbody_tiled [N] [--time [REPS]]
#include "idioms.h"

#if defined(KL_CPU_EMULATION)
// What this program needs of CUDA that the emulation (emu/cuda_emu.h) does not provide.
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
#endif

#pragma klaraptor kernel(nbody_tiled) data(N=n) dim(1) grid(ceil(N, bx)) shmem(bx * 16) \
        profile(run="./nbody_tiled {N}", sizes=[1024, 2048, 3072, 4096])
__global__ void nbody_tiled(const float4 *body, float *acc, int n, float eps2) {
  extern __shared__ float4 tile[];
  KL_RECORD_BLOCK();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 me = i < n ? body[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float ax = 0.0f, ay = 0.0f, az = 0.0f;
  for (int t0 = 0; t0 < n; t0 += blockDim.x) {
    const int j = t0 + threadIdx.x;
    if (j < n) tile[threadIdx.x] = body[j];
    __syncthreads();
    const int count = n - t0 < (int)blockDim.x ? n - t0 : (int)blockDim.x;
    for (int k = 0; k < count; ++k) {
      const float4 b = tile[k];
      const float dx = b.x - me.x, dy = b.y - me.y, dz = b.z - me.z;
      const float r2 = dx * dx + dy * dy + dz * dz + eps2;
      const float inv = rsqrtf(r2);
      const float s = b.w * inv * inv * inv;
      ax += s * dx;
      ay += s * dy;
      az += s * dz;
    }
    __syncthreads();
  }
  if (i < n) {
    acc[i] = ax;
    acc[(size_t)n + i] = ay;
    acc[2 * (size_t)n + i] = az;
  }
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {8192});
  const int n = (int)o.sizes[0];
  const float eps2 = 0.01f;
  // Positions uniform in the cube [-1, 1)^3, masses in [0.5, 1.5).
  std::vector<float> P = kl::fill(3 * (size_t)n, 60, -1.0f, 1.0f);
  std::vector<float> Mass = kl::fill((size_t)n, 61, 0.5f, 1.5f);
  std::vector<float4> Body((size_t)n);
  for (size_t i = 0; i < (size_t)n; ++i)
    Body[i] = make_float4(P[3 * i], P[3 * i + 1], P[3 * i + 2], Mass[i]);
  kl::DeviceBuffer<float4> bufBody(Body);
  kl::DeviceBuffer<float> bufAcc(3 * (size_t)n);
  bufAcc.poison();
  const float4 *dBody = bufBody.get();
  float *dAcc = bufAcc.get();

  kl::Timer timer(o);
  dim3 block = kl::block_shape(dim3(256));
  if (block.y != 1 || block.z != 1) {
    std::fprintf(stderr, "nbody_tiled: the block must be 1-D (bx)\n");
    return 2;
  }
  dim3 grid(kl::cdiv(n, block.x));
  const size_t shmem = block.x * sizeof(float4);
  timer.run("nbody_tiled", kl::dims({n}), nbody_tiled,
            [&] { nbody_tiled<<<grid, block, shmem>>>(dBody, dAcc, n, eps2); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref(3 * (size_t)n, 0.0);
  for (size_t i = 0; i < (size_t)n; ++i) {
    const float4 &a = Body[i];
    double ax = 0.0, ay = 0.0, az = 0.0;
    for (size_t j = 0; j < (size_t)n; ++j) {
      const float4 &b = Body[j];
      const double dx = (double)b.x - a.x, dy = (double)b.y - a.y, dz = (double)b.z - a.z;
      const double r2 = dx * dx + dy * dy + dz * dz + (double)eps2;
      const double s = b.w / (r2 * std::sqrt(r2));
      ax += s * dx;
      ay += s * dy;
      az += s * dz;
    }
    ref[i] = ax;
    ref[(size_t)n + i] = ay;
    ref[2 * (size_t)n + i] = az;
  }
  kl::Checker check("nbody_tiled", kl::dims({n}));
  check.compare("acc", bufAcc.download(), ref, 1e-4);
  return check.finish();
}

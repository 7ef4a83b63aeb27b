// LAUNCH_BOUNDS_POLY: two register-heavy element-wise kernels declared with
// __launch_bounds__, whose annotations state the block limit the declaration sets (a launch
// with more threads than the bound fails on the GPU).
//   poly_horner, __launch_bounds__(256): p(x) = sum_{k=0..12} c_k x^k and its derivative p'(x)
//     at 8 inputs per thread (8 vectors of N floats: thread i takes element i of each), by
//     Horner's rule run for the 8 inputs side by side (p' = p' x + p, then p = p x + c_k),
//     the 13 coefficients read once into registers: some 40 values live per thread.
//     1-D, bx <= 256.
//   pixel_mlp, __launch_bounds__(128, 4) (at least 4 blocks of 128 threads per SM: the
//     compiler holds the kernel to 65536 / 512 = 128 registers a thread): a small perceptron
//     applied to every pixel of an H x W image of 4 channels (planar: channel q is the q-th
//     H x W plane), y = W3 tanh(W2 tanh(W1 x + b1) + b2) + b3 with two hidden layers of 16
//     units, unrolled (the second layer's 16 sums are built together from the first's 16
//     values); the weights in constant memory. 2-D, one thread per pixel, bx * by <= 128.
// KL_BLOCK=a/b gives poly_horner a and pixel_mlp b (a single shape gives both).
// Usage: launch_bounds_poly [N [H [W]]] [--time [REPS]]
#include "idioms.h"

constexpr int kDegree = 12;  // of the polynomial
constexpr int kInputs = 8;   // poly_horner: inputs per thread
constexpr int kChannels = 4; // pixel_mlp: channels in and out
constexpr int kHidden = 16;  // pixel_mlp: units of each hidden layer
constexpr unsigned kPolyBound = 256, kMlpBound = 128;

__constant__ float kW1[kHidden][kChannels], kB1[kHidden];
__constant__ float kW2[kHidden][kHidden], kB2[kHidden];
__constant__ float kW3[kChannels][kHidden], kB3[kChannels];

#pragma klaraptor kernel(poly_horner) data(N=n) dim(1) grid(ceil(N, bx)) block(bx <= 256) \
        profile(run="./launch_bounds_poly {N} 64 64", sizes=[65536, 131072, 196608, 262144])
__global__ void __launch_bounds__(256)
    poly_horner(const float *coef, const float *X, float *P, float *D, int n) {
  KL_RECORD_BLOCK();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)n) return;
  float c[kDegree + 1], x[kInputs], p[kInputs], d[kInputs];
#pragma unroll
  for (int k = 0; k <= kDegree; ++k) c[k] = coef[k];
#pragma unroll
  for (int r = 0; r < kInputs; ++r) {
    x[r] = X[(size_t)r * n + i];
    p[r] = c[kDegree];
    d[r] = 0.0f;
  }
#pragma unroll
  for (int k = kDegree - 1; k >= 0; --k) {
#pragma unroll
    for (int r = 0; r < kInputs; ++r) {
      d[r] = fmaf(d[r], x[r], p[r]);
      p[r] = fmaf(p[r], x[r], c[k]);
    }
  }
#pragma unroll
  for (int r = 0; r < kInputs; ++r) {
    P[(size_t)r * n + i] = p[r];
    D[(size_t)r * n + i] = d[r];
  }
}

#pragma klaraptor kernel(pixel_mlp) data(H=h, W=w) dim(2) grid(ceil(W, bx), ceil(H, by)) \
        block(bx * by <= 128) \
        profile(run="./launch_bounds_poly 4096 {H} {W}", sizes=[128, 256, (512, 384), 512])
__global__ void __launch_bounds__(128, 4)
    pixel_mlp(const float *in, float *out, int h, int w) {
  KL_RECORD_BLOCK();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r >= h || c >= w) return;
  const size_t plane = (size_t)h * w, at = (size_t)r * w + c;
  float x[kChannels], a2[kHidden], y[kChannels];
#pragma unroll
  for (int q = 0; q < kChannels; ++q) x[q] = in[q * plane + at];
#pragma unroll
  for (int k = 0; k < kHidden; ++k) a2[k] = kB2[k];
  // Each unit of the first layer, once computed, feeds the 16 sums of the second.
#pragma unroll
  for (int j = 0; j < kHidden; ++j) {
    float a1 = kB1[j];
#pragma unroll
    for (int q = 0; q < kChannels; ++q) a1 = fmaf(kW1[j][q], x[q], a1);
    const float t = tanhf(a1);
#pragma unroll
    for (int k = 0; k < kHidden; ++k) a2[k] = fmaf(kW2[k][j], t, a2[k]);
  }
#pragma unroll
  for (int q = 0; q < kChannels; ++q) y[q] = kB3[q];
#pragma unroll
  for (int k = 0; k < kHidden; ++k) {
    const float t = tanhf(a2[k]);
#pragma unroll
    for (int q = 0; q < kChannels; ++q) y[q] = fmaf(kW3[q][k], t, y[q]);
  }
#pragma unroll
  for (int q = 0; q < kChannels; ++q) out[q * plane + at] = y[q];
}

// Weights of pixel_mlp's layers, uniform in [-s, s): `from` x `to` entries and `to` biases.
struct Layer {
  std::vector<float> w, b;
  Layer(int from, int to, uint32_t seed, float s)
      : w(kl::fill((size_t)from * to, seed, -s, s)), b(kl::fill((size_t)to, seed + 1, -s, s)) {}
  // The layer's sums in double: b + W v (W row-major, `to` rows of `from`).
  std::vector<double> apply(const std::vector<double> &v) const {
    std::vector<double> out(b.begin(), b.end());
    for (size_t k = 0; k < out.size(); ++k)
      for (size_t j = 0; j < v.size(); ++j) out[k] += (double)w[k * v.size() + j] * v[j];
    return out;
  }
};

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N", "H", "W"}, {1 << 22, 2048, 2048});
  const int n = (int)o.sizes[0], h = (int)o.sizes[1], w = (int)o.sizes[2];
  const size_t plane = (size_t)h * w, elems = (size_t)kInputs * n;
  std::vector<float> C = kl::fill(kDegree + 1, 40, -1.0f, 1.0f);
  const Layer L1(kChannels, kHidden, 41, 1.0f), L2(kHidden, kHidden, 43, 0.5f),
      L3(kHidden, kChannels, 45, 0.5f);
  KL_CHECK(cudaMemcpyToSymbol(kW1, L1.w.data(), L1.w.size() * sizeof(float)));
  KL_CHECK(cudaMemcpyToSymbol(kB1, L1.b.data(), L1.b.size() * sizeof(float)));
  KL_CHECK(cudaMemcpyToSymbol(kW2, L2.w.data(), L2.w.size() * sizeof(float)));
  KL_CHECK(cudaMemcpyToSymbol(kB2, L2.b.data(), L2.b.size() * sizeof(float)));
  KL_CHECK(cudaMemcpyToSymbol(kW3, L3.w.data(), L3.w.size() * sizeof(float)));
  KL_CHECK(cudaMemcpyToSymbol(kB3, L3.b.data(), L3.b.size() * sizeof(float)));
  std::vector<float> X = kl::fill(elems, 47, -1.0f, 1.0f);
  std::vector<float> I = kl::fill((size_t)kChannels * plane, 48, -1.0f, 1.0f);
  kl::DeviceBuffer<float> bufC(C), bufX(X), bufP(elems), bufD(elems);
  kl::DeviceBuffer<float> bufI(I), bufO((size_t)kChannels * plane);
  bufP.poison();
  bufD.poison();
  bufO.poison();
  const float *dC = bufC.get(), *dX = bufX.get(), *dI = bufI.get();
  float *dP = bufP.get(), *dD = bufD.get(), *dO = bufO.get();

  kl::Timer timer(o);
  dim3 block_p = kl::block_shape(dim3(256), 0);
  if (block_p.x > kPolyBound || block_p.y != 1 || block_p.z != 1) {
    std::fprintf(stderr, "launch_bounds_poly: poly_horner's block must be 1-D, bx <= %u\n",
                 kPolyBound);
    return 2;
  }
  dim3 block_m = kl::block_shape(dim3(32, 4), 1);
  if (block_m.x * block_m.y > kMlpBound || block_m.z != 1) {
    std::fprintf(stderr, "launch_bounds_poly: pixel_mlp's block must be 2-D, bx * by <= %u\n",
                 kMlpBound);
    return 2;
  }
  dim3 grid_p(kl::cdiv(n, block_p.x));
  dim3 grid_m(kl::cdiv(w, block_m.x), kl::cdiv(h, block_m.y));
  timer.run("poly_horner", kl::dims({n}), poly_horner,
            [&] { poly_horner<<<grid_p, block_p>>>(dC, dX, dP, dD, n); });
  timer.run("pixel_mlp", kl::dims({h, w}), pixel_mlp,
            [&] { pixel_mlp<<<grid_m, block_m>>>(dI, dO, h, w); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> refP(elems), refD(elems);
  for (size_t e = 0; e < elems; ++e) {
    const double x = X[e];
    double p = C[kDegree], d = 0.0;
    for (int k = kDegree - 1; k >= 0; --k) {
      d = d * x + p;
      p = p * x + C[(size_t)k];
    }
    refP[e] = p;
    refD[e] = d;
  }
  std::vector<double> refO((size_t)kChannels * plane), v(kChannels);
  for (size_t at = 0; at < plane; ++at) {
    for (int q = 0; q < kChannels; ++q) v[(size_t)q] = I[q * plane + at];
    std::vector<double> t1 = L1.apply(v);
    for (double &t : t1) t = std::tanh(t);
    std::vector<double> t2 = L2.apply(t1);
    for (double &t : t2) t = std::tanh(t);
    const std::vector<double> y = L3.apply(t2);
    for (int q = 0; q < kChannels; ++q) refO[q * plane + at] = y[(size_t)q];
  }
  kl::Checker check("launch_bounds_poly", kl::dims({n, h, w}));
  check.compare("p", bufP.download(), refP, 1e-5);
  check.compare("dp", bufD.download(), refD, 1e-5);
  check.compare("y", bufO.download(), refO, 1e-5);
  return check.finish();
}

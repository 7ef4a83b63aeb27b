// SCAN_BLOCKS: the inclusive prefix sum out[i] = sum_{j<=i} in[j] of N ints, in two kernels
// with the block totals scanned on the host between them:
//   scan_block: block b scans its segment of bx elements (b bx .. b bx + bx - 1) in shared
//     memory with the work-efficient (Brent-Kung) scan: an up-sweep that builds the sums of
//     aligned runs of 2, 4, 8, ... elements, then a down-sweep that passes them on to the
//     elements in between, a __syncthreads after every step; it writes the segment's scan
//     and the segment's total. The shared array is static, sized for the largest block, and
//     the sweeps need a power-of-two block: the annotation allows the sizes dividing 1024.
//     Block 0's thread 0 also writes the segment length it ran with.
//   host: reads that length back (the block klaraptor chose may not be the program's own),
//     and turns the ceil(N, length) totals into each segment's offset (an exclusive scan).
//   scan_add: out[i] = part[i] + offset[i / length], one thread per element; its block is
//     chosen on its own (any shape): the segment length comes in as an argument.
// The inputs are ints in -8 .. 8, so the sums stay far below 2^24 and compare exactly as
// floats. KL_BLOCK=a/b gives scan_block a and scan_add b (a single shape gives both).
// Usage: scan_blocks [N] [--time [REPS]]
#include "idioms.h"

constexpr int kMaxBlock = 1024;

#pragma klaraptor kernel(scan_block) data(N=n) dim(1) grid(ceil(N, bx)) \
        block(1024 % bx == 0) \
        profile(run="./scan_blocks {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void scan_block(const int *in, int *part, int *totals, int *seg_used, int n) {
  __shared__ int buf[kMaxBlock];
  KL_RECORD_BLOCK();
  const unsigned t = threadIdx.x, len = blockDim.x;
  const size_t i = (size_t)blockIdx.x * len + t;
  if (blockIdx.x == 0 && t == 0) *seg_used = (int)len;
  buf[t] = i < (size_t)n ? in[i] : 0; // past the end: 0, and every thread takes part
  __syncthreads();
  // Up-sweep: after the step of stride d, buf[k] for k = 2d - 1, 4d - 1, ... holds the sum of
  // the 2d elements ending at k.
  for (unsigned d = 1; d < len; d *= 2) {
    const unsigned k = (t + 1) * 2 * d - 1;
    if (k < len) buf[k] += buf[k - d];
    __syncthreads();
  }
  // Down-sweep: buf[k] (k = 2d - 1, 4d - 1, ...) holds its inclusive prefix; buf[k + d] adds
  // it and has its own.
  for (unsigned d = len / 4; d > 0; d /= 2) {
    const unsigned k = (t + 1) * 2 * d - 1;
    if (k + d < len) buf[k + d] += buf[k];
    __syncthreads();
  }
  if (i < (size_t)n) part[i] = buf[t];
  if (t == len - 1) totals[blockIdx.x] = buf[t];
}

#pragma klaraptor kernel(scan_add) data(N=n) dim(1) grid(ceil(N, bx)) \
        profile(run="./scan_blocks {N}", sizes=[65536, 131072, 196608, 262144])
__global__ void scan_add(const int *part, const int *offset, int *out, int n, int seg) {
  KL_RECORD_BLOCK();
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)n) out[i] = part[i] + offset[i / (unsigned)seg];
}

int main(int argc, char **argv) {
  kl::Options o = kl::parse(argc, argv, {"N"}, {1 << 22});
  const int n = (int)o.sizes[0];
  std::vector<int> in((size_t)n);
  for (size_t i = 0; i < (size_t)n; ++i) in[i] = (int)(17.0f * kl::unit(50, i)) - 8;
  // Up to one total (and one offset) per element: a 1-thread block's segment.
  kl::DeviceBuffer<int> bufIn(in), bufPart((size_t)n), bufTot((size_t)n), bufOff((size_t)n);
  kl::DeviceBuffer<int> bufSeg(1), bufOut((size_t)n);
  // Every byte 0x80: -2139062144 in each int, far from any sum, so an element no thread
  // writes fails the check (the ints' NaN).
  KL_CHECK(cudaMemset(bufOut.get(), 0x80, (size_t)n * sizeof(int)));
  const int *dIn = bufIn.get(), *dOff = bufOff.get();
  int *dPart = bufPart.get(), *dTot = bufTot.get(), *dSeg = bufSeg.get(), *dOut = bufOut.get();

  kl::Timer timer(o);
  dim3 block_s = kl::block_shape(dim3(256), 0);
  if (kMaxBlock % block_s.x != 0 || block_s.y != 1 || block_s.z != 1) {
    std::fprintf(stderr, "scan_blocks: scan_block's block must be 1-D and divide %d\n",
                 kMaxBlock);
    return 2;
  }
  dim3 block_a = kl::block_shape(dim3(256), 1);
  dim3 grid_s(kl::cdiv(n, block_s.x)), grid_a(kl::cdiv(n, block_a.x));
  timer.run("scan_block", kl::dims({n}), scan_block,
            [&] { scan_block<<<grid_s, block_s>>>(dIn, dPart, dTot, dSeg, n); });
  KL_CHECK(cudaDeviceSynchronize());

  // The segment length scan_block really ran with, and each segment's offset.
  int seg = 0;
  KL_CHECK(cudaMemcpy(&seg, dSeg, sizeof seg, cudaMemcpyDeviceToHost));
  if (seg < 1 || seg > kMaxBlock) {
    std::fprintf(stderr, "scan_blocks: scan_block reported a segment of %d\n", seg);
    return 2;
  }
  const size_t segments = kl::cdiv(n, seg);
  std::vector<int> tot(segments);
  KL_CHECK(cudaMemcpy(tot.data(), dTot, segments * sizeof(int), cudaMemcpyDeviceToHost));
  int run = 0;
  for (size_t b = 0; b < segments; ++b) {
    const int t = tot[b];
    tot[b] = run;
    run += t;
  }
  KL_CHECK(cudaMemcpy(bufOff.get(), tot.data(), segments * sizeof(int),
                      cudaMemcpyHostToDevice));

  timer.run("scan_add", kl::dims({n}), scan_add,
            [&] { scan_add<<<grid_a, block_a>>>(dPart, dOff, dOut, n, seg); });
  KL_CHECK(cudaDeviceSynchronize());
  if (timer.on()) {
    timer.report();
    return 0;
  }

  std::vector<double> ref((size_t)n);
  long long acc = 0;
  for (size_t i = 0; i < (size_t)n; ++i) ref[i] = (double)(acc += in[i]);
  kl::Checker check("scan_blocks", kl::dims({n}));
  check.compare("out", kl::to_float(bufOut.download()), ref, 0.0);
  return check.finish();
}

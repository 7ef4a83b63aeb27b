// What the idioms samples add to the PolyBench harness (samples/polybench/common/harness.h).
#pragma once

#include "harness.h"

namespace kl {

// The block a program launches with: its own shape `def`, or the one KL_BLOCK=bx[,by[,bz]]
// names (a way to try the kernels at other shapes, on a GPU or under the CPU emulation;
// unset in the accuracy study). The program computes its grid from the block with the
// formula of its annotation, so every shape the annotation allows can be tried this way.
// A program with several kernels numbers them (`kernel`, from 0) and KL_BLOCK may give one
// shape per kernel, separated by '/': KL_BLOCK=256/64,2 launches kernel 0 with 256 threads
// and kernel 1 with 64 x 2; a kernel past the last shape given takes the last one (so a
// single shape applies to every kernel).
inline dim3 block_shape(dim3 def, int kernel = 0) {
  const char *s = std::getenv("KL_BLOCK");
  if (!s || !*s) return def;
  for (int k = 0; k < kernel; ++k) {
    const char *slash = std::strchr(s, '/');
    if (!slash) break;
    s = slash + 1;
  }
  unsigned v[3] = {1, 1, 1};
  int n = std::sscanf(s, "%u,%u,%u", &v[0], &v[1], &v[2]);
  if (n < 1 || v[0] == 0 || v[1] == 0 || v[2] == 0 || (unsigned long)v[0] * v[1] * v[2] > 1024) {
    std::fprintf(stderr, "KL_BLOCK must be bx[,by[,bz]][/bx[,by[,bz]]...]: positive, at most 1024 "
                         "threads\n");
    std::exit(2);
  }
  return dim3(v[0], v[1], v[2]);
}

// Counts (integer outputs) widened to float for the Checker.
template <class T> std::vector<float> to_float(const std::vector<T> &v) {
  return std::vector<float>(v.begin(), v.end());
}

} // namespace kl

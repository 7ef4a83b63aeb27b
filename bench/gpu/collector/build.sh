#!/usr/bin/env bash
# Builds, on the build machine (no GPU), everything run.sh needs on the GPU machine, into
# .dev/collector/ (git-ignored, carried to the GPU machine):
#   libklaraptor_collector.so  the collector (release)
#   compare_ncu                joins the collector's output with ncu's (release example)
#   check                      the test program that plays the runtime shim (nvcc, sm_90)
# Usage, from anywhere: bench/gpu/collector/build.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
out=.dev/collector
mkdir -p "$out"
target="${CARGO_TARGET_DIR:-$root/target}"
CARGO_TARGET_DIR="$target" cargo build --release --locked -p klaraptor-collector --lib --example compare_ncu
cp "$target/release/libklaraptor_collector.so" "$target/release/examples/compare_ncu" "$out/"
.toolchain/cuda/bin/nvcc -O2 -arch=sm_90 -o "$out/check" bench/gpu/collector/check.cu -ldl
ls -la "$out"

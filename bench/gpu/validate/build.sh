#!/usr/bin/env bash
# Builds, on the build machine (no GPU), everything bench/gpu/validate/run.sh needs on the GPU
# machine, into .dev/validate/ (git-ignored, carried there; about 10 MB):
#   klaraptor                    the release CLI (`klaraptor validate`; no libLLVM needed)
#   libklaraptor_collector.so    the collector (release, with the time-only mode), beside
#                                klaraptor, where `klaraptor validate` looks for it
#   gemm/gemm, atax/atax         the PolyBench samples built with klaraptor-cc from the
#                                committed H200 profiles (samples/klaraptor-profiles), as
#                                `make NVCC=klaraptor-cc` builds them, with
#                                --kl-profiling-variant added: gemm/gemm.klaraptor/ holds the
#                                rational programs and the kept variant (gemm.profiling)
# klaraptor-cc comes from the same cargo build, so the variants embed this tree's profiling
# runtime and the collector matches it.
# Usage, from anywhere: bench/gpu/validate/build.sh   (CARGO_TARGET_DIR as usual)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
out=.dev/validate
target="${CARGO_TARGET_DIR:-$root/target}"
CARGO_TARGET_DIR="$target" cargo build --release --locked -p klaraptor --bin klaraptor --bin klaraptor-cc
CARGO_TARGET_DIR="$target" cargo build --release --locked -p klaraptor-collector --lib
rm -rf "$out"
mkdir -p "$out"
cp "$target/release/klaraptor" "$target/release/libklaraptor_collector.so" "$out/"
if ldd "$out/klaraptor" | grep -qi llvm; then
  echo "build.sh: warning: $out/klaraptor needs libLLVM, which the GPU machine lacks:" >&2
  ldd "$out/klaraptor" | grep -i llvm >&2
fi
export KLARAPTOR_NVCC=${KLARAPTOR_NVCC:-$root/.toolchain/cuda/bin/nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The tracked sources only, and the committed profiles, found as the nearest
# klaraptor-profiles/ above the build directory.
git ls-files samples/polybench/common samples/polybench/gemm samples/polybench/atax \
  samples/klaraptor-profiles | while read -r f; do
  mkdir -p "$work/$(dirname "$f")"
  cp "$f" "$work/$f"
done
for p in gemm atax; do
  d="$work/samples/polybench/$p"
  log="$work/$p.log"
  if ! (env -u KLARAPTOR_PROFILE_DB KLARAPTOR_NO_GPU=1 make -C "$d" \
        NVCC="$target/release/klaraptor-cc" \
        NVCCFLAGS="-O3 -std=c++17 --kl-profiling-variant=$p.variant") > "$log" 2>&1; then
    echo "build.sh: building $p failed:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  if grep -q "warning" "$log"; then
    echo "build.sh: warning while building $p:" >&2
    grep "warning" "$log" >&2
  fi
  [ -f "$d/$p.klaraptor/$p.profiling" ] || { echo "build.sh: klaraptor-cc kept no variant of $p" >&2; exit 1; }
  mkdir -p "$out/$p"
  strip -o "$out/$p/$p" "$d/$p"
  cp -r "$d/$p.klaraptor" "$out/$p/"
  strip "$out/$p/$p.klaraptor/$p.profiling"
done
{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse HEAD)$(git diff --quiet HEAD -- driver runtime-shim profiler model passes fitting || echo ' (with uncommitted changes)')"
  "$KLARAPTOR_NVCC" --version | tail -2
} > "$out/BUILD-INFO"
echo "build.sh: $out ($(du -sh "$out" | cut -f1)); run bench/gpu/validate/run.sh on the GPU machine carrying it"

#!/usr/bin/env bash
# Build-machine side of the `make -j` profiling check (bench/parallel/device.sh): compiles
# PolyBench samples with this klaraptor-cc (the compile needs clang-19, which the GPU machine
# lacks) into objects whose recorded build directory is /tmp/klaraptor-parallel/<program>,
# where the link on the GPU machine runs each kernel's recipe.
#
#   bench/parallel/bundle.sh <cargo target dir>
#
# Makes .dev/linkprof/bundle.tar.xz (klaraptor-cc and what it loads, by
# bench/linkprof/bundle.sh) unless it is newer than the target's klaraptor-cc, then
# .dev/parallel/objs.tar.xz (one directory per program: <program>.o) and
# .dev/parallel/PROGRAMS. Carry both .dev/linkprof and .dev/parallel.
#
# PROGRAMS (default below: eight single- and two-kernel programs, ten kernels) picks others.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
[ $# -ge 1 ] || { echo "usage: bench/parallel/bundle.sh <cargo target dir>" >&2; exit 2; }
target=$(cd "$1" && pwd)
kcc=$target/release/klaraptor-cc
nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
PROGRAMS=${PROGRAMS:-"gemm gesummv syrk syr2k 2dconv 3dconv atax mvt"}
# Must equal WORK in device.sh.
WORK=/tmp/klaraptor-parallel

if [ ! -f .dev/linkprof/bundle.tar.xz ] || [ "$kcc" -nt .dev/linkprof/bundle.tar.xz ]; then
  bench/linkprof/bundle.sh "$target"
fi
out=$repo/.dev/parallel
mkdir -p "$out"
stage=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-parallel-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
common=$repo/samples/polybench/common
for p in $PROGRAMS; do
  b=$WORK/$p
  rm -rf "$b"
  mkdir -p "$b" "$stage/$p"
  # As samples/polybench/common/program.mk compiles, with -c: the link is what is measured.
  (cd "$b" && KLARAPTOR_NVCC=$nvcc KLARAPTOR_NO_GPU=1 \
     "$kcc" -O3 -std=c++17 -arch=sm_90 -I"$common" -c "$repo/samples/polybench/$p/$p.cu" -o "$p.o")
  grep -aq "build_dir = \"$b\"" "$b/$p.o" ||
    { echo "bundle.sh: $p.o does not record $b as its build directory" >&2; exit 1; }
  cp "$b/$p.o" "$stage/$p/"
  echo "compiled $p"
done
echo "$PROGRAMS" > "$stage/PROGRAMS"
git rev-parse --short=12 HEAD > "$stage/COMMIT"
tar -C "$stage" -cf - . | xz -6 -T2 -c > "$out/objs.tar.xz.tmp"
mv "$out/objs.tar.xz.tmp" "$out/objs.tar.xz"
cp "$stage/PROGRAMS" "$out/PROGRAMS"
echo "bundle.sh: wrote $out/objs.tar.xz ($(stat -c %s "$out/objs.tar.xz") bytes); carry .dev/linkprof and .dev/parallel"

#!/usr/bin/env bash
# On the build machine (no GPU): builds what run.sh checks on the GPU into .dev/clangbe/
# (git-ignored; carry it to the GPU machine with the tree).
#
#   bench/gpu/clang_backend/build.sh [path/to/klaraptor-cc]
#
# bin/matmul_nvcc, bin/matmul_clang      samples/matmul via its Makefile, NVCC="klaraptor-cc
#                                        --kl-backend=nvcc|clang"
# bin/matmul_{nvcc,clang}.profile(.plan) their profiling variants (--kl-profiling-variant)
# bin/lc_plain, bin/lc_nvcc, bin/lc_clang bench/gpu/launch_check.cu: plain nvcc, then
#                                        klaraptor-cc with each backend (-O2 -arch=sm_90)
# polybench/<prog>                       PolyBench samples built with --kl-backend=clang
# bin/cmpout                             compares two launch_check outputs
#
# Every build uses an empty profile database: no rational program is linked, so the kernels
# run with the programs' own shapes unless KLARAPTOR_FORCE says otherwise.
set -eu
root=$(git rev-parse --show-toplevel)
cc=${1:-$root/target/release/klaraptor-cc}
[ -x "$cc" ] || { echo "build.sh: no klaraptor-cc at $cc: run 'cargo build --release' or pass its path" >&2; exit 1; }
cc=$(cd "$(dirname "$cc")" && pwd)/$(basename "$cc")
nvcc=${KLARAPTOR_NVCC:-$root/.toolchain/cuda/bin/nvcc}
export KLARAPTOR_NVCC=$nvcc KLARAPTOR_NO_GPU=1
PB_PROGRAMS=${PB_PROGRAMS:-"gemm atax bicg 2dconv gramschm jacobi2d covar fdtd-2d"}
out=$root/.dev/clangbe
rm -rf "$out"
mkdir -p "$out/bin" "$out/polybench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KLARAPTOR_PROFILE_DB=$work/empty-db
log=$out/build.log
: > "$log"
step() { echo "+ $*" >> "$log"; "$@" >> "$log" 2>&1 || { tail -30 "$log"; echo "build.sh: failed: $*" >&2; exit 1; }; }

for b in nvcc clang; do
  d=$work/matmul-$b
  mkdir -p "$d"
  cp "$root"/samples/matmul/{Makefile,kernels.h,main.cu,mm.cu,saxpy.cu} "$d/"
  step make -C "$d" NVCC="$cc --kl-backend=$b --kl-verbose"
  cp "$d/matmul" "$out/bin/matmul_$b"
  # The profiling variant, linked from the same objects.
  (cd "$d" && step "$cc" --kl-profiling-variant=matmul.profile -gencode arch=compute_90,code=sm_90 \
     main.o mm.o saxpy.o -o matmul)
  cp "$d/matmul.profile" "$out/bin/matmul_$b.profile"
  cp "$d/matmul.profile.plan" "$out/bin/matmul_$b.profile.plan"
done

cp "$root/bench/gpu/launch_check.cu" "$work/"
step "$nvcc" -O2 -arch=sm_90 "$work/launch_check.cu" -o "$out/bin/lc_plain"
(cd "$work" && step "$cc" --kl-verbose -O2 -arch=sm_90 launch_check.cu -o "$out/bin/lc_nvcc")
(cd "$work" && step "$cc" --kl-backend=clang --kl-verbose -O2 -arch=sm_90 launch_check.cu -o "$out/bin/lc_clang")

cp -r "$root/samples/polybench" "$work/polybench"
step make -C "$work/polybench" -B -j"$(nproc)" NVCC="$cc --kl-backend=clang" $PB_PROGRAMS
for p in $PB_PROGRAMS; do cp "$work/polybench/$p/$p" "$out/polybench/$p"; done

step cc -std=c99 -O2 -Wall -Wextra -Werror "$root/bench/gpu/clang_backend/cmpout.c" -o "$out/bin/cmpout" -lm

if grep 'warning' "$log" | grep -v 'no profile in' | grep -q .; then
  echo "build.sh: warnings:"; grep 'warning' "$log" | grep -v 'no profile in'
fi
if grep -q 'not instrumented' "$log"; then echo "build.sh: a launch was not instrumented" >&2; exit 1; fi
{
  "$cc" --version 2>/dev/null | head -1
  git -C "$root" log -1 --format='commit %H %cd'
  echo "PB_PROGRAMS=$PB_PROGRAMS"
} > "$out/BUILD-INFO"
echo "built into $out ($(ls "$out/bin" | wc -l) files in bin/, $(echo $PB_PROGRAMS | wc -w) PolyBench programs); log: $log"

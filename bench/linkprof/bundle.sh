#!/usr/bin/env bash
# Builds the bundle that bench/linkprof/device.sh unpacks on the GPU machine (Ubuntu 24.04,
# CUDA 13.0 at /usr/local/cuda, no LLVM, no clang, no cargo) to run profiling *inside* one
# `klaraptor-cc` link there.
#
#   bench/linkprof/bundle.sh <cargo target dir> [<out dir>]     (out dir: .dev/linkprof)
#
# The target dir must hold a release build of the driver and the collector:
#   CARGO_TARGET_DIR=<dir> cargo build --release -p klaraptor -p klaraptor-collector
#
# What goes into <out dir>/bundle.tar.xz (xz -9):
#   bin/, libs/, fallback/  klaraptor-cc, klaraptor, the collector and the libraries
#             klaraptor-cc needs that the device may lack (bench/linkprof/stage.sh says which)
#   objs/     samples/matmul's objects, compiled here by this klaraptor-cc (-c, nvcc backend,
#             sm_90). The compile needs clang-19 and LLVM's tools, which the GPU machine does
#             not have. The objects record their build directory, where the link runs the
#             profile recipe (`./matmul {N}`): BUILD_DIR below, which device.sh recreates.
#   BUILD-INFO  commit, dates, versions, sizes, the compile commands
set -euo pipefail

# Must equal BUILD_DIR in device.sh.
BUILD_DIR=/tmp/klaraptor-linkprof/matmul
ARCH=(-gencode arch=compute_90,code=sm_90)
FLAGS=(-O2 -std=c++17)

die() { echo "bundle.sh: error: $*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$repo/bench/linkprof/stage.sh"
bundle_args linkprof bench/linkprof/bundle.sh "$@"
mkdir -p "$stage/objs"

# --- binaries and shared libraries (bench/linkprof/stage.sh) -----------------------------
stage_tools "$rel" "$stage"

# --- the sample's objects, compiled with this klaraptor-cc ------------------------------
rm -rf "$BUILD_DIR"
mkdir -p "$BUILD_DIR"
cp "$repo"/samples/matmul/{main.cu,mm.cu,saxpy.cu,kernels.h} "$BUILD_DIR/"
compile_log=$stage/objs/compile.log
: > "$compile_log"
for src in main mm saxpy; do
  cmd=("$rel/klaraptor-cc" "${FLAGS[@]}" "${ARCH[@]}" -c "$src.cu" -o "$src.o")
  echo "\$ (cd $BUILD_DIR && ${cmd[*]})" >> "$compile_log"
  (cd "$BUILD_DIR" && KLARAPTOR_NVCC=$nvcc "${cmd[@]}") >> "$compile_log" 2>&1 \
    || { cat "$compile_log" >&2; die "compiling samples/matmul/$src.cu failed (log above)"; }
  cp "$BUILD_DIR/$src.o" "$stage/objs/"
done
# The link reads each kernel's spec (build directory, recipe, code hash) from the objects.
for k in mm saxpy; do
  grep -aq "build_dir = \"$BUILD_DIR\"" "$stage/objs/$k.o" \
    || die "$k.o does not record $BUILD_DIR as its build directory: the link on the device would run the recipe elsewhere"
done

# --- BUILD-INFO ---------------------------------------------------------------------------
commit=$(git -C "$repo" rev-parse --short=12 HEAD)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no -- driver model profiler passes fitting runtime-shim build.rs Cargo.toml | wc -l)
{
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "source: main at $commit ($dirty modified tracked file(s) under the crates when built)"
  echo "target dir: $target"
  echo "klaraptor-cc --version: $("$rel/klaraptor-cc" --version 2>&1 | head -1)"
  echo "nvcc for the objects: $nvcc ($("$nvcc" --version | tail -1))"
  echo "build dir recorded in the objects: $BUILD_DIR"
  echo "compile flags: ${FLAGS[*]} ${ARCH[*]}"
  echo
  echo "files (uncompressed bytes):"
  (cd "$stage" && find . -type f ! -name BUILD-INFO | sort | xargs stat -c '  %8s %n')
} > "$stage/BUILD-INFO"

# --- pack ---------------------------------------------------------------------------------
pack_bundle "$stage" "$out" BUILD-INFO bin libs fallback objs
size=$(stat -c %s "$out/bundle.tar.xz")
cat "$out/BUILD-INFO"
echo "bundle.sh: wrote $out/bundle.tar.xz ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB); carry '${out#"$repo"/}' in the device call"

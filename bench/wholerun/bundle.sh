#!/usr/bin/env bash
# Builds the bundle bench/wholerun/device.sh unpacks on the GPU machine (no LLVM, clang or
# cargo there): klaraptor-cc, klaraptor, the collector and their libraries
# (bench/linkprof/stage.sh), and the objects of the idioms programs the whole-run check
# validates, compiled here by this klaraptor-cc (-c: annotations read, launches
# instrumented). The objects record their build directory, where the link on the device runs
# each kernel's profile recipe: BUILD_ROOT/<program>, which device.sh recreates.
#
#   CARGO_TARGET_DIR=<dir> cargo build --release -p klaraptor -p klaraptor-collector
#   bench/wholerun/bundle.sh <cargo target dir> [<out dir>]      (out dir: .dev/wholerun)
set -euo pipefail

# Must equal BUILD_ROOT and PROGRAMS in device.sh.
BUILD_ROOT=/tmp/klaraptor-wholerun/build
PROGRAMS=(gauss_elim lu_tri kmeans_host ten_launch saxpy_gs rowsum_block)
FLAGS=(-O3 -std=c++17 -arch=sm_90)

die() { echo "bundle.sh: error: $*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$repo/bench/linkprof/stage.sh"
bundle_args wholerun bench/wholerun/bundle.sh "$@"
mkdir -p "$stage/objs"
stage_tools "$rel" "$stage"

rm -rf "$BUILD_ROOT"
mkdir -p "$BUILD_ROOT/common" "$BUILD_ROOT/harness"
cp "$repo"/samples/idioms/common/idioms.h "$BUILD_ROOT/common/"
cp "$repo"/samples/polybench/common/harness.h "$BUILD_ROOT/harness/"
log=$stage/objs/compile.log
: > "$log"
for p in "${PROGRAMS[@]}"; do
  d=$BUILD_ROOT/$p
  mkdir -p "$d"
  cp "$repo"/samples/idioms/$p/*.cu "$d/"
  KLARAPTOR_NO_GPU=1 run_logged "$d" "$log" "compiling samples/idioms/$p" \
    "$rel/klaraptor-cc" "${FLAGS[@]}" -I../harness -I../common -c "$p.cu" -o "$p.o"
  grep -aq "build_dir = \"$d\"" "$d/$p.o" || die "$p.o does not record $d as its build directory"
  mkdir -p "$stage/objs/$p"
  cp "$d/$p.o" "$stage/objs/$p/"
done

{
  build_info_head driver model profiler passes fitting runtime-shim program build.rs Cargo.toml
  echo "build root recorded in the objects: $BUILD_ROOT"
  echo "programs: ${PROGRAMS[*]}; compile flags: ${FLAGS[*]}"
  build_info_files
} > "$stage/BUILD-INFO"
pack_bundle "$stage" "$out" BUILD-INFO bin libs fallback objs
size=$(stat -c %s "$out/bundle.tar.xz")
echo "bundle.sh: wrote $out/bundle.tar.xz ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB); carry '${out#"$repo"/}' in the device call"

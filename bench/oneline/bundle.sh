#!/usr/bin/env bash
# The build-machine half of the one-line pragma's GPU check (issue 40): compiles app.cu here
# (the compile needs clang-19, which the GPU machine lacks) with this klaraptor-cc and packs
# the objects with klaraptor-cc, klaraptor, the collector and their libraries
# (bench/linkprof/stage.sh) for bench/oneline/run.sh.
#
#   CARGO_TARGET_DIR=<dir> cargo build --release -p klaraptor -p klaraptor-collector
#   bench/oneline/bundle.sh <cargo target dir> [<out dir>]      (out dir: .dev/oneline)
#
# BUNDLE_FALLBACK=0 leaves out the fallback libraries (bench/linkprof/stage.sh).
set -euo pipefail
ARCH=(-gencode arch=compute_90,code=sm_90)
FLAGS=(-O2 -std=c++17)
die() { echo "oneline/bundle.sh: error: $*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$repo/bench/linkprof/stage.sh"
bundle_args oneline bench/oneline/bundle.sh "$@"
stage_tools "$rel" "$stage"
mkdir -p "$stage/objs"
work=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-oneline-build.XXXXXX")
trap 'rm -rf "$stage" "$work"' EXIT
cp "$repo/bench/oneline/app.cu" "$work/"
: > "$stage/objs/compile.log"
KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB=$work/db run_logged "$work" "$stage/objs/compile.log" \
  "compiling app.cu" "$rel/klaraptor-cc" "${FLAGS[@]}" "${ARCH[@]}" -c app.cu -o app.o
cp "$work/app.o" "$repo/bench/oneline/app.cu" "$stage/objs/"
# The object must carry both kernels' specs, without data(…): the data are the launch's.
for k in saxpy scale2d; do
  grep -aq "name = \"$k\"" "$stage/objs/app.o" || die "app.o carries no spec of $k"
done
grep -aq 'data = \["NX", "NY"\]' "$stage/objs/app.o" || die "app.o: scale2d's data are not NX, NY"

{
  build_info_head driver model profiler passes spec program fitting runtime-shim build.rs Cargo.toml
  echo "compile: ${FLAGS[*]} ${ARCH[*]} -c app.cu"
  build_info_files
} > "$stage/BUILD-INFO"
pack_bundle "$stage" "$out" BUILD-INFO bin libs fallback objs
cat "$out/BUILD-INFO"
echo "oneline/bundle.sh: wrote $out/bundle.tar.xz; carry '${out#"$repo"/}' in the device call: OUT=\$OUT bench/oneline/run.sh"

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
cmd=("$rel/klaraptor-cc" "${FLAGS[@]}" "${ARCH[@]}" -c app.cu -o app.o)
{
  echo "\$ ${cmd[*]}"
  (cd "$work" && KLARAPTOR_NVCC=$nvcc KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$work/db" "${cmd[@]}")
} > "$stage/objs/compile.log" 2>&1 || { cat "$stage/objs/compile.log" >&2; die "compiling app.cu failed"; }
cp "$work/app.o" "$repo/bench/oneline/app.cu" "$stage/objs/"
# The object must carry both kernels' specs, without data(…): the data are the launch's.
for k in saxpy scale2d; do
  grep -aq "name = \"$k\"" "$stage/objs/app.o" || die "app.o carries no spec of $k"
done
grep -aq 'data = \["NX", "NY"\]' "$stage/objs/app.o" || die "app.o: scale2d's data are not NX, NY"

commit=$(git -C "$repo" rev-parse --short=12 HEAD)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no -- driver model profiler passes spec program fitting runtime-shim build.rs Cargo.toml | wc -l)
{
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "source: main at $commit ($dirty modified tracked file(s) under the crates when built)"
  echo "target dir: $target"
  echo "klaraptor-cc --version: $("$rel/klaraptor-cc" --version 2>&1 | head -1)"
  echo "nvcc for the objects: $nvcc ($("$nvcc" --version | tail -1))"
  echo "compile: ${FLAGS[*]} ${ARCH[*]} -c app.cu"
  echo
  echo "files (uncompressed bytes):"
  (cd "$stage" && find . -type f ! -name BUILD-INFO | sort | xargs stat -c '  %8s %n')
} > "$stage/BUILD-INFO"
pack_bundle "$stage" "$out" BUILD-INFO bin libs fallback objs
cat "$out/BUILD-INFO"
echo "oneline/bundle.sh: wrote $out/bundle.tar.xz; carry '${out#"$repo"/}' in the device call: OUT=\$OUT bench/oneline/run.sh"

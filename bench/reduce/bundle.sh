#!/usr/bin/env bash
# Builds the bundle that bench/reduce/device.sh unpacks on the GPU machine (Ubuntu 24.04,
# CUDA 13.0 at /usr/local/cuda, no LLVM, no clang, no cargo): klaraptor-cc and what it loads
# (bench/linkprof/stage.sh, as bench/linkprof/bundle.sh ships them), and the objects of
# samples/reduce and samples/idioms/template_scale, compiled here by this klaraptor-cc (the
# compile needs clang-19).
#
#   bench/reduce/bundle.sh <cargo target dir> [<out dir>]     (out dir: .dev/reduce)
#
# The target dir must hold a release build of the driver and the collector:
#   CARGO_TARGET_DIR=<dir> cargo build --release -p klaraptor -p klaraptor-collector
#
# <out dir>/bundle.tar.xz holds bin/, libs/, fallback/ (bench/linkprof/stage.sh), objs/<p>/
# (<p>.o and its sources, for p in PROGRAMS; objs/compile.log) and BUILD-INFO. Each object is
# compiled in WORK/<p> (nvcc backend, FLAGS and ARCH below) against an empty profile
# database, so that it carries no rational program: the link on the GPU machine profiles
# every kernel. The objects record that build directory, where the link runs the kernels'
# recipes (`./reduce {N}`, `./template_scale {N} {N}`): device.sh recreates it.
set -euo pipefail

# Must equal WORK in device.sh.
WORK=/tmp/klaraptor-reduce
PROGRAMS=(reduce template_scale)
ARCH=(-gencode arch=compute_90,code=sm_90)
FLAGS=(-O3 -std=c++17)

die() { echo "bundle.sh: error: $*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$repo/bench/linkprof/stage.sh"
bundle_args reduce bench/reduce/bundle.sh "$@"
stage_tools "$rel" "$stage"

# --- the programs' objects, compiled with this klaraptor-cc ------------------------------
# The sources as each program's build includes them: its own files in WORK/<p>, the harness
# (samples/polybench/common) and the idioms' header in WORK/common.
rm -rf "$WORK"
mkdir -p "$WORK/common" "$WORK/empty-db" "$stage/objs"
cp "$repo/samples/polybench/common/harness.h" "$repo/samples/idioms/common/idioms.h" "$WORK/common/"
sources() { # the sources of program $1, relative to the repo
  case $1 in
    reduce) echo samples/reduce/reduce.cu ;;
    template_scale) echo samples/idioms/template_scale/template_scale.cu samples/idioms/template_scale/stencil1d.cuh ;;
    *) die "no sources known for $1" ;;
  esac
}
compile_log=$stage/objs/compile.log
: > "$compile_log"
for p in "${PROGRAMS[@]}"; do
  b=$WORK/$p
  mkdir -p "$b" "$stage/objs/$p"
  for f in $(sources "$p"); do cp "$repo/$f" "$b/"; cp "$repo/$f" "$stage/objs/$p/"; done
  cmd=("$rel/klaraptor-cc" "${FLAGS[@]}" "${ARCH[@]}" -I../common -c "$p.cu" -o "$p.o")
  echo "\$ (cd $b && ${cmd[*]})" >> "$compile_log"
  (cd "$b" && KLARAPTOR_NVCC=$nvcc KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB=$WORK/empty-db \
     "${cmd[@]}") >> "$compile_log" 2>&1 \
    || { cat "$compile_log" >&2; die "compiling $p.cu failed (log above)"; }
  # The link reads each kernel's spec (build directory, recipe, code hash) from the object.
  grep -aq "build_dir = \"$b\"" "$b/$p.o" \
    || die "$p.o does not record $b as its build directory: the link on the device would run the recipes elsewhere"
  cp "$b/$p.o" "$stage/objs/$p/"
  echo "compiled $p"
done
# No warning but "no profile" (e.g. none about a launch's shared memory).
if grep 'warning' "$compile_log" | grep -qv 'no profile'; then
  grep 'warning' "$compile_log" | grep -v 'no profile' >&2
  die "unexpected warnings while compiling (above; all in $compile_log)"
fi

# --- BUILD-INFO ---------------------------------------------------------------------------
commit=$(git -C "$repo" rev-parse --short=12 HEAD)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no -- driver model profiler passes fitting runtime-shim build.rs Cargo.toml | wc -l)
{
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "source: main at $commit ($dirty modified tracked file(s) under the crates when built)"
  echo "target dir: $target"
  echo "klaraptor-cc --version: $("$rel/klaraptor-cc" --version 2>&1 | head -1)"
  echo "nvcc for the objects: $nvcc ($("$nvcc" --version | tail -1))"
  echo "build dirs recorded in the objects: $(for p in "${PROGRAMS[@]}"; do printf '%s ' "$WORK/$p"; done)"
  echo "compile flags: ${FLAGS[*]} ${ARCH[*]} -I../common"
  echo "programs: ${PROGRAMS[*]}"
  echo
  echo "files (uncompressed bytes):"
  (cd "$stage" && find . -type f ! -name BUILD-INFO | sort | xargs stat -c '  %8s %n')
} > "$stage/BUILD-INFO"

# --- pack ---------------------------------------------------------------------------------
pack_bundle "$stage" "$out" BUILD-INFO bin libs fallback objs
size=$(stat -c %s "$out/bundle.tar.xz")
cat "$out/BUILD-INFO"
echo "bundle.sh: wrote $out/bundle.tar.xz ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB); carry '${out#"$repo"/}' in the device call"

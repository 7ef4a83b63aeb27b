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
#   bin/      klaraptor-cc, klaraptor, libklaraptor_collector.so (the link looks for the
#             collector beside klaraptor-cc; the runtime archive and klaraptor.h travel inside
#             klaraptor-cc)
#   libs/     what klaraptor-cc needs that Ubuntu 24.04 never has: libLLVM.so.19.1, libz3.so.4
#   fallback/ libraries of libLLVM's that a minimal Ubuntu 24.04 image may lack (libxml2 and
#             the ICU 72 it was built with, libedit, libffi, libtinfo, libbsd, libmd);
#             device.sh puts one on the library path only when ldd says the system lacks it
#   objs/     samples/matmul's objects, compiled here by this klaraptor-cc (-c, nvcc backend,
#             sm_90). The compile needs clang-19 and LLVM's tools, which the GPU machine does
#             not have. The objects record their build directory, where the link runs the
#             profile recipe (`./matmul {N}`): BUILD_DIR below, which device.sh recreates.
#   BUILD-INFO  commit, dates, versions, sizes, the compile commands
# libc, libm, libstdc++, libgcc_s, libz, libzstd, liblzma are not shipped: the device's own
# (newer) ones are used.
set -euo pipefail

# Must equal BUILD_DIR in device.sh.
BUILD_DIR=/tmp/klaraptor-linkprof/matmul
ARCH=(-gencode arch=compute_90,code=sm_90)
FLAGS=(-O2 -std=c++17)

die() { echo "bundle.sh: error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: bench/linkprof/bundle.sh <cargo target dir> [<out dir>]"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=$(cd "$1" 2>/dev/null && pwd) || die "no such target dir: $1"
out=${2:-$repo/.dev/linkprof}
rel=$target/release
for f in klaraptor-cc klaraptor libklaraptor_collector.so; do
  [ -f "$rel/$f" ] || die "$rel/$f is missing: run CARGO_TARGET_DIR=$target cargo build --release -p klaraptor -p klaraptor-collector"
done
nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
[ -x "$nvcc" ] || die "no nvcc at $nvcc: run scripts/setup or set KLARAPTOR_NVCC"
command -v xz >/dev/null || die "xz is not installed (apt-get install xz-utils)"

stage=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-linkprof-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,libs,fallback,objs}

# --- binaries -------------------------------------------------------------------------
cp "$rel/klaraptor-cc" "$rel/klaraptor" "$rel/libklaraptor_collector.so" "$stage/bin/"
strip --strip-unneeded "$stage/bin/"* 2>/dev/null || true

# --- shared libraries: resolved the way the loader resolves them here -------------------
# soname -> path, from ldd of klaraptor-cc (the whole dependency closure).
declare -A where
while read -r name _ path _; do
  [ -n "${path:-}" ] && [ "${path:0:1}" = / ] && where[$name]=$path
done < <(ldd "$rel/klaraptor-cc")
if ldd "$rel/klaraptor-cc" | grep -q "not found"; then
  die "$rel/klaraptor-cc has unresolved libraries here: $(ldd "$rel/klaraptor-cc" | grep 'not found' | tr -s ' \t' ' ')"
fi
ship() { # ship <dir> <soname>...
  local dir=$1; shift
  for so in "$@"; do
    [ -n "${where[$so]:-}" ] || die "klaraptor-cc does not load $so here (ldd): update the lists in bundle.sh"
    cp -L "${where[$so]}" "$stage/$dir/$so"
  done
}
ship libs libLLVM.so.19.1 libz3.so.4
ship fallback libxml2.so.2 libicuuc.so.72 libicudata.so.72 libedit.so.2 libffi.so.8 \
  libtinfo.so.6 libbsd.so.0 libmd.so.0
# Anything else klaraptor-cc loads must be a library every Linux system has.
for so in "${!where[@]}"; do
  case $so in
    libLLVM.so.19.1|libz3.so.4|libxml2.so.2|libicuuc.so.72|libicudata.so.72|libedit.so.2|\
    libffi.so.8|libtinfo.so.6|libbsd.so.0|libmd.so.0) ;;
    libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1|libz.so.1|libzstd.so.1|liblzma.so.5|\
    /lib64/ld-linux-x86-64.so.2|ld-linux-x86-64.so.2) ;;
    *) die "klaraptor-cc loads $so (${where[$so]}), which bundle.sh neither ships nor expects on the device: add it to a list above" ;;
  esac
done
strip --strip-unneeded "$stage"/libs/* "$stage"/fallback/* 2>/dev/null || true

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
mkdir -p "$out"
tmp=$out/bundle.tar.xz.tmp
tar -C "$stage" -cf - BUILD-INFO bin libs fallback objs | xz -9 -T2 -c > "$tmp"
mv "$tmp" "$out/bundle.tar.xz"
cp "$stage/BUILD-INFO" "$out/BUILD-INFO"
size=$(stat -c %s "$out/bundle.tar.xz")
echo "compressed: $size bytes ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB)" >> "$out/BUILD-INFO"
cat "$out/BUILD-INFO"
echo "bundle.sh: wrote $out/bundle.tar.xz ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB); carry '${out#"$repo"/}' in the device call"

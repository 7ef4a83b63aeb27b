#!/usr/bin/env bash
# The build-machine half of the CMake flow on a GPU (issue 21's acceptance): the annotated
# CMake project of tests/fixtures/cmake-project (one annotated kernel in a static library,
# an executable in a second CUDA source), configured with klaraptor's CMake module and built
# with Ninja here, where clang-19 is; profiled on the GPU machine by bench/cmake-gpu/device.sh.
#
#   bench/cmake-gpu/build.sh first            # empty database: configure and build
#   bench/cmake-gpu/build.sh again <db.tar>   # the database the GPU machine filled: build again
#
# PROJECT=separable-compilation builds tests/fixtures/separable-compilation instead (issue
# 40: two annotated kernels in two sources calling each other's device functions, with
# CUDA_SEPARABLE_COMPILATION ON: -rdc=true compiles, nvcc's -dlink, g++'s link); device.sh
# then needs KERNELS="scale shrink".
#
# Everything lives under $ROOT (/tmp/klaraptor-cmake-gpu, the same path on both machines:
# the objects record the build directory, where `klaraptor profile` runs the recipe):
# src/ (the project), build/ (Ninja), db/ (the profile database the module is pointed at).
# Each step writes .dev/cmake-gpu/<step>.tar.xz (build/app, the database, the build logs)
# for the device call to carry, and its log to .dev/cmake-gpu/<step>.log.
#
# Environment: CARGO_TARGET_DIR (klaraptor-cc and klaraptor in release/; default target/),
# KLARAPTOR_NVCC (default .toolchain/cuda/bin/nvcc).
set -euo pipefail
ROOT=/tmp/klaraptor-cmake-gpu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rel=${CARGO_TARGET_DIR:-$repo/target}/release
nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
out=$repo/.dev/cmake-gpu
step=${1:-}
die() { echo "cmake-gpu/build.sh: error: $*" >&2; exit 1; }
for t in klaraptor-cc klaraptor; do
  [ -x "$rel/$t" ] || die "no $rel/$t: cargo build --release -p klaraptor"
done
[ -x "$nvcc" ] || die "no nvcc at $nvcc: run scripts/setup"
command -v cmake >/dev/null && command -v ninja >/dev/null || die "cmake and ninja are needed (scripts/setup)"
mkdir -p "$out"
log=$out/$step.log

case $step in
  first)
    rm -rf "$ROOT"
    mkdir -p "$ROOT/db"
    cp -r "$repo/tests/fixtures/${PROJECT:-cmake-project}" "$ROOT/src"
    {
      echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) configure and build tests/fixtures/${PROJECT:-cmake-project} from an empty database"
      cmake -S "$ROOT/src" -B "$ROOT/build" -G Ninja \
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DCMAKE_MODULE_PATH="$repo/cmake" -DKLARAPTOR_CC="$rel/klaraptor-cc" \
        -DKLARAPTOR_PROFILE_DB="$ROOT/db"
      cmake --build "$ROOT/build" --verbose
      echo "== klaraptor inspect build/app (no profile yet)"
      "$rel/klaraptor" inspect "$ROOT/build/app" || echo "(inspect exit $?)"
    } > "$log" 2>&1 || { cat "$log" >&2; die "the first build failed (log above)"; }
    ;;
  again)
    db_tar=${2:-}
    [ -f "$db_tar" ] || die "usage: build.sh again <db.tar> (the database device.sh profile wrote)"
    [ -d "$ROOT/build" ] || die "no $ROOT/build: run build.sh first (and keep it)"
    rm -rf "$ROOT/db"
    tar -C "$ROOT" -xf "$db_tar"
    [ -f "$ROOT/db/generation" ] || die "$db_tar holds no db/generation"
    {
      echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) build again with the database profiled on the GPU"
      cmake --build "$ROOT/build" --verbose
      echo "== klaraptor inspect build/app"
      "$rel/klaraptor" inspect "$ROOT/build/app"
    } > "$log" 2>&1 || { cat "$log" >&2; die "the second build failed (log above)"; }
    ;;
  *) die "usage: build.sh first | again <db.tar>" ;;
esac
cp "$log" "$ROOT/build-$step.log"
tar -C "$ROOT" -cJf "$out/$step.tar.xz" build/app db "build-$step.log"
cat "$log"
echo "cmake-gpu/build.sh: wrote ${out#"$repo"/}/$step.tar.xz; carry .dev/cmake-gpu and .dev/linkprof"

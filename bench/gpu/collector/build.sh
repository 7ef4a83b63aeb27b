#!/usr/bin/env bash
# Builds, on the build machine (no GPU), everything run.sh needs on the GPU machine, into
# .dev/collector/ (git-ignored, carried to the GPU machine):
#   libklaraptor_collector.so  the collector (release)
#   compare_ncu                joins the collector's output with ncu's, compares two collector
#                              runs (release example)
#   check                      the test program that plays the runtime shim (nvcc, sm_90)
#   polybench/<p>/             for p in gemm 2mm 3mm: <p>, the profiling variant
#                              (klaraptor-cc --kl-profiling-variant, stripped), <p>.plan (its
#                              sampling plan) and recipes.txt (its recipe commands)
# The variants need klaraptor-cc and klaraptor: $KCC / $KLARAPTOR, else the release or debug
# build in $CARGO_TARGET_DIR (default target/). They embed the profiling runtime of the
# klaraptor-cc that links them, so build that one from this tree (cargo build --bin
# klaraptor-cc --bin klaraptor). Without them the variants are skipped, with a warning.
# Usage, from anywhere: bench/gpu/collector/build.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
out=.dev/collector
mkdir -p "$out"
target="${CARGO_TARGET_DIR:-$root/target}"
CARGO_TARGET_DIR="$target" cargo build --release --locked -p klaraptor-collector --lib --example compare_ncu
cp "$target/release/libklaraptor_collector.so" "$target/release/examples/compare_ncu" "$out/"
.toolchain/cuda/bin/nvcc -O2 -arch=sm_90 -o "$out/check" bench/gpu/collector/check.cu -ldl

pick() { # the first executable of the arguments
  for f in "$@"; do [ -x "$f" ] && { echo "$f"; return; }; done
}
KCC=${KCC:-$(pick "$target/release/klaraptor-cc" "$target/debug/klaraptor-cc")}
KLARAPTOR=${KLARAPTOR:-$(pick "$target/release/klaraptor" "$target/debug/klaraptor")}
if [ -z "$KCC" ] || [ -z "$KLARAPTOR" ]; then
  echo "build.sh: warning: no klaraptor-cc/klaraptor in $target (set KCC and KLARAPTOR): the \
PolyBench variants are not built; run.sh will skip their profiling" >&2
else
  build=$(mktemp -d)
  empty=$(mktemp -d)
  trap 'rm -rf "$build" "$empty"' EXIT
  for p in gemm 2mm 3mm; do
    src="$root/samples/polybench/$p/$p.cu"
    d="$out/polybench/$p"
    rm -rf "$d"
    mkdir -p "$d" "$build/$p"
    # As bench/accuracy/prepare.sh builds them: the recipes run ./<p>, so the variant takes
    # that name.
    (cd "$build/$p" &&
      KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$empty" \
        "$KCC" -O3 -std=c++17 -arch=sm_90 -I"$root/samples/polybench/common" -c "$src" -o "$p.o" &&
      KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$empty" \
        "$KCC" -arch=sm_90 "$p.o" -o "$p.klaraptor" --kl-profiling-variant="$p") > "$build/$p.log" 2>&1 ||
      { cat "$build/$p.log" >&2; echo "build.sh: building the $p variant failed" >&2; exit 1; }
    strip -o "$d/$p" "$build/$p/$p"
    "$KLARAPTOR" plan "$build/$p/$p" > "$d/$p.plan"
    "$KLARAPTOR" plan "$build/$p/$p" --recipes > "$d/recipes.txt"
    grep -a -q KLARAPTOR_PROGRESS "$d/$p" ||
      echo "build.sh: warning: $KCC embeds a profiling runtime without KLARAPTOR_PROGRESS: rebuild it from this tree" >&2
    echo "built $d/$p ($(wc -l < "$d/recipes.txt") recipe runs)"
  done
  { "$KCC" --version 2>/dev/null | head -1; git -C "$root" log -1 --format='commit %H (%cd)'; } > "$out/BUILD-INFO"
fi
ls -la "$out"
du -sh "$out"

#!/usr/bin/env bash
# On the build machine (no GPU needed): builds every PolyBench sample through klaraptor-cc and
# puts the binaries in .dev/polybench/bin/, for run.sh to carry to the GPU machine.
# Usage (from the repository root): bench/gpu/polybench/build.sh [path/to/klaraptor-cc]
set -eu
root=$(git rev-parse --show-toplevel)
cc=${1:-$root/target/release/klaraptor-cc}
[ -x "$cc" ] || { echo "build.sh: no klaraptor-cc at $cc: run 'cargo build --release' or pass its path" >&2; exit 1; }
cc=$(cd "$(dirname "$cc")" && pwd)/$(basename "$cc")
out=$root/.dev/polybench/bin
mkdir -p "$out"
cd "$root/samples/polybench"
progs=$(sed -n 's/^PROGRAMS := //p' Makefile)
log=$root/.dev/polybench/build.log
: > "$log"
# -B: the tree may hold plain builds that make would otherwise consider up to date.
make -B -j"$(nproc)" NVCC="$cc" $progs > "$log" 2>&1 || { cat "$log"; echo "build.sh: the klaraptor-cc build failed" >&2; exit 1; }
if grep -q 'warning' "$log"; then echo "build.sh: warnings:"; grep 'warning' "$log"; fi
for p in $progs; do cp "$p/$p" "$out/$p"; rm -f "$p/$p"; done
( "$cc" --version 2>/dev/null | head -1; git -C "$root" log -1 --format='commit %H %cd' ) > "$out/BUILD-INFO"
echo "built $(echo $progs | wc -w) programs with $cc into $out"

#!/usr/bin/env bash
# GPU machine (issue #7, item 3): `klaraptor validate` on two klaraptor-cc builds, the PolyBench
# gemm and atax samples, at two sizes each (the accuracy study's gemm/x1, gemm/x3, atax/x1,
# atax/x3, so the figures can be set beside bench/results/accuracy-h200-2026-11-22.md).
#
# From the repository root, carrying .dev/validate (made by bench/gpu/validate/build.sh on the
# build machine):
#   OUT=<dir> bench/gpu/validate/run.sh
# Writes $OUT/validate/:
#   env.txt               nvidia-smi line, nvcc --version, date (as klaraptor import reads it)
#   ldd.txt               what the klaraptor binary links (it must run without libLLVM)
#   <p>.txt, <p>.json     validate's table and --json records, for p in gemm atax
#   <p>.err               its progress lines
#   <p>/run<i>/           the runs (sweep records, logs): `klaraptor validate <binary> --from
#                         $OUT/validate/<p>` analyses them again, without a GPU
# The program arguments end with `--time 1`: the harness times one launch instead of running
# its CPU reference check (the sweep launches each kernel once per shape, and gemm accumulates
# into C, so the variant's check could not pass). About 20 s; each program run is stopped
# after 45 s.
set -u
D=${D:-.dev/validate}
: "${OUT:?set OUT to the output directory}"
O=$OUT/validate
mkdir -p "$O"
for f in "$D/klaraptor" "$D/libklaraptor_collector.so" "$D/gemm/gemm" "$D/atax/atax"; do
  [ -e "$f" ] || { echo "run.sh: no $f: run bench/gpu/validate/build.sh on the build machine and carry .dev/validate" >&2; exit 2; }
done
{
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader | head -1
  /usr/local/cuda/bin/nvcc --version
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$O/env.txt" 2>&1
ldd "$D/klaraptor" > "$O/ldd.txt" 2>&1
if grep -q "not found" "$O/ldd.txt"; then
  echo "run.sh: $D/klaraptor lacks libraries here:" >&2
  grep "not found" "$O/ldd.txt" >&2
  exit 1
fi
[ -f "$D/BUILD-INFO" ] && cp "$D/BUILD-INFO" "$O/"

fail=0
validate() { # <program> <--sizes …>…
  local p=$1
  shift
  local t0=$SECONDS
  timeout 110 "$D/klaraptor" validate "$D/$p/$p" "$@" --timeout 45 \
    --out "$O/$p" --json "$O/$p.json" > "$O/$p.txt" 2> "$O/$p.err"
  local rc=$?
  echo "== $p: exit $rc, $((SECONDS - t0)) s"
  cat "$O/$p.txt"
  if [ $rc -ne 0 ]; then
    fail=1
    tail -20 "$O/$p.err"
  fi
}
validate gemm --sizes "1000 1000 1000 --time 1" --sizes "3000 1500 500 --time 1"
validate atax --sizes "10000 10000 --time 1" --sizes "20000 5000 --time 1"
echo "== $(head -1 "$O/env.txt"); outputs in $O"
exit $fail

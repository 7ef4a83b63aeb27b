#!/usr/bin/env bash
# The first-launch cost of each launch key (issue 41: at most 50 us a key), end to end: the
# firstlaunch program (firstlaunch.cu) built by plain nvcc and by klaraptor-cc, run on a GPU.
#
#   bench/firstlaunch/run.sh build [klaraptor-cc]   here: builds .dev/firstlaunch/{plain,kl}
#                                                   (klaraptor-cc default target/release;
#                                                   the committed H200 profiles give saxpy its
#                                                   rational program, no GPU needed)
#   bench/firstlaunch/run.sh device <out dir>       on the GPU machine, from the repository
#                                                   root with .dev/firstlaunch carried: RUNS
#                                                   runs (default 7) of each build and mode,
#                                                   modules loaded eagerly (CUDA_MODULE_LOADING
#                                                   =EAGER) so that loading is in no figure,
#                                                   then summary.txt
# Modes of the klaraptor build: shipped (refinement on, an empty choices cache each run),
# model (KLARAPTOR_REFINE=off, no cache), own (KLARAPTOR_DISABLE=1); none of them logs (one
# more shipped run writes shipped.log, untimed).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dev=$repo/.dev/firstlaunch
case "${1:-}" in
build)
  kcc=${2:-$repo/target/release/klaraptor-cc}
  nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
  arch=(-gencode arch=compute_90,code=sm_90)
  rm -rf "$dev" && mkdir -p "$dev/plain" "$dev/kl"
  for d in plain kl; do
    cp "$repo/samples/matmul/saxpy.cu" "$dev/$d/"
    cp "$repo/samples/matmul/kernels.h" "$dev/$d/"
    sed 's#../../samples/matmul/kernels.h#kernels.h#' "$repo/bench/firstlaunch/firstlaunch.cu" >"$dev/$d/firstlaunch.cu"
  done
  (cd "$dev/plain" && "$nvcc" -O2 "${arch[@]}" firstlaunch.cu saxpy.cu -o firstlaunch)
  (cd "$dev/kl" && KLARAPTOR_NVCC=$nvcc KLARAPTOR_PROFILE_DB=$repo/samples/klaraptor-profiles \
    "$kcc" -O2 "${arch[@]}" firstlaunch.cu saxpy.cu -o firstlaunch --kl-verbose 2>&1 | tail -5)
  ls -l "$dev"/*/firstlaunch
  ;;
device)
  out=${2:?out dir}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  export CUDA_MODULE_LOADING=EAGER
  runs=${RUNS:-7}
  for r in $(seq "$runs"); do
    "$dev/plain/firstlaunch" 16 >"$out/plain.$r.txt"
    rm -rf "$out/cache"
    KLARAPTOR_CHOICES=$out/cache "$dev/kl/firstlaunch" 16 >"$out/shipped.$r.txt"
    KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off "$dev/kl/firstlaunch" 16 >"$out/model.$r.txt"
    KLARAPTOR_DISABLE=1 "$dev/kl/firstlaunch" 16 >"$out/own.$r.txt"
  done
  # One more shipped run with the log (not timed: writing the log is not what users pay).
  rm -rf "$out/cache"
  KLARAPTOR_CHOICES=$out/cache KLARAPTOR_LOG=$out/shipped.log "$dev/kl/firstlaunch" 16 >/dev/null
  # Medians over the runs: the first key's first launch, the later keys' first launches (per
  # key, then the median of those), the second launches; props_us and driver_name_us.
  python3 - "$out" "$runs" <<'PY' | tee "$out/summary.txt"
import sys, statistics as st
out, runs = sys.argv[1], int(sys.argv[2])
def read(mode, r):
    first, second, extra = [], [], {}
    for line in open(f"{out}/{mode}.{r}.txt"):
        w = line.split()
        if w[0] == "first": first.append(float(w[2]))
        elif w[0] == "second": second.append(float(w[2]))
        else: extra[w[0]] = float(w[1])
    return first, second, extra
rows = {}
for mode in ["plain", "shipped", "model", "own"]:
    f0, fk, s, props, drv = [], [], [], [], []
    for r in range(1, runs + 1):
        first, second, extra = read(mode, r)
        f0.append(first[0]); fk.append(st.median(first[1:])); s.append(st.median(second))
        props.append(extra.get("props_us", -1)); drv.append(extra.get("driver_name_us", -1))
    rows[mode] = (st.median(f0), st.median(fk), st.median(s), st.median(props), st.median(drv))
print(f"{'mode':8} {'first key us':>13} {'later keys us':>14} {'second launch us':>17}")
for m, (a, b, c, _, _) in rows.items():
    print(f"{m:8} {a:13.1f} {b:14.1f} {c:17.1f}")
p = rows["plain"]
for m in ["shipped", "model", "own"]:
    a, b, c, _, _ = rows[m]
    print(f"{m}: first key +{a - p[0]:.1f} us, each later key +{b - p[1]:.1f} us, a memo hit +{c - p[2]:.1f} us over plain nvcc")
print(f"cudaGetDeviceProperties: {rows['plain'][3]:.1f} us; cuDeviceGetName: {rows['plain'][4]:.1f} us (medians, {runs} runs)")
PY
  ;;
*) echo "usage: bench/firstlaunch/run.sh build [klaraptor-cc] | device <out dir>" >&2; exit 2 ;;
esac

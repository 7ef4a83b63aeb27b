#!/usr/bin/env bash
# `make -j` on a GPU machine (issue 25), from the repository root of the GPU machine:
#
#   OUT=$OUT bench/parallel/device.sh
#
# carrying .dev/linkprof and .dev/parallel (made here by bench/parallel/bundle.sh). Links each
# program of .dev/parallel/PROGRAMS from its object, as `klaraptor-cc -arch=sm_90 <p>.o -o <p>`
# in its own build directory, twice from nothing (an empty profile database and an empty
# calibration cache each time):
#   serial    one link after the other;
#   parallel  every link started at once, as `make -j<n>` starts them.
# Each link calibrates (or waits for the calibration another link holds), profiles its
# kernels with their recipes (taking the GPU's profiling lock in turns), fits and links.
# Writes into $OUT: summary.txt (wall times, each link's exit status and the lines it printed
# about profiling) and results.tar.xz (per mode: every link's stderr, the profile database,
# `klaraptor profile list`, the device report, the manifests of <p>.klaraptor/), which
# bench/parallel/summarize.py turns into bench/results/parallel-profile-<gpu>-<date>.json.
set -euo pipefail
: "${OUT:?set OUT to the directory the results go to}"
repo=$(pwd)
# Must equal WORK in bundle.sh: the objects record /tmp/klaraptor-parallel/<program>.
WORK=/tmp/klaraptor-parallel
nvcc=${LINKPROF_NVCC:-/usr/local/cuda/bin/nvcc}
case $nvcc in /*) ;; *) nvcc=$repo/$nvcc ;; esac
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
die() { say "FAIL  $*"; exit 1; }
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.2f\", $2 - $1}"; }

say "== klaraptor make -j profiling check ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
[ -f .dev/linkprof/bundle.tar.xz ] && [ -f .dev/parallel/objs.tar.xz ] ||
  die "carry .dev/linkprof and .dev/parallel (bench/parallel/bundle.sh)"
rm -rf "$WORK"
mkdir -p "$WORK/objs"
. bench/linkprof/unpack.sh
unpack_bundle .dev/linkprof/bundle.tar.xz "$WORK/bundle" "$nvcc"
xz -dc .dev/parallel/objs.tar.xz | tar -C "$WORK/objs" -xf -
read -r -a programs < "$WORK/objs/PROGRAMS"
say "objects of commit $(cat "$WORK/objs/COMMIT"): ${programs[*]}"
gpu_line() { nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo "no GPU"; }
say "gpu: $(gpu_line)"
unset KLARAPTOR_FORCE KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_COLLECTOR NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS

res=$WORK/results
link_one() { # link_one <mode> <program>: one link, its stderr and exit status kept
  local mode=$1 p=$2 t rc
  t=$(now)
  set +e
  (cd "$WORK/$p" && timeout 560 "$kcc" -arch=sm_90 "$p.o" -o "$p") > "$res/$mode/$p.link.txt" 2>&1
  rc=$?
  set -e
  echo "$p rc=$rc wall_s=$(secs "$t" "$(now)") start=$t" > "$res/$mode/$p.rc"
}

for mode in serial parallel; do
  mkdir -p "$res/$mode"
  export KLARAPTOR_PROFILE_DB=$WORK/db-$mode XDG_CACHE_HOME=$WORK/cache-$mode
  for p in "${programs[@]}"; do
    rm -rf "${WORK:?}/$p"
    mkdir -p "$WORK/$p"
    cp "$WORK/objs/$p/$p.o" "$WORK/$p/"
  done
  t0=$(now)
  if [ $mode = serial ]; then
    for p in "${programs[@]}"; do link_one $mode "$p"; done
  else
    for p in "${programs[@]}"; do link_one $mode "$p" & done
    wait
  fi
  wall=$(secs "$t0" "$(now)")
  say "$mode: ${#programs[@]} links in $wall s"
  echo "$wall" > "$res/$mode/wall_s"
  for p in "${programs[@]}"; do
    say "  $(cat "$res/$mode/$p.rc")"
    grep -E '^klaraptor-cc: (profiled|warning|waiting|calibrat)' "$res/$mode/$p.link.txt" | cut -c1-220 | sed 's/^/    /' | tee -a "$summary" || true
    mkdir -p "$res/$mode/models/$p.klaraptor"
    cp "$WORK/$p/$p.klaraptor/"*.json "$res/$mode/models/$p.klaraptor/" 2>/dev/null || true
  done
  "$klaraptor" profile --db "$KLARAPTOR_PROFILE_DB" list > "$res/$mode/db-list.txt" 2>&1 || true
  sed 's/^/  | /' "$res/$mode/db-list.txt" | tee -a "$summary"
  mkdir -p "$res/$mode/db"; cp -r "$KLARAPTOR_PROFILE_DB"/. "$res/$mode/db/" 2>/dev/null || true
  cp -r "$XDG_CACHE_HOME/klaraptor/devices" "$res/$mode/device" 2>/dev/null || true
done
cp "$B/BUILD-INFO" "$B/version.txt" "$res/"
gpu_line > "$res/gpu.txt"
date -u +%Y-%m-%dT%H:%M:%SZ >> "$res/gpu.txt"
tar -C "$WORK" -cf - results | xz -6 -T0 -c > "$OUT/results.tar.xz"
say "results.tar.xz: $(stat -c %s "$OUT/results.tar.xz") bytes"

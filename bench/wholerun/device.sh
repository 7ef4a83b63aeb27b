#!/usr/bin/env bash
# The whole-run measurement on the GPU machine (issue 41): from the repo root,
#
#   OUT=$OUT bench/wholerun/device.sh
#
# with .dev/wholerun/bundle.tar.xz carried (made here by bench/wholerun/bundle.sh). It
#  1. unpacks the bundle (bench/linkprof/unpack.sh) and points klaraptor-cc at the device's
#     nvcc;
#  2. links each program from its object with an empty profile database (the link profiles
#     its kernels on this GPU, fits and links the rational programs) and keeps its profiling
#     variant (--kl-profiling-variant);
#  3. runs `klaraptor validate` on it at the sizes below: the per-launch sweep, the runs that
#     settle, and the whole-run measurement (each method's shape forced, every launch timed:
#     KLARAPTOR_LAUNCH_TIMES);
#  4. writes into $OUT: summary.txt, <program>.validate.txt (validate's tables), <program>.json
#     (its records: whole_run_ms per method, drifts), link-<program>.txt (the link's stderr)
#     and runs.tar.gz (every validate --out directory: sweeps, logs, wholerun/ launch times).
# Budget: one H200 call of at most 8 minutes (WHOLERUN_DEADLINE_S, default 450 s, stops
# starting programs past it).
set -uo pipefail

BUILD_ROOT=/tmp/klaraptor-wholerun/build
WORK=/tmp/klaraptor-wholerun
# program | validate --sizes runs (separated by ';')
PLAN=(
  "gauss_elim|1024;600"
  "lu_tri|1024"
  "ten_launch|4194304"
  "kmeans_host|1000000 16"
  "saxpy_gs|4194304"
  "rowsum_block|2048 2048"
)

: "${OUT:?set OUT to the directory the results go to}"
repo=$(pwd)
bundle=${WHOLERUN_BUNDLE:-$repo/.dev/wholerun/bundle.tar.xz}
nvcc=${WHOLERUN_NVCC:-/usr/local/cuda/bin/nvcc}
deadline=${WHOLERUN_DEADLINE_S:-450}
# Runs for the keys to settle: with the choices cache a key's first run decides nothing but
# cliffs, and a key whose cost drifts over the run compares one shape a run or so.
settle_runs=${WHOLERUN_SETTLE_RUNS:-12}
# Whole runs per forced configuration (validate --whole-runs) and, optionally, a subset of the
# programs (space-separated names).
whole_runs=${WHOLERUN_WHOLE_RUNS:-3}
only=${WHOLERUN_ONLY:-}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
. "$repo/bench/linkprof/checks.sh"
start=$(date +%s)

say "== klaraptor whole-run check ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
[ -f "$bundle" ] || die "bundle: no $bundle: run bench/wholerun/bundle.sh <target dir> here first and carry .dev/wholerun"
[ -x "$nvcc" ] || die "nvcc: none at $nvcc (set WHOLERUN_NVCC)"
rm -rf "$WORK"
mkdir -p "$WORK" "$BUILD_ROOT"
. bench/linkprof/unpack.sh
unpack_bundle "$bundle" "$WORK/bundle" "$nvcc"
export KLARAPTOR_PROFILE_DB=$WORK/db XDG_CACHE_HOME=$WORK/cache
export KLARAPTOR_COLLECTOR=$B/bin/libklaraptor_collector.so
unset KLARAPTOR_FORCE KLARAPTOR_DISABLE KLARAPTOR_LOG NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary" || true

for entry in "${PLAN[@]}"; do
  p=${entry%%|*}
  sizes=${entry#*|}
  if [ -n "$only" ] && [[ " $only " != *" $p "* ]]; then continue; fi
  now_s=$(date +%s)
  if [ $((now_s - start)) -gt "$deadline" ]; then
    say "$p: skipped (past ${deadline} s)"
    continue
  fi
  d=$BUILD_ROOT/$p
  mkdir -p "$d"
  cp "$B/objs/$p/$p.o" "$d/"
  t0=$(date +%s)
  (cd "$d" && "$kcc" -O3 -arch=sm_90 "$p.o" -o "$p" --kl-profiling-variant="$p.variant") \
    > "$OUT/link-$p.txt" 2>&1
  rc=$?
  say "$p: link rc=$rc in $(( $(date +%s) - t0 )) s ($(ls "$d/$p.klaraptor" 2>/dev/null | wc -l) file(s) in $p.klaraptor/)"
  [ $rc = 0 ] || continue
  args=()
  IFS=';' read -ra runs <<< "$sizes"
  for r in "${runs[@]}"; do args+=(--sizes "$r"); done
  t0=$(date +%s)
  "$klaraptor" validate "$d/$p" "${args[@]}" --settle-runs "$settle_runs" --whole-runs "$whole_runs" --timeout 90 \
    --collector "$KLARAPTOR_COLLECTOR" --out "$WORK/runs/$p" --json "$OUT/$p.json" \
    > "$OUT/$p.validate.txt" 2> "$OUT/$p.validate.err.txt"
  rc=$?
  say "$p: validate rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E "^(klaraptor|settled|profiled_best|default|occupancy) " "$OUT/$p.validate.txt" | sed "s/^/  $p: /" | tee -a "$summary"
done
(cd "$WORK" && tar -czf "$OUT/runs.tar.gz" runs db 2>/dev/null) || true
say "== done in $(( $(date +%s) - start )) s"

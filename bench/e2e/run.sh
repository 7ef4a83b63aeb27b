#!/usr/bin/env bash
# Whole-run kernel time of programs whose own launches are poor, before and after klaraptor,
# on a GPU machine (no klaraptor tools needed there): each program built twice on the build
# machine (plain nvcc: <prog>.plain; klaraptor-cc against the committed profiles: <prog>),
# then run here as a user runs it.
#
#   bench/e2e/run.sh <dir with <prog>/<prog>{,.plain}> <out dir> <prog> "<args>" [...]
#   (E2E_REPS: the timing mode's repetitions, default 5; E2E_SKIP_TIMED=1 skips that mode)
#
# For each program and mode it records the sum of every kernel's time over one whole run
# (nsys's CUDA kernel summary when nsys is present; else the harness's `--time` mode, whose
# KL_TIME lines are each launch site's time per run, summed) and the run's wall time:
#   plain      the nvcc build
#   own        the klaraptor build with KLARAPTOR_DISABLE=1 (the program's own launches)
#   model      the klaraptor build, refinement off: the model's first choice
#   run1..3    the klaraptor build as shipped, one choices cache across the three runs
#              (run1 pays the tries; later runs start from what was settled)
set -uo pipefail
src=$1 out=$2
shift 2
mkdir -p "$out"
nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${nsys_bin:-none}" | tee "$out/tools.txt"
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee -a "$out/tools.txt"

# kernel_ms <log of --time run>: the sum of the KL_TIME lines' median_ms.
kernel_ms() { awk '/^KL_TIME/ { for (i = 1; i <= NF; i++) if ($i ~ /^median_ms=/) { sub("median_ms=", "", $i); s += $i } } END { printf "%.4f", s }' "$1"; }

# nsys_ms <report base>: total kernel time (ms) of an nsys report.
nsys_ms() {
  "$nsys_bin" stats --quiet --report cuda_gpu_kern_sum --format csv "$1.nsys-rep" 2>/dev/null |
    awk -F'","' 'NR > 1 && NF > 2 { gsub(/"/, "", $2); s += $2 } END { printf "%.4f", s / 1e6 }'
}

one() { # prog mode exe args env...
  local prog=$1 mode=$2 exe=$3 args=$4
  shift 4
  local base="$out/$prog.$mode"
  local t0 t1 whole=- wall timed
  # The plain run first (what a user runs; for run1, the program's first run ever), then
  # the harness's timing mode.
  t0=$(date +%s%N)
  if [ -n "$nsys_bin" ]; then
    env "$@" KLARAPTOR_LOG=1 "$nsys_bin" profile --quiet -t cuda -o "$base" --force-overwrite true "$exe" $args >"$base.run.log" 2>&1
  else
    env "$@" KLARAPTOR_LOG=1 "$exe" $args >"$base.run.log" 2>&1
  fi
  t1=$(date +%s%N)
  [ -n "$nsys_bin" ] && whole=$(nsys_ms "$base")
  timed=-
  if [ "${E2E_SKIP_TIMED:-0}" != 1 ]; then
    env "$@" KLARAPTOR_LOG=1 "$exe" $args --time "${E2E_REPS:-5}" >"$base.time.log" 2>&1
    timed=$(kernel_ms "$base.time.log")
  fi
  wall=$(( (t1 - t0) / 1000000 ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$prog" "$args" "$mode" "$timed" "$whole" "$wall" | tee -a "$out/summary.tsv"
}

printf 'program\targs\tmode\tsites_ms(--time)\twhole_run_kernel_ms(nsys)\twall_ms\n' >"$out/summary.tsv"
while (($# >= 2)); do
  prog=$1 args=$2
  shift 2
  dir="$src/$prog"
  cache="$out/$prog.choices"
  rm -rf "$cache"
  one "$prog" plain "$dir/$prog.plain" "$args" KLARAPTOR_X=0
  one "$prog" own "$dir/$prog" "$args" KLARAPTOR_DISABLE=1
  one "$prog" model "$dir/$prog" "$args" KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off
  for r in 1 2 3; do
    one "$prog" "run$r" "$dir/$prog" "$args" KLARAPTOR_CHOICES="$cache"
  done
done

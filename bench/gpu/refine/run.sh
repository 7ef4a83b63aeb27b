#!/usr/bin/env bash
# On the GPU machine, from the repository root: the runtime's refinement on the PolyBench
# samples built with their models (bench/accuracy/prepare.sh build + models, carried as
# .dev/study).
#
#   1. Outputs: every program at its default sizes in check mode (the harness compares the
#      GPU's results with a CPU reference and prints each array's error), once with
#      KLARAPTOR_REFINE=off and once with refinement on (KLARAPTOR_CHOICES=off: no cache):
#      both must PASS with the same lines.
#   2. Overhead: the iterative programs with many launches per size (jacobi1d, jacobi2d,
#      fdtd-2d: each kernel once per time step), run again and again with one fresh choices
#      cache until a run ends with every key settled (at most RUNS, default 10): the runtime
#      spends at most KLARAPTOR_REFINE_BUDGET (1 %) of a key's kernel time in a run on tries
#      and goes on in the next run. Each run's log carries the extra kernel time its tries
#      cost (extra_us of the settled and `not settled at exit` lines), from which
#      bench/gpu/refine/overhead.py computes each run's share of its kernel time.
#   3. Cache: one more run with that cache: every key starts settled.
#
# Environment: OUT (default /tmp/refine-out), STUDY (default .dev/study), JOBS (parallel
# check runs, default 4), SIZES (small or large: only those overhead runs). Writes $OUT/refine/<program>/{off,on}.{out,err,log}, the overhead
# runs under $OUT/refine/overhead/, and $OUT/refine/summary.txt.
set -u
root=$(pwd)
OUT=${OUT:-/tmp/refine-out}
STUDY=${STUDY:-$root/.dev/study}
JOBS=${JOBS:-4}
res=$OUT/refine
mkdir -p "$res"
summary=$res/summary.txt
[ -d "$STUDY" ] || { echo "run.sh: no $STUDY (carry .dev/study)" >&2; exit 2; }
{
  echo "# refinement check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | head -1
  head -3 "$STUDY/BUILD-INFO" 2>/dev/null
} > "$summary"

check() {
  local p=$1 d=$res/$1
  mkdir -p "$d"
  (cd "$STUDY/$p" &&
    KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off KLARAPTOR_LOG="$d/off.log" \
      timeout 300 "./$p.klaraptor" > "$d/off.out" 2> "$d/off.err"
    echo $? > "$d/off.rc"
    KLARAPTOR_CHOICES=off KLARAPTOR_LOG="$d/on.log" \
      timeout 300 "./$p.klaraptor" > "$d/on.out" 2> "$d/on.err"
    echo $? > "$d/on.rc")
  local verdict=different
  if cmp -s "$d/off.out" "$d/on.out"; then verdict=identical; fi
  local pass_off pass_on
  pass_off=$(tail -1 "$d/off.out")
  pass_on=$(tail -1 "$d/on.out")
  printf '%-9s off=%s on=%s rc=%s/%s outputs=%s tries_logged=%s settled=%s\n' "$p" \
    "$pass_off" "$pass_on" "$(cat "$d/off.rc")" "$(cat "$d/on.rc")" "$verdict" \
    "$(grep -c 'refine: trying' "$d/on.log" 2>/dev/null)" \
    "$(grep -c 'refine: settled' "$d/on.log" 2>/dev/null)"
}
export -f check
export res STUDY
t0=$(date +%s)
ls "$STUDY" | while read -r p; do [ -x "$STUDY/$p/$p.klaraptor" ] && echo "$p"; done |
  xargs -P "$JOBS" -I{} bash -c 'check {}' | sort >> "$summary"
echo "# check runs: $(($(date +%s) - t0)) s" >> "$summary"

# Overhead: programs with a time loop, many launches per size.
ov=$res/overhead
mkdir -p "$ov"
# Small sizes (kernels of a few microseconds: the CPU's launch rate bounds the program) and
# larger ones (kernels of tens of microseconds: the GPU bounds it).
runs=(
  "small jacobi1d 100000 --steps 500"
  "small jacobi2d 1000 --steps 200"
  "small fdtd-2d 1000 1200 --steps 200"
  "large jacobi1d 4000000 --steps 300"
  "large jacobi2d 3000 --steps 100"
  "large fdtd-2d 1500 2000 --steps 100"
)
for r in "${runs[@]}"; do
  set -- $r
  tag=$1 p=$2
  shift 2
  [ -x "$STUDY/$p/$p.klaraptor" ] || continue
  [ -n "${SIZES:-}" ] && [ "$SIZES" != "$tag" ] && continue
  name=$tag-$p
  # Runs sharing a fresh choices cache until one ends with every key settled (at most
  # $RUNS), then one more that must start settled from the cache.
  rm -rf "$ov/$name.choices"
  i=0
  while :; do
    i=$((i + 1))
    (cd "$STUDY/$p" && KLARAPTOR_CHOICES="$ov/$name.choices" KLARAPTOR_LOG="$ov/$name.run$i.log" \
      timeout 300 "./$p.klaraptor" "$@" > "$ov/$name.run$i.out" 2> "$ov/$name.run$i.err")
    rc=$?
    echo "overhead $name $* run$i rc=$rc $(tail -1 "$ov/$name.run$i.out") settled=$(grep -c 'refine: settled on block=[^ ]* grid=[^ ]* after' "$ov/$name.run$i.log") not_settled=$(grep -c 'refine: not settled' "$ov/$name.run$i.log") from_cache=$(grep -c 'from the choices cache' "$ov/$name.run$i.log")" >> "$summary"
    [ $rc -ne 0 ] && break
    grep -q 'refine: not settled' "$ov/$name.run$i.log" || break
    [ $i -ge "${RUNS:-10}" ] && break
  done
  (cd "$STUDY/$p" && KLARAPTOR_CHOICES="$ov/$name.choices" KLARAPTOR_LOG="$ov/$name.cached.log" \
    timeout 300 "./$p.klaraptor" "$@" > "$ov/$name.cached.out" 2> "$ov/$name.cached.err")
  echo "overhead $name $* cached rc=$? $(tail -1 "$ov/$name.cached.out") from_cache=$(grep -c 'from the choices cache' "$ov/$name.cached.log") trying=$(grep -c 'refine: trying' "$ov/$name.cached.log")" >> "$summary"
  echo "$p $*" > "$ov/$name.args"
done
echo "# total: $(($(date +%s) - t0)) s" >> "$summary"
cat "$summary"

#!/usr/bin/env bash
# On the GPU machine, from the repository root: checks the 21 PolyBench samples.
#
#   - builds each program with plain nvcc there ($NVCC, default /usr/local/cuda/bin/nvcc);
#   - takes the klaraptor-cc builds from .dev/polybench/bin/ (made on the build machine by
#     bench/gpu/polybench/build.sh and carried);
#   - runs both builds at the default sizes and at non-power-of-two sizes: each must print PASS;
#   - runs each build once in timing mode (--time) at the default sizes, one program at a
#     time, and checks that every kernel reports a KL_TIME line with the program's own block
#     (32x8x1 for 2-D kernels, 256x1x1 for 1-D: no model is linked yet);
#   - runs the klaraptor build at the odd sizes with KLARAPTOR_FORCE giving every kernel an odd
#     block (24x5 for 2-D kernels, 100 for 1-D): the results must still PASS, the log must
#     say source=forced for every kernel, and --time must report the forced blocks (read back
#     from the device).
# Environment: OUT (default /tmp/polybench-out), NVCC, JOBS (parallel runs, default 6),
# PROGRAMS (a subset, default all), KBIN (the klaraptor-cc builds, default .dev/polybench/bin).
# Writes $OUT/polybench-check.txt (summary and every KL_TIME line) and $OUT/polybench/<prog>/
# (each run's output and klaraptor log). Exit status 0 when everything passed.
set -u
root=$(pwd)
OUT=${OUT:-/tmp/polybench-out}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
JOBS=${JOBS:-6}
export res="$OUT/polybench" kbin="${KBIN:-$root/.dev/polybench/bin}"
summary="$OUT/polybench-check.txt"
mkdir -p "$res"
t0=$(date +%s)

[ -f samples/polybench/Makefile ] || { echo "run.sh: run from the repository root" >&2; exit 2; }
[ -d "$kbin" ] || { echo "run.sh: no $kbin: run bench/gpu/polybench/build.sh on the build machine and carry .dev/polybench/bin" >&2; exit 2; }

# program and its non-power-of-two arguments
odd_args() {
  case $1 in
    2dconv) echo "1000 777" ;;          2mm) echo "300 200 250 333" ;;
    3dconv) echo "67 101 93" ;;         3mm) echo "300 200 250 333 177" ;;
    adi) echo "333 --steps 3" ;;        atax|bicg) echo "3000 1777" ;;
    corr|covar) echo "300 457" ;;       doitgen) echo "50 77 99" ;;
    fdtd-2d) echo "1000 777 --steps 10" ;;  gemm) echo "300 200 250" ;;
    gemver|gesummv|mvt) echo "3001" ;;  gramschm) echo "400 333" ;;
    jacobi1d) echo "1000003 --steps 10" ;;  jacobi2d) echo "999 --steps 10" ;;
    lu) echo "333" ;;                   syr2k|syrk) echo "333 200" ;;
    *) echo "run.sh: no odd sizes for $1" >&2; return 1 ;;
  esac
}
export -f odd_args
progs=${PROGRAMS:-$(sed -n 's/^PROGRAMS := //p' samples/polybench/Makefile)}

{
  echo "# PolyBench samples on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# plain: $($NVCC --version | tail -2 | head -1); klaraptor: $(tr '\n' ' ' 2>/dev/null < "$kbin/BUILD-INFO")"
} > "$summary"

# --- plain build, there -----------------------------------------------------------------
# With make, through the programs' Makefiles; without, the same command program.mk runs.
work=$(mktemp -d)
cp -r samples/polybench "$work/src"
mkdir -p "$work/plain"
export pbin="$work/plain" NVCC work
if command -v make > /dev/null; then
  make -C "$work/src" -B -j16 NVCC="$NVCC" $progs > "$res/plain-build.log" 2>&1
  for p in $progs; do cp "$work/src/$p/$p" "$pbin/$p" 2>/dev/null; done
else
  printf '%s\n' $progs | xargs -P 16 -I{} sh -c 'cd "$work/src/{}" && echo "$NVCC -O3 -std=c++17 -arch=sm_90 -I../common {}.cu -o $pbin/{}" && "$NVCC" -O3 -std=c++17 -arch=sm_90 -I../common {}.cu -o "$pbin/{}"' > "$res/plain-build.log" 2>&1
fi
for p in $progs; do
  if [ ! -x "$pbin/$p" ]; then
    echo "run.sh: the plain nvcc build of $p failed, see $res/plain-build.log" | tee -a "$summary"
    tail -20 "$res/plain-build.log"
    exit 1
  fi
done
grep -i 'warning' "$res/plain-build.log" | sed 's/^/plain build: /' >> "$summary"
t1=$(date +%s)

# one run: label, then the command; PASS when it exits 0 and its last line is PASS
run_one() {
  local p=$1 label=$2; shift 2
  local f="$res/$p/$label.txt"
  timeout 60 "$@" > "$f" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && [ "$(tail -1 "$f")" = PASS ]; then echo PASS; else echo "FAIL(rc=$rc)"; fi
}
export -f run_one

# --- phase A: reference checks, programs in parallel ------------------------------------
check_prog() {
  local p=$1 odd; odd=$(odd_args "$p")
  mkdir -p "$res/$p"
  local a b c d
  a=$(run_one "$p" plain-default "$pbin/$p")
  b=$(run_one "$p" plain-odd "$pbin/$p" $odd)
  c=$(KLARAPTOR_LOG="$res/$p/kl-default.log" run_one "$p" kl-default "$kbin/$p")
  d=$(run_one "$p" kl-odd "$kbin/$p" $odd)
  echo "plain-default=$a plain-odd=$b kl-default=$c kl-odd=$d" > "$res/$p/checks"
}
export -f check_prog
printf '%s\n' $progs | xargs -P "$JOBS" -I{} bash -c 'check_prog {}'
t2=$(date +%s)

# --- phase B: timing mode, one program at a time -------------------------------------------
for p in $progs; do
  for build in plain kl; do
    bin=$pbin/$p; [ $build = kl ] && bin=$kbin/$p
    f="$res/$p/$build-time.txt"
    timeout 60 "$bin" --time > "$f" 2>&1
    rc=$?
    n=$(grep -c '^KL_TIME ' "$f")
    wrong=$(awk '/^KL_TIME /{ b=$5; sub("block=","",b); if (b != "32x8x1" && b != "256x1x1") print $2 "=" b }' "$f" | tr '\n' ' ')
    if [ $rc -eq 0 ] && [ "$n" -gt 0 ] && [ -z "$wrong" ]; then s=ok; else s="FAIL(rc=$rc,lines=$n,${wrong:-})"; fi
    echo "$build-time=$s" >> "$res/$p/checks"
  done
done
t3=$(date +%s)

# --- phase C: forced odd blocks through KLARAPTOR_FORCE, programs in parallel ---------------
force_prog() {
  local p=$1 odd; odd=$(odd_args "$p")
  # the kernels and their dimensionality, from the timing run (2-D kernels ran 32x8x1)
  local spec expect
  spec=$(awk '/^KL_TIME /{ b=$5; sub("block=","",b); k=$2; if (!(k in seen)) { seen[k]=1; printf "%s%s:%s", n++ ? "," : "", k, (b == "32x8x1" ? "24x5" : "100") } }' "$res/$p/kl-time.txt")
  expect=$(awk '/^KL_TIME /{ b=$5; sub("block=","",b); if (!($2 in seen)) { seen[$2]=1; print $2, (b == "32x8x1" ? "24x5x1" : "100x1x1") } }' "$res/$p/kl-time.txt")
  echo "$spec" > "$res/$p/force-spec"
  local a why="" k shape got
  a=$(KLARAPTOR_FORCE="$spec" KLARAPTOR_LOG="$res/$p/kl-forced.log" run_one "$p" kl-forced "$kbin/$p" $odd)
  KLARAPTOR_FORCE="$spec" timeout 60 "$kbin/$p" $odd --time 1 > "$res/$p/kl-forced-time.txt" 2>&1 || why="rc=$?;"
  [ -n "$expect" ] || why="$why no kernels from the timing run;"
  while read -r k shape; do
    [ -z "$k" ] && continue
    grep -q "^klaraptor: $k .*block=$shape .*source=forced" "$res/$p/kl-forced.log" 2>/dev/null || why="$why $k not logged as forced $shape;"
    got=$(awk -v k="$k" '$1 == "KL_TIME" && $2 == k { b=$5; sub("block=","",b); print b }' "$res/$p/kl-forced-time.txt" | sort -u | paste -sd+)
    [ "$got" = "$shape" ] || why="$why $k ran ${got:-nothing};"
  done <<< "$expect"
  echo "kl-forced=$a forced-blocks=${why:+FAIL(}${why:-ok}${why:+)}" >> "$res/$p/checks"
}
export -f force_prog
printf '%s\n' $progs | xargs -P "$JOBS" -I{} bash -c 'force_prog {}'
t4=$(date +%s)

# --- summary ---------------------------------------------------------------------------------
fails=0
echo "# program: results (PASS = reference check passed; ok = timing lines as expected)" >> "$summary"
for p in $progs; do
  line=$(tr '\n' ' ' < "$res/$p/checks" 2>/dev/null)
  case "$line" in *FAIL*|"") fails=$((fails + 1)) ;; esac
  printf '%-9s %s\n' "$p" "${line:-no result}" >> "$summary"
done
echo "# seconds: plain build $((t1 - t0)), checks $((t2 - t1)), timing $((t3 - t2)), forced $((t4 - t3)); total $((t4 - t0))" >> "$summary"
echo "# KL_TIME lines at the default sizes (plain nvcc build, then klaraptor-cc build without a model)" >> "$summary"
for p in $progs; do
  for build in plain kl; do
    grep '^KL_TIME ' "$res/$p/$build-time.txt" 2>/dev/null | sed "s/^/$build /" >> "$summary"
  done
done
echo "$(( $(echo $progs | wc -w) - fails )) of $(echo $progs | wc -w) programs passed everything" | tee -a "$summary"
grep -v '^\(plain\|kl\) KL_TIME' "$summary" | grep FAIL
rm -rf "$work"
[ $fails -eq 0 ]

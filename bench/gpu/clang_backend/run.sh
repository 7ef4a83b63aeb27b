#!/usr/bin/env bash
# On the GPU machine, from the repository root: checks binaries built by
# `klaraptor-cc --kl-backend=clang` (bench/gpu/clang_backend/build.sh made them on the build
# machine into .dev/clangbe/, which is carried) against the nvcc backend's and plain nvcc's.
#
#  A. samples/matmul (clang backend, nvcc backend): both pass their CPU reference check at
#     n = 1000 and 777, with KLARAPTOR_LOG=1 logging every decision, and with
#     KLARAPTOR_FORCE=mm:16x16,saxpy:512 (logged as forced, still passing).
#  B. bench/gpu/launch_check.cu (plain, nvcc backend, clang backend): the clang build's
#     output agrees with the plain build's element for element (cmpout: identical, or within
#     1e-5 relative: its device code is clang's, not nvcc's); KLARAPTOR_LOG=1 logs every
#     decision; KLARAPTOR_FORCE=scale:128,axpy<float>:96,axpy<double>:96,rowsum:16x4
#     (a template's instances by their names) changes the blockDim the kernels read back
#     (and not the unannotated kernel's) without changing the result; KLARAPTOR_DISABLE=1
#     wins over FORCE; 10 000 empty launches timed per build.
#  C. The profiling variant of the clang build (and of the nvcc build, as the control), in
#     the runtime's launch-only mode: each annotated kernel's launch is swept over its
#     planned shapes through __cudaLaunchKernel (the clang stubs' rerouted entry), no shape
#     failing to launch.
#  D. PolyBench samples built with the clang backend, through bench/gpu/polybench/run.sh
#     (plain nvcc builds there; PASS at default and odd sizes; KL_TIME blocks read back from
#     the device; forced odd blocks).
#
# Environment: OUT (default /tmp/clang-backend-out), NVCC (default /usr/local/cuda/bin/nvcc,
# only for D), SKIP_POLYBENCH=1 to leave D out.
# Writes $OUT/clang-backend-check.txt (the summary) and $OUT/<part>/ (each run's output and
# log). Exit status 0 when every check passed.
set -u
root=$(pwd)
OUT=${OUT:-/tmp/clang-backend-out}
D=$root/.dev/clangbe
B=$D/bin
[ -x "$B/lc_clang" ] || { echo "run.sh: no $B: run bench/gpu/clang_backend/build.sh on the build machine and carry .dev/clangbe" >&2; exit 2; }
mkdir -p "$OUT"/{matmul,launch,profile}
S=$OUT/clang-backend-check.txt
fails=0
ok() { echo "PASS $*" | tee -a "$S"; }
bad() { echo "FAIL $*" | tee -a "$S"; fails=$((fails + 1)); }
t0=$(date +%s)
{
  echo "# klaraptor-cc --kl-backend=clang on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# built by: $(tr '\n' ' ' < "$D/BUILD-INFO")"
} > "$S"

# --- A. matmul ---------------------------------------------------------------------------
M=$OUT/matmul
for b in nvcc clang; do
  for n in 1000 777; do
    if KLARAPTOR_LOG=1 timeout 60 "$B/matmul_$b" $n > "$M/$b-$n.txt" 2> "$M/$b-$n.log"; then
      ok "matmul $b backend n=$n: $(cat "$M/$b-$n.txt")"
    else
      bad "matmul $b backend n=$n: $(cat "$M/$b-$n.txt")"
    fi
    logged=$(grep -c '^klaraptor: \(mm\|saxpy\) ' "$M/$b-$n.log")
    [ "$logged" -eq 2 ] && ok "matmul $b backend n=$n: KLARAPTOR_LOG=1 logged both decisions" \
      || bad "matmul $b backend n=$n: $logged decisions logged (want 2): $(cat "$M/$b-$n.log")"
  done
  if KLARAPTOR_FORCE='mm:16x16,saxpy:512' KLARAPTOR_LOG=1 timeout 60 "$B/matmul_$b" 777 \
       > "$M/$b-forced.txt" 2> "$M/$b-forced.log" \
     && grep -q '^klaraptor: mm N=777 block=16x16x1 grid=49x49x1 source=forced' "$M/$b-forced.log" \
     && grep -q '^klaraptor: saxpy .*block=512x1x1 .*source=forced' "$M/$b-forced.log"; then
    ok "matmul $b backend forced mm:16x16 saxpy:512: $(cat "$M/$b-forced.txt")"
  else
    bad "matmul $b backend forced: $(cat "$M/$b-forced.txt") $(cat "$M/$b-forced.log")"
  fi
done

# --- B. launch_check -----------------------------------------------------------------------
L=$OUT/launch
for n in 1000 777; do
  for b in plain nvcc clang; do
    timeout 60 "$B/lc_$b" check $n "$L/$b-$n.bin" > "$L/$b-$n.txt" 2> "$L/$b-$n.err" || bad "launch_check $b n=$n rc=$?"
  done
  cmp -s "$L/plain-$n.bin" "$L/nvcc-$n.bin" && ok "launch_check n=$n: nvcc backend output identical to plain nvcc" \
    || bad "launch_check n=$n: nvcc backend output differs from plain nvcc"
  if "$B/cmpout" "$L/plain-$n.bin" "$L/clang-$n.bin" $n > "$L/cmp-$n.txt"; then
    ok "launch_check n=$n: clang backend output equals plain nvcc's ($(tr '\n' ';' < "$L/cmp-$n.txt"))"
  else
    bad "launch_check n=$n: clang backend output differs: $(tr '\n' ';' < "$L/cmp-$n.txt")"
  fi
  diff -q "$L/plain-$n.txt" "$L/clang-$n.txt" > /dev/null && ok "launch_check n=$n: clang build runs the program's own shapes without a model" \
    || bad "launch_check n=$n: shapes differ: $(tr '\n' ';' < "$L/clang-$n.txt")"
done
KLARAPTOR_LOG=1 timeout 60 "$B/lc_clang" check 777 "$L/log.bin" > "$L/log.txt" 2> "$L/log.err"
echo "--- KLARAPTOR_LOG=1 (clang backend):" >> "$S"; cat "$L/log.err" >> "$S"
n_log=$(grep -c '^klaraptor: ' "$L/log.err")
[ "$n_log" -ge 6 ] && ok "launch_check clang: $n_log decisions logged (3 sizes of scale, 2 axpy, rowsum)" \
  || bad "launch_check clang: $n_log decisions logged, want >= 6"
KLARAPTOR_FORCE='scale:128,axpy<float>:96,axpy<double>:96,rowsum:16x4' KLARAPTOR_LOG="$L/force.log" \
  timeout 60 "$B/lc_clang" check 777 "$L/force.bin" > "$L/force.txt" 2> "$L/force.err"
echo "--- KLARAPTOR_FORCE=scale:128,axpy<float>:96,axpy<double>:96,rowsum:16x4 (clang backend), blockDim read in the kernels:" >> "$S"
cat "$L/force.txt" "$L/force.log" >> "$S"
if grep -q '^scale blockDim=128x1x1' "$L/force.txt" && grep -q '^axpy<float> blockDim=96x1x1' "$L/force.txt" \
   && grep -q '^axpy<double> blockDim=96x1x1' "$L/force.txt" && grep -q '^rowsum blockDim=16x4x1' "$L/force.txt" \
   && grep -q '^unannotated blockDim=64x1x1' "$L/force.txt"; then
  ok "launch_check clang: the kernels really ran with the forced shapes (blockDim read back)"
else
  bad "launch_check clang: forced shapes not in effect: $(tr '\n' ';' < "$L/force.txt")"
fi
[ "$(grep -c 'source=forced' "$L/force.log")" -ge 6 ] && ok "launch_check clang: forced decisions logged" \
  || bad "launch_check clang: forced decisions not logged"
"$B/cmpout" "$L/plain-777.bin" "$L/force.bin" 777 > "$L/cmp-force.txt" \
  && ok "launch_check clang: forced shapes compute the same result ($(tr '\n' ';' < "$L/cmp-force.txt"))" \
  || bad "launch_check clang: forced result differs: $(tr '\n' ';' < "$L/cmp-force.txt")"
KLARAPTOR_DISABLE=1 KLARAPTOR_FORCE='scale:128' timeout 60 "$B/lc_clang" check 777 "$L/disable.bin" > "$L/disable.txt" 2>&1
grep -q '^scale blockDim=256x1x1' "$L/disable.txt" && ok "launch_check clang: KLARAPTOR_DISABLE wins over FORCE" \
  || bad "launch_check clang: DISABLE: $(tr '\n' ';' < "$L/disable.txt")"
echo "--- 10000 launches of an empty annotated kernel (last of 3 repetitions), twice:" >> "$S"
for r in 1 2; do
  for b in plain nvcc clang; do
    echo "$b $(timeout 60 "$B/lc_$b" bench 10000 | tail -1)" | tee -a "$S"
  done
done

# --- C. profiling variants, launch-only mode -------------------------------------------------
P=$OUT/profile
for b in nvcc clang; do
  rec=$P/$b
  rm -rf "$rec"; mkdir -p "$rec"
  KLARAPTOR_PROFILE_OUT=$rec KLARAPTOR_PROFILE_PLAN=$B/matmul_$b.profile.plan KLARAPTOR_COLLECTOR=launch \
    timeout 60 "$B/matmul_$b.profile" 128 > "$P/$b.txt" 2> "$P/$b.err"
  rc=$?
  for k in _Z2mmPKfS0_Pfi _Z5saxpyfPKfPfi; do
    planned=$(awk -v k="$k" '$1 == k { print NF - 1 }' "$B/matmul_$b.profile.plan")
    f=$(awk -v k="$k" '$2 == k { print $1 }' "$rec/kernels.tsv" 2>/dev/null | head -1)
    swept=0; failed=0
    if [ -n "$f" ] && [ -f "$rec/$f.launches.jsonl" ]; then
      swept=$(grep -vc '"own":true' "$rec/$f.launches.jsonl")
      failed=$(grep -c '"error"' "$rec/$f.launches.jsonl")
    fi
    rejected=0; [ -n "$f" ] && [ -f "$rec/$f.jsonl" ] && rejected=$(grep -c '"error"' "$rec/$f.jsonl")
    if [ "${planned:-0}" -gt 0 ] && [ "$swept" -gt 0 ] && [ "$failed" -eq 0 ] && [ $((swept + rejected)) -eq "$planned" ]; then
      ok "profiling variant ($b backend, rc=$rc): $k swept over $swept shapes ($rejected rejected by the constraints or the device), none failed to launch"
    else
      bad "profiling variant ($b backend, rc=$rc): $k planned=${planned:-?} swept=$swept rejected=$rejected failed=$failed ($(head -3 "$P/$b.err" | tr '\n' ';'))"
    fi
  done
done

# --- D. PolyBench, clang backend ----------------------------------------------------------------
if [ "${SKIP_POLYBENCH:-0}" != 1 ]; then
  progs=$(sed -n 's/^PB_PROGRAMS=//p' "$D/BUILD-INFO")
  if PROGRAMS="$progs" KBIN="$D/polybench" OUT="$OUT/polybench" JOBS=8 \
       timeout 150 bench/gpu/polybench/run.sh > "$OUT/polybench.log" 2>&1; then
    ok "PolyBench ($progs) built with the clang backend: $(tail -1 "$OUT/polybench/polybench-check.txt" 2>/dev/null || tail -1 "$OUT/polybench.log")"
  else
    bad "PolyBench with the clang backend: $(grep -h FAIL "$OUT/polybench/polybench-check.txt" 2>/dev/null | head -5 | tr '\n' ';') $(tail -3 "$OUT/polybench.log" | tr '\n' ';')"
  fi
fi

echo "# $fails failed; $(( $(date +%s) - t0 )) s" | tee -a "$S"
[ $fails -eq 0 ]

#!/usr/bin/env bash
# On a GPU machine: compares the plain and instrumented builds of launch_check.cu (and the
# instrumented sample), checks KLARAPTOR_FORCE / LOG / DISABLE, and times 10 000 launches.
# Usage: run_launch_check.sh <dir with plain, inst, matmul_inst>
set -u
D=$1; T=$(mktemp -d); fail=0
ok() { echo "PASS $*"; }; bad() { echo "FAIL $*"; fail=1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for n in 1000 777; do
  "$D/plain" check $n $T/p$n.bin > $T/p$n.txt && "$D/inst" check $n $T/i$n.bin > $T/i$n.txt
  cmp -s $T/p$n.bin $T/i$n.bin && ok "n=$n instrumented output equals plain output element for element" || bad "n=$n outputs differ"
  diff -q $T/p$n.txt $T/i$n.txt >/dev/null && ok "n=$n same launch shapes without a model" || bad "n=$n shapes differ"
done
KLARAPTOR_LOG=1 "$D/inst" check 777 $T/l.bin > /dev/null 2> $T/log.txt
echo "--- KLARAPTOR_LOG=1:"; cat $T/log.txt
[ "$(grep -c '^klaraptor: ' $T/log.txt)" -ge 6 ] && ok "every decision logged" || bad "log lines missing"
KLARAPTOR_FORCE='scale:128,axpy<float>:96,axpy<double>:96,rowsum:16x4' KLARAPTOR_LOG=$T/force.log "$D/inst" check 777 $T/f.bin > $T/f.txt
echo "--- KLARAPTOR_FORCE=scale:128,axpy<float>:96,axpy<double>:96,rowsum:16x4:"; cat $T/f.txt; cat $T/force.log
cmp -s $T/p777.bin $T/f.bin && ok "forced shapes compute the same result" || bad "forced result differs"
grep -q '^scale blockDim=128x1x1' $T/f.txt && grep -q '^axpy<float> blockDim=96x1x1' $T/f.txt && grep -q '^axpy<double> blockDim=96x1x1' $T/f.txt \
  && grep -q '^rowsum blockDim=16x4x1' $T/f.txt && grep -q '^unannotated blockDim=64x1x1' $T/f.txt \
  && ok "kernels really ran with the forced shapes (blockDim read in the kernel)" || bad "forced shapes not in effect"
KLARAPTOR_DISABLE=1 KLARAPTOR_FORCE='scale:128' "$D/inst" check 777 $T/d.bin > $T/d.txt
grep -q '^scale blockDim=256x1x1' $T/d.txt && ok "KLARAPTOR_DISABLE wins over FORCE" || bad "DISABLE"
KLARAPTOR_FORCE='mm:16x16,saxpy:512' KLARAPTOR_LOG=1 "$D/matmul_inst" 777 && ok "sample with forced shapes passes its reference check" || bad "sample"
"$D/matmul_inst" 1000 && ok "sample passes its reference check" || bad "sample"
echo "--- 10000 launches of an empty kernel, plain then instrumented, twice:"
for r in 1 2; do "$D/plain" bench 10000 | tail -1 | sed 's/^/plain /'; "$D/inst" bench 10000 | tail -1 | sed 's/^/instrumented /'; done
exit $fail

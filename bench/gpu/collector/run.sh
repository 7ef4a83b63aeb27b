#!/usr/bin/env bash
# GPU check of the CUPTI collector. Run on the GPU machine from the repository root, after
# bench/gpu/collector/build.sh ran on the build machine (it fills .dev/collector/):
#
#   OUT=<dir> bench/gpu/collector/run.sh
#
# 1. check collect: the test program plays the runtime shim and calls klaraptor_collect for
#    4 kernels (saxpy at two sizes, naive matmul, block sum with __syncthreads, strided copy)
#    over 16 shapes, with KLARAPTOR_COLLECT_DEBUG=1 (each CUDA/CUPTI step on stderr);
# 2. the same without the L2 flush (KLARAPTOR_COLLECT_NO_FLUSH=1), for the DRAM counters;
# 3. ncu on `check plain` (same kernels and shapes, one launch each) with the same metrics;
# 4. ncu's per-instruction counts of block_sum (the BAR instructions), best effort;
# 5. compare_ncu: $OUT/collector-vs-ncu.md.
# Everything lands in $OUT; the summary is printed at the end. Each step has a time limit,
# and a failing step does not stop the others.
set -u
D=.dev/collector
OUT="${OUT:-/tmp/collector-check}"
mkdir -p "$OUT/collector" "$OUT/collector-noflush"
for f in check libklaraptor_collector.so compare_ncu; do
  [ -x "$D/$f" ] || [ -f "$D/$f" ] || { echo "run.sh: $D/$f is missing: run bench/gpu/collector/build.sh on the build machine and carry .dev/collector" >&2; exit 2; }
done
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
{
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version,clocks.max.sm --format=csv,noheader
  "$NCU" --version | tail -1
  ls /usr/local/cuda/extras/CUPTI/lib64/ 2>&1 | tr '\n' ' '; echo
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== 1. collector (verbose log: $OUT/collector.stderr.txt)"
KLARAPTOR_COLLECT_DEBUG=1 timeout 90 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector" \
  > "$OUT/collector.stdout.txt" 2> "$OUT/collector.stderr.txt"
echo "check collect: exit $?"
cat "$OUT/collector.stdout.txt"
grep -E "FAILED|error|warning|could not|cannot" "$OUT/collector.stderr.txt" | grep -v "is not usable on" | head -20
wc -l "$OUT"/collector/*.jsonl 2>/dev/null

echo "== 2. collector without the L2 flush"
KLARAPTOR_COLLECT_NO_FLUSH=1 timeout 60 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector-noflush" \
  > "$OUT/collector-noflush.stdout.txt" 2> "$OUT/collector-noflush.stderr.txt"
echo "check collect (no flush): exit $?"

echo "== 3. ncu"
metrics=$("$D/compare_ncu" metrics "${CHIP:-GH100}" 2> "$OUT/metrics.stderr.txt")
if [ -z "$metrics" ]; then
  cat "$OUT/metrics.stderr.txt"
  metrics=smsp__inst_executed.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_global_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_pipe_adu.sum,smsp__inst_executed_op_ldc.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.per_cycle_active,gpu__time_duration.sum,launch__registers_per_thread,launch__shared_mem_per_block_static
fi
echo "$metrics" > "$OUT/metrics.txt"
cat "$OUT/metrics.stderr.txt"
timeout 150 "$NCU" --clock-control none --metrics "$metrics" --csv --print-units base \
  --print-kernel-base function "$D/check" plain > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr.txt"
echo "ncu: exit $? ($(grep -c '^"' "$OUT/ncu.csv") CSV lines)"
tail -3 "$OUT/ncu.stderr.txt"

echo "== 4. ncu SASS counts of block_sum (best effort)"
timeout 40 "$NCU" --clock-control none --section SourceCounters -k regex:block_sum -c 1 \
  --page source --print-source sass --csv "$D/check" plain > "$OUT/ncu-block_sum-sass.csv" 2>&1
echo "ncu source page: exit $?"; grep -i "BAR" "$OUT/ncu-block_sum-sass.csv" | head -5

echo "== 5. comparison ($OUT/collector-vs-ncu.md)"
"$D/compare_ncu" compare "$OUT/collector" "$OUT/ncu.csv" "$OUT/collector-noflush" \
  > "$OUT/collector-vs-ncu.md" 2> "$OUT/compare.stderr.txt"
echo "compare: exit $?"
cat "$OUT/compare.stderr.txt"

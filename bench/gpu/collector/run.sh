#!/usr/bin/env bash
# GPU check of the CUPTI collector. Run on the GPU machine from the repository root, after
# bench/gpu/collector/build.sh ran on the build machine (it fills .dev/collector/):
#
#   OUT=<dir> bench/gpu/collector/run.sh
#
# 1. check collect: the test program plays the runtime shim and calls klaraptor_collect for
#    5 kernels (saxpy at two sizes, naive matmul, block sum with __syncthreads, strided copy,
#    a loop of 16 or 256 barriers) over 22 shapes, with KLARAPTOR_COLLECT_DEBUG=1 (each
#    CUDA/CUPTI step and the raw metric values on stderr) and the barrier probe metrics as
#    KLARAPTOR_COLLECT_EXTRA_METRICS (raw values only);
# 2. the same in time-only mode (KLARAPTOR_COLLECT_TIME_ONLY=1), checked against step 1;
# 3. the same without the L2 flush (KLARAPTOR_COLLECT_NO_FLUSH=1), for the DRAM counters;
# 4. ncu on `check plain` (same kernels and shapes, one launch each): the collector's metrics
#    and the probes;
# 5. compare_ncu: $OUT/collector-vs-ncu.md;
# 6. ncu with the two DRAM byte counters only (one pass: no replay), then step 5 again with
#    them; 7. ncu's per-instruction counts of block_sum (the BAR lines), best effort.
# Steps 6 and 7 are skipped when the run is past 100 s (the caller allows 150). Everything
# lands in $OUT; nothing is packed here (the caller archives $OUT). A failing step does not
# stop the others.
set -u
D=.dev/collector
OUT="${OUT:-/tmp/collector-check}"
mkdir -p "$OUT/collector" "$OUT/collector-timeonly" "$OUT/collector-noflush"
for f in check libklaraptor_collector.so compare_ncu; do
  [ -x "$D/$f" ] || [ -f "$D/$f" ] || { echo "run.sh: $D/$f is missing: run bench/gpu/collector/build.sh on the build machine and carry .dev/collector" >&2; exit 2; }
done
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
PROBES=smsp__mio2rf_writeback_active_pipe_adu.sum,sm__mio_pq_read_cycles_active_pipe_adu.sum,smsp__inst_executed_pipe_cbu.sum,smsp__inst_executed_pipe_uniform.sum
SECONDS=0
{
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version,clocks.max.sm --format=csv,noheader
  "$NCU" --version | tail -1
  ls /usr/local/cuda/lib64/libcupti.so* 2>&1 | tr '\n' ' '; echo
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== 1. collector (verbose log: $OUT/collector.stderr.txt) [${SECONDS}s]"
KLARAPTOR_COLLECT_DEBUG=1 KLARAPTOR_COLLECT_EXTRA_METRICS="$PROBES" timeout 45 \
  "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector" \
  > "$OUT/collector.stdout.txt" 2> "$OUT/collector.stderr.txt"
echo "check collect: exit $?"
cat "$OUT/collector.stdout.txt"
grep -E "FAILED|error|warning|could not|cannot" "$OUT/collector.stderr.txt" | grep -v "is not usable on" | head -20
grep -E "registers per thread|attribute" "$OUT/collector.stderr.txt" | head -12
wc -l "$OUT"/collector/*.jsonl 2>/dev/null

echo "== 2. collector, time-only mode [${SECONDS}s]"
KLARAPTOR_COLLECT_TIME_ONLY=1 timeout 20 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector-timeonly" \
  > "$OUT/collector-timeonly.stdout.txt" 2> "$OUT/collector-timeonly.stderr.txt"
echo "check collect (time only): exit $?"
"$D/compare_ncu" time-only "$OUT/collector-timeonly" "$OUT/collector" \
  > "$OUT/timeonly-vs-full.md" 2> "$OUT/timeonly.stderr.txt"
echo "time-only check: exit $?"; cat "$OUT/timeonly.stderr.txt"

echo "== 3. collector without the L2 flush [${SECONDS}s]"
KLARAPTOR_COLLECT_NO_FLUSH=1 timeout 30 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector-noflush" \
  > "$OUT/collector-noflush.stdout.txt" 2> "$OUT/collector-noflush.stderr.txt"
echo "check collect (no flush): exit $?"

echo "== 4. ncu [${SECONDS}s]"
metrics=$("$D/compare_ncu" metrics "${CHIP:-GH100}" --probes 2> "$OUT/metrics.stderr.txt")
if [ -z "$metrics" ]; then
  cat "$OUT/metrics.stderr.txt"
  metrics=smsp__inst_executed.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_global_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_pipe_adu.sum,smsp__inst_executed_op_ldc.sum,smsp__warps_issue_stalled_barrier.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.per_cycle_active,gpu__time_duration.sum,launch__registers_per_thread,launch__shared_mem_per_block_static,$PROBES
fi
echo "$metrics" > "$OUT/metrics.txt"
cat "$OUT/metrics.stderr.txt"
timeout 80 "$NCU" --clock-control none --metrics "$metrics" --csv --print-units base \
  --print-kernel-base function "$D/check" plain > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr.txt"
echo "ncu: exit $? ($(grep -c '^"' "$OUT/ncu.csv") CSV lines)"
tail -3 "$OUT/ncu.stderr.txt"

compare() {
  "$D/compare_ncu" compare "$OUT/collector" "$OUT/ncu.csv" --noflush "$OUT/collector-noflush" "$@" \
    > "$OUT/collector-vs-ncu.md" 2> "$OUT/compare.stderr.txt"
  echo "compare: exit $?"
  cat "$OUT/compare.stderr.txt"
}
echo "== 5. comparison ($OUT/collector-vs-ncu.md) [${SECONDS}s]"
compare

if [ "$SECONDS" -lt 100 ]; then
  echo "== 6. ncu, DRAM bytes only (one pass) [${SECONDS}s]"
  timeout 25 "$NCU" --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv \
    --print-units base --print-kernel-base function "$D/check" plain > "$OUT/ncu-dram.csv" 2> "$OUT/ncu-dram.stderr.txt"
  rc=$?
  echo "ncu (DRAM; one pass, as CUPTI's host API counts it for GH100): exit $rc"
  [ "$rc" -eq 0 ] && compare --ncu-dram "$OUT/ncu-dram.csv"
else
  echo "== 6. skipped (past 100 s)"
fi

if [ "$SECONDS" -lt 100 ]; then
  echo "== 7. ncu SASS counts of block_sum (best effort) [${SECONDS}s]"
  timeout 25 "$NCU" --clock-control none --section SourceCounters -k regex:block_sum -c 1 \
    --page source --print-source sass --csv "$D/check" plain > "$OUT/ncu-block_sum-sass.csv" 2>&1
  echo "ncu source page: exit $?"; grep -i "BAR" "$OUT/ncu-block_sum-sass.csv" | cut -c1-120 | head -5
else
  echo "== 7. skipped (past 100 s)"
fi
echo "== done in ${SECONDS}s"
head -1 "$OUT/collector-vs-ncu.md"
head -1 "$OUT/timeonly-vs-full.md"

#!/usr/bin/env bash
# GPU check and timing of the CUPTI collector. Run on the GPU machine from the repository
# root, after bench/gpu/collector/build.sh ran on the build machine (it fills .dev/collector/):
#
#   OUT=<dir> bench/gpu/collector/run.sh
#
# P. profiling time: the PolyBench gemm, 2mm and 3mm profiling variants run their recipes
#    under the collector (KLARAPTOR_PROFILE_RUNS=5, KLARAPTOR_PROFILE_WARMUP=1, as the
#    accuracy study's profile phase), with KLARAPTOR_COLLECT_TIMING=1 (where each request's
#    time went) and KLARAPTOR_PROGRESS (the runtime's per-shape progress lines): wall time per
#    run and program, mean per sample, in $OUT/profile-time.md. No run starts past 55 s;
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
# 6. one profiler session per shape (KLARAPTOR_COLLECT_RANGES=1, the collector's first
#    design) against one per request: gemm's first recipe run again, then 2mm's if time
#    allows, compared sample by sample ($OUT/sessions-vs-per-shape.md) and timed;
# 7. ncu with the two DRAM byte counters only (one pass: no replay), then step 5 again with
#    them; 8. ncu's per-instruction counts of block_sum (the BAR lines), best effort.
# Steps 6 to 8 start only while the run is under 95 s; every step has its own timeout and a
# failing step does not stop the others, so that one run always says what it got. Everything
# lands in $OUT; nothing is packed here (the caller archives $OUT).
set -u
D=.dev/collector
root=$(pwd)
OUT="${OUT:-/tmp/collector-check}"
case $OUT in /*) ;; *) OUT=$root/$OUT ;; esac
mkdir -p "$OUT/collector" "$OUT/collector-timeonly" "$OUT/collector-noflush" "$OUT/profile"
for f in check libklaraptor_collector.so compare_ncu; do
  [ -x "$D/$f" ] || [ -f "$D/$f" ] || { echo "run.sh: $D/$f is missing: run bench/gpu/collector/build.sh on the build machine and carry .dev/collector" >&2; exit 2; }
done
COLLECTOR=$root/$D/libklaraptor_collector.so
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
PROBES=smsp__mio2rf_writeback_active_pipe_adu.sum,sm__mio_pq_read_cycles_active_pipe_adu.sum,smsp__inst_executed_pipe_cbu.sum,smsp__inst_executed_pipe_uniform.sum
SECONDS=0
{
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version,clocks.max.sm --format=csv,noheader
  "$NCU" --version | tail -1
  ls /usr/local/cuda/lib64/libcupti.so* 2>&1 | tr '\n' ' '; echo
  date -u +%Y-%m-%dT%H:%M:%SZ
  cat "$D/BUILD-INFO" 2>/dev/null
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# profile_runs <program> <out dir> <last start second> <max runs> [ENV=VALUE ...]: runs the
# program's recipe commands under the collector; one line per run in <out dir>/runs.tsv.
profile_runs() {
  local p=$1 out=$2 last=$3 max=$4
  shift 4
  local dir=$root/$D/polybench/$p i=0 cmd
  if [ ! -x "$dir/$p" ] || [ ! -f "$dir/recipes.txt" ]; then
    echo "  $p: no variant in $dir (build.sh builds it); skipped"
    printf '%s\t-\tmissing\t0\t0\t-\n' "$p" >> "$out/runs.tsv"
    return
  fi
  while IFS= read -r cmd; do
    [ -z "$cmd" ] && continue
    i=$((i + 1))
    [ "$i" -gt "$max" ] && break
    if [ "$SECONDS" -ge "$last" ]; then
      echo "  $p run$i: skipped (the run is at ${SECONDS} s; no start past ${last} s)"
      printf '%s\trun%d\tskipped\t0\t0\t%s\n' "$p" "$i" "$cmd" >> "$out/runs.tsv"
      continue
    fi
    local run=$out/$p/run$i limit=$((115 - SECONDS))
    [ "$limit" -gt 25 ] && limit=25
    [ "$limit" -lt 5 ] && limit=5
    mkdir -p "$run/records"
    local t0; t0=$(now)
    (cd "$dir" && env -u KLARAPTOR_FORCE -u KLARAPTOR_DISABLE -u KLARAPTOR_LOG \
       KLARAPTOR_PROFILE_OUT="$run/records" KLARAPTOR_PROFILE_PLAN="$dir/$p.plan" \
       KLARAPTOR_COLLECTOR="$COLLECTOR" KLARAPTOR_PROFILE_RUNS=5 KLARAPTOR_PROFILE_WARMUP=1 \
       KLARAPTOR_PROGRESS="$run/progress.tsv" KLARAPTOR_COLLECT_TIMING=1 "$@" \
       timeout -k 2 "$limit" sh -c "$cmd" > "$run/stdout.txt" 2> "$run/stderr.txt")
    local rc=$? wall; wall=$(since "$t0")
    local n; n=$(cat "$run/records/"*.jsonl 2>/dev/null | wc -l)
    local bad; bad=$(cat "$run/records/"*.jsonl 2>/dev/null | grep -c '"error"')
    printf '%s\trun%d\t%s\t%s\t%s\t%s\n' "$p" "$i" "$rc" "$wall" "$n" "$cmd" >> "$out/runs.tsv"
    # rc 1: the program's own check fails under the sweep (kernels that accumulate run once
    # per shape), which is expected; the records are what counts.
    printf '  %-5s run%d rc=%-3s %6.2f s  %3d samples (%d with an error)  %s\n' "$p" "$i" "$rc" "$wall" "$n" "$bad" "$cmd"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "    TIMEOUT after $limit s"
    if [ "$rc" = 0 ] || [ "$rc" = 1 ]; then
      grep -v '^klaraptor-collect: timing ' "$run/stderr.txt" | grep -E 'klaraptor-(collect|profile)' | head -3 | sed 's/^/    /'
    else
      grep -v '^klaraptor-collect: timing ' "$run/stderr.txt" | tail -3 | sed 's/^/    /'
    fi
  done < "$dir/recipes.txt"
}

# profile_summary <out dir>: the Markdown table of a profile_runs directory.
profile_summary() {
  local out=$1
  cat "$out"/*/run*/stderr.txt 2>/dev/null | grep '^klaraptor-collect: timing ' > "$out/timing-lines.txt"
  for f in "$out"/*/run*/stderr.txt; do
    [ -f "$f" ] || continue
    local p; p=$(basename "$(dirname "$(dirname "$f")")")
    grep '^klaraptor-collect: timing ' "$f" | sed "s/^/$p /"
  done > "$out/timing-by-program.txt"
  awk -F'\t' -v timing="$out/timing-by-program.txt" '
    BEGIN {
      while ((getline line < timing) > 0) {
        n = split(line, f, " ")
        p = f[1]
        for (i = 5; i <= n; i++) { split(f[i], kv, "="); t[p, kv[1]] += kv[2] }
        reqs[p]++
      }
      prev["gemm"] = "27.0"; prev["2mm"] = "68.1"; prev["3mm"] = "118.1"
    }
    $3 == "skipped" || $3 == "missing" { skipped[$1]++; if (!($1 in seen)) { seen[$1] = 1; order[++np] = $1 }; next }
    {
      if (!($1 in seen)) { seen[$1] = 1; order[++np] = $1 }
      runs[$1]++; wall[$1] += $4; samples[$1] += $5
      if ($3 != 0 && $3 != 1) bad[$1]++
    }
    END {
      print "| program | recipe runs | wall s | samples | ms per sample | collector requests | collector ms per shape | context set-up ms | timing ms | sessions | passes | session set-up ms | passes ms | decode ms | evaluate ms | 2026-11-22 wall s (one session per shape) |"
      print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
      for (k = 1; k <= np; k++) {
        p = order[k]
        r = runs[p] + 0
        note = ""
        if (skipped[p]) note = " (" skipped[p] " not run)"
        if (bad[p]) note = note " (" bad[p] " failed or timed out)"
        ms = samples[p] ? 1000 * wall[p] / samples[p] : 0
        sh = t[p, "shapes"] ? t[p, "total_ms"] / t[p, "shapes"] : 0
        printf "| %s | %d%s | %.1f | %d | %.1f | %d | %.2f | %.0f | %.0f | %d | %d | %.0f | %.0f | %.0f | %.0f | %s |\n", \
          p, r, note, wall[p], samples[p], ms, reqs[p], sh, t[p, "context_setup_ms"], t[p, "timing_ms"], \
          t[p, "sessions"], t[p, "passes"], t[p, "session_setup_ms"], t[p, "passes_ms"], \
          t[p, "decode_ms"], t[p, "evaluate_ms"], (p in prev) ? prev[p] : "-"
      }
    }' "$out/runs.tsv"
}

echo "== P. profiling PolyBench gemm, 2mm, 3mm with the collector [${SECONDS}s]"
: > "$OUT/profile/runs.tsv"
for p in gemm 2mm 3mm; do
  profile_runs "$p" "$OUT/profile" 55 99
done
{
  echo "# Profiling time of PolyBench gemm, 2mm and 3mm on $(head -1 "$OUT/env.txt" | cut -d, -f1)"
  echo
  echo "$(head -1 "$OUT/env.txt"); $(sed -n 2p "$OUT/env.txt"); $(grep -m1 -o 'libcupti.so.[0-9.]*' "$OUT/env.txt" | tail -1); $(sed -n 4p "$OUT/env.txt")."
  echo "Each program's recipe commands (klaraptor plan --recipes) run its profiling variant under the"
  echo "collector (KLARAPTOR_PROFILE_RUNS=5, KLARAPTOR_PROFILE_WARMUP=1): each launch of a kernel"
  echo "at a new size is swept over the plan's 32 shapes (2-D), every shape timed, then profiled in"
  echo "one range-profiler session per request. Wall time includes process start, CUDA and CUPTI"
  echo "initialisation and the program's own work; the collector columns are the sums of its"
  echo "KLARAPTOR_COLLECT_TIMING lines (per request: context set-up on the first, timing, sessions,"
  echo "passes, decode, evaluation). Issue 6 asks for at most 30 s for a 2-D kernel such as gemm."
  echo
  profile_summary "$OUT/profile"
} > "$OUT/profile-time.md"
cat "$OUT/profile-time.md" | tail -5
n_progress=$(cat "$OUT"/profile/*/run*/progress.tsv 2>/dev/null | wc -l)
echo "progress lines written by the runtime: $n_progress; the first sweep's:"
cat "$OUT"/profile/gemm/run1/progress.tsv 2>/dev/null | awk -F'\t' '$1 != "shape" || $4 % 8 == 0' | head -6 | sed 's/^/  /'

echo "== 1. collector (verbose log: $OUT/collector.stderr.txt) [${SECONDS}s]"
KLARAPTOR_COLLECT_DEBUG=1 KLARAPTOR_COLLECT_EXTRA_METRICS="$PROBES" timeout 30 \
  "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector" \
  > "$OUT/collector.stdout.txt" 2> "$OUT/collector.stderr.txt"
echo "check collect: exit $?"
cat "$OUT/collector.stdout.txt"
grep -E "FAILED|error|warning|could not|cannot|refused" "$OUT/collector.stderr.txt" | grep -v "is not usable on" | head -20
grep -E "registers per thread|attribute" "$OUT/collector.stderr.txt" | head -12
grep -E "^klaraptor-collect: timing " "$OUT/collector.stderr.txt" | head -8
wc -l "$OUT"/collector/*.jsonl 2>/dev/null

echo "== 2. collector, time-only mode [${SECONDS}s]"
KLARAPTOR_COLLECT_TIME_ONLY=1 timeout 20 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector-timeonly" \
  > "$OUT/collector-timeonly.stdout.txt" 2> "$OUT/collector-timeonly.stderr.txt"
echo "check collect (time only): exit $?"
"$D/compare_ncu" time-only "$OUT/collector-timeonly" "$OUT/collector" \
  > "$OUT/timeonly-vs-full.md" 2> "$OUT/timeonly.stderr.txt"
echo "time-only check: exit $?"; cat "$OUT/timeonly.stderr.txt"

echo "== 3. collector without the L2 flush [${SECONDS}s]"
KLARAPTOR_COLLECT_NO_FLUSH=1 timeout 20 "$D/check" collect "$D/libklaraptor_collector.so" "$OUT/collector-noflush" \
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
ncu_limit=$((112 - SECONDS)); [ "$ncu_limit" -gt 80 ] && ncu_limit=80; [ "$ncu_limit" -lt 20 ] && ncu_limit=20
timeout "$ncu_limit" "$NCU" --clock-control none --metrics "$metrics" --csv --print-units base \
  --print-kernel-base function "$D/check" plain > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr.txt"
echo "ncu: exit $? ($(grep -c '^"' "$OUT/ncu.csv") CSV lines, limit ${ncu_limit} s)"
tail -3 "$OUT/ncu.stderr.txt"

compare() {
  "$D/compare_ncu" compare "$OUT/collector" "$OUT/ncu.csv" --noflush "$OUT/collector-noflush" "$@" \
    > "$OUT/collector-vs-ncu.md" 2> "$OUT/compare.stderr.txt"
  echo "compare: exit $?"
  cat "$OUT/compare.stderr.txt"
}
echo "== 5. comparison ($OUT/collector-vs-ncu.md) [${SECONDS}s]"
compare

if [ "$SECONDS" -lt 95 ]; then
  echo "== 6. one profiler session per shape (KLARAPTOR_COLLECT_RANGES=1) against one per request [${SECONDS}s]"
  mkdir -p "$OUT/profile-per-shape"
  : > "$OUT/profile-per-shape/runs.tsv"
  profile_runs gemm "$OUT/profile-per-shape" 95 1 KLARAPTOR_COLLECT_RANGES=1
  profile_runs 2mm "$OUT/profile-per-shape" 85 1 KLARAPTOR_COLLECT_RANGES=1
  {
    echo "# One profiler session per shape (KLARAPTOR_COLLECT_RANGES=1) against one per request"
    echo
    echo "$(head -1 "$OUT/env.txt"); $(sed -n 4p "$OUT/env.txt")."
    echo
    echo "Time (the same recipe runs as in profile-time.md, first run of each program):"
    echo
    profile_summary "$OUT/profile-per-shape"
    echo
    for p in gemm 2mm; do
      a=$OUT/profile-per-shape/$p/run1/records b=$OUT/profile/$p/run1/records
      if [ -d "$a" ] && [ -d "$b" ]; then
        echo "## $p, first recipe run: A = one session per shape, B = one session per request"
        echo
        "$D/compare_ncu" same "$a" "$b" 2>/dev/null
        echo
      fi
    done
  } > "$OUT/sessions-vs-per-shape.md"
  grep -E '^collector A vs B' "$OUT/sessions-vs-per-shape.md"
  grep -E '^\| (gemm|2mm) ' "$OUT/sessions-vs-per-shape.md" | head -2
else
  echo "== 6. skipped (past 95 s)"
fi

if [ "$SECONDS" -lt 95 ]; then
  echo "== 7. ncu, DRAM bytes only (one pass) [${SECONDS}s]"
  timeout 20 "$NCU" --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv \
    --print-units base --print-kernel-base function "$D/check" plain > "$OUT/ncu-dram.csv" 2> "$OUT/ncu-dram.stderr.txt"
  rc=$?
  echo "ncu (DRAM; one pass, as CUPTI's host API counts it for GH100): exit $rc"
  [ "$rc" -eq 0 ] && compare --ncu-dram "$OUT/ncu-dram.csv"
else
  echo "== 7. skipped (past 95 s)"
fi

if [ "$SECONDS" -lt 98 ]; then
  echo "== 8. ncu SASS counts of block_sum (best effort) [${SECONDS}s]"
  timeout 15 "$NCU" --clock-control none --section SourceCounters -k regex:block_sum -c 1 \
    --page source --print-source sass --csv "$D/check" plain > "$OUT/ncu-block_sum-sass.csv" 2>&1
  echo "ncu source page: exit $?"; grep -i "BAR" "$OUT/ncu-block_sum-sass.csv" | cut -c1-120 | head -5
else
  echo "== 8. skipped (past 98 s)"
fi
echo "== done in ${SECONDS}s"
echo "-- summary"
head -1 "$OUT/collector-vs-ncu.md" 2>/dev/null
head -1 "$OUT/timeonly-vs-full.md" 2>/dev/null
grep -E '^collector A vs B' "$OUT/sessions-vs-per-shape.md" 2>/dev/null
grep -E '^\| (program|gemm|2mm|3mm) ' "$OUT/profile-time.md" | cut -d'|' -f2-8

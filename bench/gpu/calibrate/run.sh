#!/usr/bin/env bash
# Device calibration on the GPU machine (H200, CUDA at /usr/local/cuda), from the repo root:
#
#   OUT=/some/dir bench/gpu/calibrate/run.sh
#
# 1. builds profiler/calibrate/calibrate.cu with /usr/local/cuda/bin/nvcc -arch=sm_90;
# 2. runs it 3 times: $OUT/calibration-run{1,2,3}.toml (+ .log with its stderr);
# 3. prints each figure of the 3 runs and their run-to-run range;
# 4. counts the SASS instructions of the issue-rate kernels (cuobjdump), to check the
#    instruction counts the program divides by: $OUT/issue-sass-counts.txt;
# 5. if .dev/calibrate/klaraptor exists (the release `klaraptor` built on the build machine),
#    runs `klaraptor device show`, `device calibrate` (twice: the second reuses the cache),
#    `device show` and `device show --json` with XDG_CACHE_HOME=$OUT/cache: $OUT/cli-*.txt.
#
# Nothing here changes clocks or GPU settings.
set -uo pipefail
OUT=${OUT:?set OUT to the directory for the results}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUOBJDUMP=${CUOBJDUMP:-$(dirname "$NVCC")/cuobjdump}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SRC=$ROOT/profiler/calibrate/calibrate.cu
mkdir -p "$OUT"
fail=0

nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true
cat "$OUT/nvidia-smi.csv"

echo "--- build: $NVCC -O3 -arch=sm_90"
if ! "$NVCC" -O3 -arch=sm_90 -o "$OUT/calibrate" "$SRC" > "$OUT/nvcc.log" 2>&1; then
  cat "$OUT/nvcc.log"; echo "FAIL build"; exit 1
fi

echo "--- 3 runs"
for i in 1 2 3; do
  t0=$(date +%s.%N)
  "$OUT/calibrate" > "$OUT/calibration-run$i.toml" 2> "$OUT/calibration-run$i.log"
  rc=$?
  t1=$(date +%s.%N)
  printf 'run %d: exit %d, %.1f s\n' "$i" "$rc" "$(awk "BEGIN { print $t1 - $t0 }")"
  if [ $rc -ne 0 ]; then cat "$OUT/calibration-run$i.log"; fail=1; fi
done

echo "--- figures ([calibration]): run1 run2 run3, run-to-run range (max-min) and its % of the median"
awk '
  FNR == 1 { run++; sect = "" }
  /^\[/ { sect = $0; next }
  sect == "[calibration]" && /=/ {
    key = $1; val = $3
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    v[key, run] = val
  }
  END {
    for (k = 1; k <= n; k++) {
      key = order[k]; lo = 1e300; hi = -1e300; m = 0
      for (r = 1; r <= run; r++) { x = v[key, r] + 0; if (x < lo) lo = x; if (x > hi) hi = x; a[r] = x }
      # median of up to 3
      if (run == 3) { m = a[1] + a[2] + a[3] - lo - hi } else { m = a[1] }
      pct = (m != 0) ? 100 * (hi - lo) / (m < 0 ? -m : m) : 0
      printf "  %-48s", key
      for (r = 1; r <= run; r++) printf " %12s", v[key, r]
      printf "   range %10.3f (%5.1f%%)\n", hi - lo, pct
    }
  }' "$OUT"/calibration-run1.toml "$OUT"/calibration-run2.toml "$OUT"/calibration-run3.toml

echo "--- SASS of the issue-rate kernels (the program divides by 128 more instructions per iteration for STEPS=32 than for STEPS=16)"
if [ -x "$CUOBJDUMP" ]; then
  "$CUOBJDUMP" -sass "$OUT/calibrate" > "$OUT/calibrate.sass" 2>&1
  awk '
    /Function :/ { fn = $3; next }
    fn ~ /issue_/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^(FFMA|IADD3|LOP3|IMAD|FADD|FMUL|SHF|LEA)(\.|$)/) { split($i, p, "."); c[fn, p[1]]++; fns[fn] = 1 }
    }
    END {
      for (f in fns) {
        printf "%s:", f
        n = split("FFMA IADD3 LOP3 IMAD FADD FMUL SHF LEA", ops, " ")
        for (i = 1; i <= n; i++) if (c[f, ops[i]]) printf " %s=%d", ops[i], c[f, ops[i]]
        printf "\n"
      }
    }' "$OUT/calibrate.sass" | sort | tee "$OUT/issue-sass-counts.txt"
  gzip -f "$OUT/calibrate.sass"
  rm -f "$OUT/calibrate"  # the binary itself is not needed back
else
  echo "  (no cuobjdump at $CUOBJDUMP)"
fi

KL=$ROOT/.dev/calibrate/klaraptor
if [ -x "$KL" ]; then
  echo "--- the CLI: $KL device … with XDG_CACHE_HOME=$OUT/cache, KLARAPTOR_NVCC=$NVCC"
  export XDG_CACHE_HOME=$OUT/cache KLARAPTOR_NVCC=$NVCC
  "$KL" device show < /dev/null > "$OUT/cli-show-empty.txt" 2>&1
  echo "device show (empty cache): exit $?"; sed 's/^/  /' "$OUT/cli-show-empty.txt"
  t0=$(date +%s.%N)
  "$KL" device calibrate > "$OUT/cli-calibrate.txt" 2>&1; rc=$?
  t1=$(date +%s.%N)
  printf 'device calibrate: exit %d, %.1f s (compile + measure)\n' "$rc" "$(awk "BEGIN { print $t1 - $t0 }")"
  [ $rc -eq 0 ] || { cat "$OUT/cli-calibrate.txt"; fail=1; }
  t0=$(date +%s.%N)
  "$KL" device calibrate > "$OUT/cli-calibrate-again.txt" 2>&1; rc=$?
  t1=$(date +%s.%N)
  printf 'device calibrate again: exit %d, %.1f s (should reuse the cache)\n' "$rc" "$(awk "BEGIN { print $t1 - $t0 }")"
  grep -q "already calibrated" "$OUT/cli-calibrate-again.txt" && echo "  reused the cached report" \
    || { echo "  FAIL: did not reuse the cache"; fail=1; }
  "$KL" device show > "$OUT/cli-show.txt" 2>&1 || fail=1
  "$KL" device show --json > "$OUT/cli-show.json" 2> "$OUT/cli-show-json.err" || fail=1
  echo "device show:"; sed 's/^/  /' "$OUT/cli-show.txt" | head -40
  ls -la "$OUT/cache/klaraptor/devices" "$OUT/cache/klaraptor/calibrate"/* > "$OUT/cli-cache-listing.txt" 2>&1
  rm -rf "$OUT/cache/klaraptor/calibrate"  # the compiled benchmark: not needed back
else
  echo "--- (no $KL: CLI check skipped)"
fi
exit $fail

#!/usr/bin/env bash
# Occupancy check on the GPU machine (run from the repository root, $OUT set):
#   1. device_query  -> $OUT/device-query.toml   (driver attributes, name, UUID, versions)
#   2. occupancy_sweep -> $OUT/occupancy.csv     (cudaOccupancyMaxActiveBlocksPerMultiprocessor)
#   3. device_toml   -> $OUT/nvidia-h200.toml    (klaraptor device description), if built
#   4. occupancy_replay on the CSV -> $OUT/replay.txt (klaraptor's occupancy vs the API)
# Binaries come from .dev/model/ (bench/gpu/occupancy/build.sh builds them on the build
# machine); the CUDA programs are rebuilt here with /usr/local/cuda/bin/nvcc if absent.
# Each step runs even if an earlier one failed; the summary says what worked.
set -uo pipefail
: "${OUT:?set OUT to the results directory}"
mkdir -p "$OUT"
dev=.dev/model
log=$OUT/run.log
: > "$log"
say() { echo "$*" | tee -a "$log"; }

nvcc=/usr/local/cuda/bin/nvcc
for prog in device_query:device_query.cu occupancy_sweep:sweep.cu; do
  name=${prog%%:*}; src=bench/gpu/occupancy/${prog#*:}
  if [ ! -x "$dev/$name" ]; then
    mkdir -p "$OUT/build"
    say "building $name with $nvcc"
    "$nvcc" -O2 -arch=sm_90 "$src" -o "$OUT/build/$name" >>"$log" 2>&1 || say "BUILD FAILED: $name"
  fi
done
bin() { if [ -x "$dev/$1" ]; then echo "$dev/$1"; else echo "$OUT/build/$1"; fi; }

nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,memory.total \
  --format=csv > "$OUT/nvidia-smi.csv" 2>>"$log" || say "nvidia-smi failed"

if "$(bin device_query)" > "$OUT/device-query.toml" 2>>"$log"; then
  say "device_query: ok"
else
  say "device_query: FAILED (see run.log)"
fi

start=$(date +%s.%N)
if timeout 100 "$(bin occupancy_sweep)" "$OUT/occupancy.csv" 2>>"$log"; then
  say "sweep: ok, $(grep -vc '^#' "$OUT/occupancy.csv") lines in $(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo '?') s"
else
  say "sweep: FAILED (see run.log)"
fi

if [ -x "$dev/device_toml" ] && [ -s "$OUT/device-query.toml" ]; then
  if "$dev/device_toml" "$OUT/device-query.toml" > "$OUT/nvidia-h200.toml" 2>>"$log"; then
    say "device_toml: ok"
  else
    say "device_toml: FAILED (see run.log)"
  fi
fi

if [ -x "$dev/occupancy_replay" ] && [ -s "$OUT/occupancy.csv" ]; then
  "$dev/occupancy_replay" "$OUT/occupancy.csv" > "$OUT/replay.txt" 2>&1
  say "replay: exit $? -- $(tail -n 1 "$OUT/replay.txt")"
  grep -m 10 MISMATCH "$OUT/replay.txt" | tee -a "$log"
fi

echo "---- summary ----"
cat "$OUT/nvidia-smi.csv" 2>/dev/null
sed -n '/^\[device\]/,/^\[attributes\]/p' "$OUT/device-query.toml" 2>/dev/null | grep -v '^\['
grep -E '^(MultiProcessorCount|ClockRate|MemoryClockRate|GlobalMemoryBusWidth|MaxSharedMemoryPerMultiprocessor|MaxSharedMemoryPerBlockOptin|ReservedSharedMemoryPerBlock|MaxBlocksPerMultiprocessor) ' "$OUT/device-query.toml" 2>/dev/null
grep -c ',0,0$' "$OUT/occupancy.csv" 2>/dev/null | sed 's/^/rows with 0 blocks (rc 0): /'
awk -F, '!/^#/ && NR>1 && $8!=0 {n++} END {print "rows where the API returned an error: " n+0}' "$OUT/occupancy.csv" 2>/dev/null
cat "$log" | grep -E 'FAILED|replay' || true

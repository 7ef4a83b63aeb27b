#!/usr/bin/env bash
# Runs a profiling variant's recipe commands on the GPU machine with the in-process
# collector, as a GPU-less build farm would: the records come back for `klaraptor import`.
#
#   bench/gpu/profile_variant.sh <dir> <plan> <commands-file> <out-dir>
#
# <dir> holds the variant under the name its recipe runs (e.g. ./matmul); <commands-file>
# is `klaraptor plan <variant> --recipes`. Each command runs in <dir> with its own
# <out-dir>/run<i>/records/, and <out-dir>/env.txt identifies the GPU and toolchain.
set -u
dir=$1 plan=$2 cmds=$3 out=$4
root=$(pwd)
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader
  /usr/local/cuda/bin/nvcc --version | tail -2
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$out/env.txt" 2>&1
i=0
total_start=$(date +%s.%N)
while IFS= read -r cmd; do
  [ -z "$cmd" ] && continue
  i=$((i+1))
  run="$out/run$i"
  mkdir -p "$run/records"
  start=$(date +%s.%N)
  (cd "$root/$dir" && KLARAPTOR_PROFILE_OUT="$run/records" KLARAPTOR_PROFILE_PLAN="$root/$plan" \
     KLARAPTOR_COLLECTOR="$root/.dev/collector/libklaraptor_collector.so" \
     timeout "${JOB_LIMIT:-120}" sh -c "$cmd" > "$run/stdout.txt" 2> "$run/stderr.txt")
  rc=$?
  echo "run$i rc=$rc $(awk "BEGIN{print $(date +%s.%N) - $start}") s: $cmd" | tee -a "$out/summary.txt"
done < "$cmds"
echo "total $(awk "BEGIN{print $(date +%s.%N) - $total_start}") s" | tee -a "$out/summary.txt"

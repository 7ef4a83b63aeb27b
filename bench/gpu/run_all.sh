#!/usr/bin/env bash
# Runs the GPU checks in one device call (each device start costs minutes), from the repo
# root on the GPU machine: PARTS="occupancy calibrate collector fixtures polybench" by default.
# Each part writes into $OUT/<part>/ and has its own time limit; a failing part does not stop
# the others. Build everything first on the build machine (each part's build.sh, and the
# profiling variants for the fixtures under .dev/fixtures/).
set -u
OUT=${OUT:-/tmp/out}
PARTS=${PARTS:-occupancy calibrate collector fixtures polybench}
LIMIT=${LIMIT:-150}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
for p in $PARTS; do
  mkdir -p "$OUT/$p"
  start=$(date +%s)
  case $p in
    fixtures) OUT="$OUT/$p" timeout "$LIMIT" bench/gpu/fixtures/ncu_capture.sh .dev/fixtures/jobs.txt > "$OUT/$p/log.txt" 2>&1 ;;
    *) OUT="$OUT/$p" timeout "$LIMIT" "bench/gpu/$p/run.sh" > "$OUT/$p/log.txt" 2>&1 ;;
  esac
  rc=$?
  echo "== $p: rc=$rc in $(( $(date +%s) - start )) s"
  tail -n 15 "$OUT/$p/log.txt"
done
# The device tool brings back a limited number of files: pack everything into one.
(cd "$OUT" && tar czf /tmp/all.tar.gz --exclude=all.tar.gz . && find . -mindepth 1 -delete && mv /tmp/all.tar.gz .)

#!/usr/bin/env bash
# The choice phase of several prepared studies in one device call, on a host with two GPUs:
# two lanes, one per GPU, each running device.sh (PHASE=choice) over a list of studies and job
# patterns. From the repository root:
#
#   bench/accuracy/lanes.sh pack <tag> <study dir>...   # here: .dev/carry/<tag>.tar.xz
#   LANE0='<suite>:<study>|<JOBS regex>;…' LANE1='…' [LANE_S=545] [REPEATS=3] \
#     bench/accuracy/lanes.sh run                       # there, with .dev/carry carried
#
# pack: a slim, compressed copy of prepared studies (made by prepare.sh build + models): per
#   study jobs.txt, BUILD-INFO and per program <program>.klaraptor, kernels.tsv and
#   models/*.json, all the choice phase reads, under .dev/cc/<study name>/ (about 1.3 MB for
#   two suite halves, against 20-25 MB each as they are).
# run: unpacks every .dev/carry/*.tar.xz once, then runs the lanes at the same time
#   (CUDA_VISIBLE_DEVICES 0 and 1); each task of a lane is `<suite>:<study name>|<JOBS>`
#   (suite polybench or idioms), run with DEADLINE_S and a timeout of what is left of the
#   lane's LANE_S seconds, whole runs repeated REPEATS times. Results go to /tmp/lane<g>-<i>/
#   and are tarred into $OUT/lanes.tar.xz with each lane's log. A job killed by the timeout
#   leaves a partial choice/<program>/x<k>/ with no summary row: drop it when merging.
#
# Caution, measured on 2026-11-28 (bench/results/refine-v4-h200-2026-11-28.md): with both
# lanes busy, short launch-bound kernels (3-20 us) read 20-50 % longer per launch than on a
# host running one lane, and whole runs spread more. Every method of a job is still timed
# under the same conditions (interleaved repeats), but for keys whose launches take a few
# microseconds a single lane is the cleaner measurement.
set -u
cmd=${1:-}
root=$(pwd)
[ -f bench/accuracy/device.sh ] || { echo "lanes.sh: run from the repository root" >&2; exit 2; }

pack() {
  local tag=${1:?pack needs a tag}
  shift
  [ $# -gt 0 ] || { echo "lanes.sh pack: name at least one study directory" >&2; exit 2; }
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  for s in "$@"; do
    [ -f "$s/jobs.txt" ] || { echo "lanes.sh pack: $s has no jobs.txt (prepare.sh build first)" >&2; exit 2; }
    local name
    name=$(basename "$s")
    (cd "$s" && find . \( -name jobs.txt -o -name BUILD-INFO -o -name '*.klaraptor' \
      -o -name kernels.tsv -o -path '*/models/*.json' \) -type f) | while read -r f; do
      mkdir -p "$stage/.dev/cc/$name/$(dirname "$f")"
      cp -a "$s/$f" "$stage/.dev/cc/$name/$f"
    done
  done
  mkdir -p .dev/carry
  tar -C "$stage" -cf - .dev/cc | xz -T2 -9 > ".dev/carry/$tag.tar.xz.part" &&
    mv ".dev/carry/$tag.tar.xz.part" ".dev/carry/$tag.tar.xz"
  ls -l ".dev/carry/$tag.tar.xz"
}

lane() {
  local gpu=$1 spec=$2 t0 i=0
  t0=$(date +%s)
  IFS=';' read -ra tasks <<< "$spec"
  for t in "${tasks[@]}"; do
    i=$((i + 1))
    local st=${t%%|*}
    local jobs=${t#*|}
    local suite=${st%%:*}
    local dir=${st#*:}
    local left=$((LANE_S - ($(date +%s) - t0)))
    [ $left -gt 20 ] || { echo "lane$gpu: no time left for $t"; continue; }
    echo "lane$gpu: $t with ${left} s left ($(date -u +%T))"
    CUDA_VISIBLE_DEVICES=$gpu SUITE=$suite PHASE=choice STUDY=.dev/cc/$dir JOBS="$jobs" \
      WHOLE_RUN_REPEATS=$REPEATS DEADLINE_S=$left OUT=/tmp/lane$gpu-$i \
      timeout -k 5 $left bash bench/accuracy/device.sh > /tmp/lane$gpu-$i.log 2>&1
    echo "lane$gpu: $t rc=$? ($(date -u +%T))"
    tail -n 4 /tmp/lane$gpu-$i.log | sed "s/^/  lane$gpu: /"
  done
}

run() {
  : "${OUT:?set OUT}"
  LANE_S=${LANE_S:-545}
  REPEATS=${REPEATS:-3}
  if [ ! -d .dev/cc ]; then
    for a in .dev/carry/*.tar.xz; do xz -dc "$a" | tar -xf - || exit 1; done
  fi
  lane 0 "${LANE0:-}" > /tmp/lane0.txt 2>&1 &
  lane 1 "${LANE1:-}" > /tmp/lane1.txt 2>&1 &
  wait
  cat /tmp/lane0.txt /tmp/lane1.txt
  nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
  (cd /tmp && tar -cJf "$OUT/lanes.tar.xz" lane*-* lane0.txt lane1.txt 2>/dev/null)
  ls -l "$OUT"
}

case $cmd in
  pack) shift; pack "$@" ;;
  run) run ;;
  *) echo "usage: bench/accuracy/lanes.sh pack <tag> <study dir>... | run (see the header)" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The GPU-machine half of the CMake flow (issue 21's acceptance), from the repo root with
# .dev/linkprof (bench/linkprof/bundle.sh: klaraptor, the collector, libLLVM) and
# .dev/cmake-gpu (bench/cmake-gpu/build.sh) carried:
#
#   STEP=profile OUT=$OUT bench/cmake-gpu/device.sh   # after `build.sh first`
#   STEP=run     OUT=$OUT bench/cmake-gpu/device.sh   # after `build.sh again <db.tar>`
#
# profile: unpacks first.tar.xz under /tmp/klaraptor-cmake-gpu (the build directory the
#   objects record), runs build/app once with KLARAPTOR_LOG=1 (no rational program yet: the
#   program's own launch), then `klaraptor profile --db db build/app` on this GPU (the recipe
#   of the annotation, the collector, from an empty database), and writes $OUT/db.tar (the
#   database, for `build.sh again`), profile.txt and summary.txt.
# run: unpacks again.tar.xz and runs the rebuilt build/app with KLARAPTOR_LOG=1 at three sizes
#   (the choices of the rational program it carries are logged) and with KLARAPTOR_DISABLE=1,
#   and writes runs.txt and summary.txt.
# CMAKE_GPU_BUNDLE: the bundle to unpack (default .dev/linkprof/bundle.tar.xz); one holding
#   only its BUILD-INFO and bin/ will do (unpack.sh), e.g. .dev/cmake-gpu/tools.tar.xz made by
#   `tar -C <unpacked bundle> -cJf .dev/cmake-gpu/tools.tar.xz BUILD-INFO bin`.
# KERNELS: the annotated kernels whose programs the run step checks (default saxpy; "scale
#   shrink" for build.sh's PROJECT=separable-compilation).
set -uo pipefail
ROOT=/tmp/klaraptor-cmake-gpu
: "${OUT:?set OUT}"
STEP=${STEP:-}
repo=$(pwd)
nvcc=${CMAKE_GPU_NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
. "$repo/bench/linkprof/checks.sh"

case $STEP in profile) tarball=first ;; run) tarball=again ;; *) die "set STEP=profile or run" ;; esac
[ -f "$repo/.dev/cmake-gpu/$tarball.tar.xz" ] || die "no .dev/cmake-gpu/$tarball.tar.xz: run bench/cmake-gpu/build.sh on the build machine and carry .dev/cmake-gpu"
say "== CMake-built program on the GPU, step $STEP ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
rm -rf "$ROOT"
mkdir -p "$ROOT"
set -e
. bench/linkprof/unpack.sh
unpack_bundle "${CMAKE_GPU_BUNDLE:-$repo/.dev/linkprof/bundle.tar.xz}" "$ROOT/bundle" "$nvcc"
set +e
tar -C "$ROOT" -xJf "$repo/.dev/cmake-gpu/$tarball.tar.xz" || die "unpacking $tarball.tar.xz"
export XDG_CACHE_HOME=$ROOT/cache KLARAPTOR_CHOICES=off
unset KLARAPTOR_PROFILE_DB KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_COLLECTOR
cd "$ROOT/build" || die "no build directory"

runs=$OUT/runs.txt
: > "$runs"
run_app() { # run_app <env...> -- <n>
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "\$ ${envs[*]} ./app $1" >> "$runs"
  env "${envs[@]}" timeout 60 ./app "$1" > "$ROOT/run.txt" 2>&1
  local rc=$?
  cat "$ROOT/run.txt" >> "$runs"
  echo "(exit $rc)" >> "$runs"
  return $rc
}

if [ "$STEP" = profile ]; then
  run_app KLARAPTOR_LOG=1 -- 1000000
  check "app before profiling" "$([ $? = 0 ] && echo 1)" "$(grep -E '^app:' "$ROOT/run.txt" | tail -1)"
  grep -E '^klaraptor' "$ROOT/run.txt" | head -5 | sed 's/^/  | /' | tee -a "$summary"
  t=$(now)
  timeout 300 "$klaraptor" profile --db "$ROOT/db" ./app > "$OUT/profile.txt" 2>&1
  rc=$?
  check "klaraptor profile --db db ./app" "$([ $rc = 0 ] && echo 1)" "exit $rc in $(secs "$t" "$(now)") s"
  grep -v '^klaraptor-cc:     ' "$OUT/profile.txt" | tail -15 | sed 's/^/  | /' | tee -a "$summary"
  "$klaraptor" profile --db "$ROOT/db" list > "$OUT/db-list.txt" 2>&1
  n=$(find "$ROOT/db" -name '*.toml' | wc -l)
  check "database entry" "$([ "$n" -ge 1 ] && echo 1)" "$n entr(y/ies): $(find "$ROOT/db" -name '*.toml' -printf '%P ')"
  tar -C "$ROOT" -cf "$OUT/db.tar" db
else
  "$klaraptor" inspect ./app > "$OUT/inspect.txt" 2>&1
  for k in ${KERNELS:-saxpy}; do
    check "the program carries the rational program of $k" "$(grep -q "kernel $k " "$OUT/inspect.txt" && echo 1)" \
      "klaraptor inspect: $(grep -c . "$OUT/inspect.txt") line(s)"
  done
  for n in 100000 1000000 16777216; do
    run_app KLARAPTOR_LOG=1 -- "$n"
    rc=$?
    for k in ${KERNELS:-saxpy}; do
      check "app $n with KLARAPTOR_LOG=1: $k" \
        "$([ $rc = 0 ] && grep -qE "^klaraptor: $k .*source=model" "$ROOT/run.txt" && echo 1)" \
        "exit $rc; $(grep -E "^klaraptor: $k " "$ROOT/run.txt" | head -1)"
    done
    run_app KLARAPTOR_DISABLE=1 -- "$n"
    check "app $n with KLARAPTOR_DISABLE=1" "$([ $? = 0 ] && echo 1)" "$(grep -E '^app:' "$ROOT/run.txt" | tail -1)"
  done
fi
say "RESULT: $([ $fails = 0 ] && echo PASS || echo FAIL) ($fails failure(s))"
[ $fails = 0 ]

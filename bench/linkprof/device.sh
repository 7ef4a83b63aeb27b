#!/usr/bin/env bash
# Profiling inside one `klaraptor-cc` link, on the GPU machine (issue 6): from the repo root,
#
#   OUT=$OUT bench/linkprof/device.sh
#
# with .dev/linkprof/bundle.tar.xz carried (made here by bench/linkprof/bundle.sh). It
#  1. unpacks the bundle (klaraptor-cc, klaraptor, the collector, libLLVM/libz3, and those of
#     the fallback libraries ldd says the system lacks) and fails if ldd still misses any;
#  2. points klaraptor-cc at the device's nvcc (KLARAPTOR_NVCC=/usr/local/cuda/bin/nvcc);
#  3. links samples/matmul from the objects compiled by bundle.sh, with an empty profile
#     database and an empty calibration cache, so the link calibrates the GPU, links the
#     profiling variant, runs the recipe at the profile sizes, fits, generates and links;
#  4. checks: the binary runs and passes its own check, the database holds an entry per
#     kernel, <binary>.klaraptor/ holds the rational programs (C + JSON), a second link with
#     the same database profiles nothing (and is timed), KLARAPTOR_LOG=1 at two sizes;
#  5. writes into $OUT (at most 8 files): summary.txt, link1.stderr.txt, link2.stderr.txt,
#     db-list.txt, runs.txt, results.tar.gz (rational programs, manifests, profile entries,
#     device report, BUILD-INFO), and prints a PASS/FAIL summary.
#
# Without a GPU (no /dev/nvidiactl, or KLARAPTOR_NO_GPU=1) it checks the other path instead:
# the link must warn that it cannot profile and link the program with its own launch dims.
# For a test here: LINKPROF_NVCC=.toolchain/cuda/bin/nvcc (default /usr/local/cuda/bin/nvcc),
# LINKPROF_FORCE_FALLBACK=1 (use every carried fallback library, as if the system had none).
set -euo pipefail

# Must equal BUILD_DIR in bundle.sh: the objects record it, the link runs `./matmul {N}` there.
BUILD_DIR=/tmp/klaraptor-linkprof/matmul
WORK=/tmp/klaraptor-linkprof
ARCH=(-gencode arch=compute_90,code=sm_90)

: "${OUT:?set OUT to the directory the results go to}"
repo=$(pwd)
bundle=${LINKPROF_BUNDLE:-$repo/.dev/linkprof/bundle.tar.xz}
nvcc=${LINKPROF_NVCC:-/usr/local/cuda/bin/nvcc}
case $nvcc in /*) ;; *) nvcc=$repo/$nvcc ;; esac
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
. "$repo/bench/linkprof/checks.sh"

say "== klaraptor link-time profiling check ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
[ -f "$bundle" ] || die "bundle: no $bundle: run bench/linkprof/bundle.sh <target dir> on the build machine and carry .dev/linkprof"
[ -x "$nvcc" ] || die "nvcc: none at $nvcc (set LINKPROF_NVCC)"
cc_bin=${CC:-cc}
command -v "$cc_bin" >/dev/null || die "C compiler: '$cc_bin' is not on PATH; the link compiles the rational programs with \$CC (default cc)"

# --- 1-2. unpack, and point klaraptor-cc at the device's CUDA ---------------------------------
rm -rf "$WORK"
mkdir -p "$WORK" "$BUILD_DIR"
. bench/linkprof/unpack.sh
unpack_bundle "$bundle" "$WORK/bundle" "$nvcc"

# --- 3. the link, with an empty database -----------------------------------------------------
cp "$B"/objs/*.o "$BUILD_DIR/"
export KLARAPTOR_PROFILE_DB=$WORK/db XDG_CACHE_HOME=$WORK/cache
unset KLARAPTOR_FORCE KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_COLLECTOR NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
gpu=0
if { [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; } && [ "${KLARAPTOR_NO_GPU:-0}" = 0 ]; then gpu=1; fi
if [ $gpu = 1 ]; then
  nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary" || true
else
  say "no GPU here: checking that the link warns and links without profiling"
fi
link() { # link <n>: the sample's link command, as its Makefile runs it
  local t rc
  t=$(now)
  set +e
  (cd "$BUILD_DIR" && timeout 400 "$kcc" "${ARCH[@]}" main.o mm.o saxpy.o -o matmul) \
    > "$OUT/link$1.stdout.txt" 2> "$OUT/link$1.stderr.txt"
  rc=$?
  set -e
  cat "$OUT/link$1.stdout.txt" >> "$OUT/link$1.stderr.txt"
  rm -f "$OUT/link$1.stdout.txt"
  eval "link$1_rc=$rc link$1_s=$(secs "$t" "$(now)")"
}
say "\$ (cd $BUILD_DIR && klaraptor-cc ${ARCH[*]} main.o mm.o saxpy.o -o matmul)"
link 1
say "link 1: exit $link1_rc in $link1_s s; stderr ($(wc -l < "$OUT/link1.stderr.txt") lines) in link1.stderr.txt:"
grep -v '^klaraptor-cc:     ' "$OUT/link1.stderr.txt" | head -40 | sed 's/^/  | /' | tee -a "$summary" || true

models=$BUILD_DIR/matmul.klaraptor
db_list() { (cd "$BUILD_DIR" && "$klaraptor" profile list) > "$OUT/db-list.txt" 2>&1 || true; }
if [ $gpu = 0 ]; then
  check "link without a GPU" "$([ "$link1_rc" = 0 ] && [ -x "$BUILD_DIR/matmul" ] && echo 1)" "exit $link1_rc, binary $( [ -x "$BUILD_DIR/matmul" ] && echo present || echo missing)"
  check "warning" "$(grep -q 'build once on a machine with a GPU' "$OUT/link1.stderr.txt" && echo 1)" "the link says how to get a profile"
  check "nothing profiled" "$(grep -q 'klaraptor-cc: profiling ' "$OUT/link1.stderr.txt" || echo 1)" "no recipe ran"
  check "no rational programs" "$([ ! -e "$models" ] && echo 1)" "$models absent"
  db_list
  say "RESULT: $([ $fails = 0 ] && echo PASS || echo FAIL) (no-GPU path; $fails failure(s))"
  [ $fails = 0 ]
  exit
fi

# --- 4. checks --------------------------------------------------------------------------------
check "link 1 exit status" "$([ "$link1_rc" = 0 ] && echo 1)" "exit $link1_rc in $link1_s s"
check "link 1 profiled" "$(grep -c '^klaraptor-cc: profiled ' "$OUT/link1.stderr.txt" | awk '{print ($1 >= 2)}')" \
  "$(grep -c '^klaraptor-cc: profiled ' "$OUT/link1.stderr.txt" || true) kernel(s) profiled (expected mm and saxpy)"
check "progress shown" "$(grep -q 'klaraptor-cc: profiling .* ([0-9]*/[0-9]*)' "$OUT/link1.stderr.txt" && echo 1)" \
  "$(grep -c 'klaraptor-cc: profiling ' "$OUT/link1.stderr.txt" || true) recipe runs announced"
check "binary" "$([ -x "$BUILD_DIR/matmul" ] && echo 1)" "$BUILD_DIR/matmul"

db_list
n_entries=$( (find "$KLARAPTOR_PROFILE_DB" -name '*.toml' 2>/dev/null || true) | wc -l)
n_mm=$( (find "$KLARAPTOR_PROFILE_DB" -name '_Z2mmPKfS0_Pfi-*.toml' 2>/dev/null || true) | wc -l)
n_saxpy=$( (find "$KLARAPTOR_PROFILE_DB" -name '_Z5saxpyfPKfPfi-*.toml' 2>/dev/null || true) | wc -l)
check "profile database" "$([ "$n_mm" -ge 1 ] && [ "$n_saxpy" -ge 1 ] && echo 1)" \
  "$n_entries entr(y/ies) under \$KLARAPTOR_PROFILE_DB, mm: $n_mm, saxpy: $n_saxpy (klaraptor profile list in db-list.txt)"
sed 's/^/  | /' "$OUT/db-list.txt" | head -20 | tee -a "$summary" || true

n_c=$( (find "$models" -maxdepth 1 -name '*.c' 2>/dev/null || true) | wc -l)
n_json=$( (find "$models" -maxdepth 1 -name '*.json' 2>/dev/null || true) | wc -l)
check "rational programs" "$([ "$n_c" -ge 2 ] && [ "$n_json" -ge 2 ] && echo 1)" \
  "$n_c C file(s), $n_json manifest(s) in matmul.klaraptor/: $(ls "$models" 2>/dev/null | tr '\n' ' ')"
(cd "$BUILD_DIR" && "$klaraptor" inspect ./matmul) > "$WORK/inspect.txt" 2>&1 || true

runs=$OUT/runs.txt
: > "$runs"
run_app() { # run_app <label> <env...> -- <n>
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "\$ ${envs[*]} ./matmul $1" >> "$runs"
  set +e
  (cd "$BUILD_DIR" && env "${envs[@]}" timeout 60 ./matmul "$1") > "$WORK/run.txt" 2>&1
  local rc=$?
  set -e
  cat "$WORK/run.txt" >> "$runs"
  echo "(exit $rc)" >> "$runs"
  eval "${label}_rc=$rc"
  eval "${label}_out=\$(grep -E '^n=' \"\$WORK/run.txt\" | tail -1 || true)"
}
run_app plain -- 1000
check "binary runs" "$([ "$plain_rc" = 0 ] && echo "$plain_out" | grep -q ' OK$' && echo 1)" "./matmul 1000: $plain_out (exit $plain_rc)"
for n in 200 1000; do
  run_app "log$n" KLARAPTOR_LOG=1 -- "$n"
done
n_model=$(grep -cE '^klaraptor: .* source=model' "$runs" || true)
check "choice logged" "$([ "$log200_rc" = 0 ] && [ "$log1000_rc" = 0 ] \
  && grep -qE '^klaraptor: mm .*source=model' "$runs" && grep -qE '^klaraptor: saxpy .*source=model' "$runs" && echo 1)" \
  "KLARAPTOR_LOG=1 at n=200 and n=1000: $n_model decision(s) from the rational programs (runs.txt)"
grep -E '^klaraptor: ' "$runs" | head -12 | sed 's/^/  | /' | tee -a "$summary" || true

# The same link again: the database holds every kernel's entry, nothing is profiled.
rm -f "$OUT/link2.stderr.txt"
link 2
check "link 2 exit status" "$([ "$link2_rc" = 0 ] && echo 1)" "exit $link2_rc in $link2_s s (link 1: $link1_s s)"
check "link 2 profiles nothing" "$(grep -q 'klaraptor-cc: profiling \|calibrating' "$OUT/link2.stderr.txt" || echo 1)" \
  "$(wc -l < "$OUT/link2.stderr.txt") stderr line(s)"
check "link 2 is fast" "$(awk "BEGIN{print ($link2_s < 30 && $link2_s < $link1_s)}")" "$link2_s s"
run_app again -- 500
check "binary of link 2 runs" "$([ "$again_rc" = 0 ] && echo 1)" "./matmul 500: $again_out"

# --- 5. results ---------------------------------------------------------------------------------
pack=$WORK/pack
mkdir -p "$pack/models" "$pack/db" "$pack/device"
cp "$models"/*.c "$models"/*.json "$models"/*.h "$pack/models/" 2>/dev/null || true
cp -r "$KLARAPTOR_PROFILE_DB"/. "$pack/db/" 2>/dev/null || true
cp -r "$XDG_CACHE_HOME"/klaraptor/devices/. "$pack/device/" 2>/dev/null || true
cp "$B/BUILD-INFO" "$B/version.txt" "$WORK/inspect.txt" "$pack/"
tar -C "$pack" -czf "$OUT/results.tar.gz" .
say "results.tar.gz: $(stat -c %s "$OUT/results.tar.gz") bytes (rational programs, manifests, profile entries, device report, klaraptor inspect)"
say "RESULT: $([ $fails = 0 ] && echo PASS || echo FAIL) ($fails failure(s)); link 1 $link1_s s (profiling), link 2 $link2_s s"
[ $fails = 0 ]

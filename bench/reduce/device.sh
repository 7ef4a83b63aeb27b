#!/usr/bin/env bash
# Every annotated kernel builds, on the GPU machine (issue 23): from the repo root,
#
#   OUT=$OUT bench/reduce/device.sh
#
# with .dev/reduce/bundle.tar.xz carried (made here by bench/reduce/bundle.sh). It
#  1. unpacks the bundle (bench/linkprof/unpack.sh: klaraptor-cc, klaraptor, the collector,
#     the libraries the system lacks) and points klaraptor-cc at the device's nvcc;
#  2. recreates the build directories the objects record (WORK/<program>) and links each
#     program (samples/reduce, samples/idioms/template_scale) with klaraptor-cc against an
#     EMPTY profile database and calibration cache: the link calibrates the GPU, profiles
#     every kernel with its recipe (reduce_static's shapes of 512 and 1024 threads fault on
#     purpose: the link restarts the recipe past them), fits and links. Timed, with
#     --kl-keep so that each recipe run's records stay;
#  3. `klaraptor inspect` of each binary;
#  4. runs each program with klaraptor (KLARAPTOR_LOG=1) and with KLARAPTOR_DISABLE=1 at two
#     sizes and diffs their stdout (the programs print no shape-dependent text);
#  5. `klaraptor validate` of each program at 2-3 sizes (an exhaustive sweep of the shapes,
#     time only; reduce_static's sweep stops at its first faulting shape);
#  6. copies the profile database, `klaraptor profile list/show`, and the records of the
#     reduce link's recipe runs (reduce_static's faults as the runtime and the collector
#     recorded them: stopped.tsv, samples) to $OUT, for fixtures.
# Every step is bounded (timeout, and a budget for the whole script: REDUCE_BUDGET seconds,
# default 300); a failed step is reported and the script goes on. The summary is in
# $OUT/summary.txt; the exit status is 0 when every check passed.
#
# For a dry run without a GPU: LINKPROF_NVCC=.toolchain/cuda/bin/nvcc (default
# /usr/local/cuda/bin/nvcc); the links then keep the programs' own launches and the steps
# that need a GPU fail.
set -uo pipefail

# Must equal WORK in bundle.sh: the objects record WORK/<program>.
WORK=/tmp/klaraptor-reduce
ARCH=(-gencode arch=compute_90,code=sm_90)
BUDGET=${REDUCE_BUDGET:-300}

: "${OUT:?set OUT to the directory the results go to}"
repo=$(pwd)
bundle=${REDUCE_BUNDLE:-$repo/.dev/reduce/bundle.tar.xz}
nvcc=${LINKPROF_NVCC:-/usr/local/cuda/bin/nvcc}
case $nvcc in /*) ;; *) nvcc=$repo/$nvcc ;; esac
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
. "$repo/bench/linkprof/checks.sh"
# The seconds a step may take: its own bound, within what is left of the budget.
bound() {
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# timed <dir> <seconds> <log> <command...>: runs it in <dir> with its output in <log>; sets
# rc (124: stopped by the timeout, 125: not run, the budget is spent) and took (seconds).
timed() {
  local dir=$1 t=$2 log=$3 t0
  shift 3
  if [ "$t" -lt 5 ]; then
    echo "not run: the script's budget of $BUDGET s is spent" > "$log"
    rc=125 took=0
    return
  fi
  t0=$(now)
  (cd "$dir" && exec timeout -k 5 "$t" "$@") > "$log" 2>&1
  rc=$?
  took=$(secs "$t0" "$(now)")
  [ "$rc" = 124 ] && echo "(stopped by timeout after $t s)" >> "$log"
  return 0
}

say "== klaraptor: every annotated kernel builds ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
[ -f "$bundle" ] || die "bundle: no $bundle: run bench/reduce/bundle.sh <target dir> on the build machine and carry .dev/reduce"
[ -x "$nvcc" ] || die "nvcc: none at $nvcc (set LINKPROF_NVCC)"
command -v "${CC:-cc}" >/dev/null || die "C compiler: '${CC:-cc}' is not on PATH; the link compiles the rational programs with \$CC (default cc)"

# --- 1. unpack ---------------------------------------------------------------------------------
rm -rf "$WORK"
mkdir -p "$WORK"
. bench/linkprof/unpack.sh
unpack_bundle "$bundle" "$WORK/bundle" "$nvcc"
programs=()
for d in "$WORK"/bundle/objs/*/; do programs+=("$(basename "$d")"); done
say "programs: ${programs[*]}"
gpu_line=$(nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>/dev/null | head -1)
say "gpu: ${gpu_line:-none (nvidia-smi says nothing)}"

export KLARAPTOR_PROFILE_DB=$WORK/db XDG_CACHE_HOME=$WORK/cache
unset KLARAPTOR_FORCE KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_COLLECTOR KLARAPTOR_CHOICES \
  KLARAPTOR_REFINE NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
mkdir -p "$KLARAPTOR_PROFILE_DB" "$OUT/runs" "$OUT/validate"

# --- 2. the links, from an empty database --------------------------------------------------------
declare -A kept
for p in "${programs[@]}"; do
  b=$WORK/$p
  mkdir -p "$b"
  cp "$WORK/bundle/objs/$p"/* "$b/"
  say "\$ (cd $b && klaraptor-cc ${ARCH[*]} --kl-keep $p.o -o $p)"
  case $p in reduce) lim=150 ;; *) lim=90 ;; esac
  log=$OUT/$p.link.txt
  timed "$b" "$(bound $lim)" "$log" "$kcc" "${ARCH[@]}" --kl-keep "$p.o" -o "$p"
  kept[$p]=$(sed -n 's/^klaraptor-cc: kept intermediate files in //p' "$log" | tail -1)
  n_prof=$(grep -c '^klaraptor-cc: profiled ' "$log")
  n_restart=$(grep -c 'in a new process (restart' "$log")
  ok=0; [ "$rc" = 0 ] && [ -x "$b/$p" ] && [ "$n_prof" -ge 1 ] && ok=1
  check "link $p" "$ok" "exit $rc in $took s (profiling from an empty database), $n_prof kernel(s) profiled, $n_restart restart(s) after a fault; log in $p.link.txt"
  echo "$p link_s=$took rc=$rc" >> "$OUT/times.txt"
  grep -E '^klaraptor-cc: (profiled|warning|error|identifying)|in a new process' "$log" \
    | cut -c1-230 | head -24 | sed 's/^/  | /' | tee -a "$summary"
done
case " ${programs[*]} " in
  *" reduce "*)
    check "reduce: every kernel profiled" "$(grep -cE '^klaraptor-cc: profiled reduce_(detect|clause|static) ' "$OUT/reduce.link.txt" | awk '{print ($1 == 3)}')" \
      "reduce_detect, reduce_clause, reduce_static have entries"
    check "reduce_static: faults survived" "$(grep -q 'in a new process (restart' "$OUT/reduce.link.txt" && echo 1)" \
      "the link restarted the recipe after a fault" ;;
esac

# --- 3. inspect ------------------------------------------------------------------------------------
for p in "${programs[@]}"; do
  timed "$WORK/$p" "$(bound 20)" "$OUT/$p.inspect.txt" "$klaraptor" inspect "./$p"
  n_c=$( (find "$WORK/$p/$p.klaraptor" -maxdepth 1 -name '*.c' 2>/dev/null || true) | wc -l)
  check "inspect $p" "$([ "$rc" = 0 ] && echo 1)" "exit $rc; $n_c rational program(s) in $p.klaraptor/ ($p.inspect.txt)"
done
if [ -f "$OUT/reduce.inspect.txt" ]; then
  check "reduce_static: faulted shapes never chosen" "$(grep -q 'faulted in the profile, never chosen' "$OUT/reduce.inspect.txt" && echo 1)" \
    "$(grep -m1 'faulted in the profile' "$OUT/reduce.inspect.txt" | sed 's/^ *//' | cut -c1-160)"
fi

# --- 4. with and without klaraptor -------------------------------------------------------------------
run_args() { # the argument lists program $1 is run with ("" = its defaults)
  case $1 in
    reduce) printf '%s\n' "" "1000003" ;;
    template_scale) printf '%s\n' "" "100003 70001" ;;
  esac
}
for p in "${programs[@]}"; do
  while IFS= read -r args; do
    tag=${args:-default}; tag=${tag// /x}
    base=$OUT/runs/$p.$tag
    # shellcheck disable=SC2086  # the arguments are words
    timed "$WORK/$p" "$(bound 60)" "$base.klaraptor.txt" env KLARAPTOR_LOG=1 "./$p" $args
    rc_k=$rc took_k=$took
    # shellcheck disable=SC2086
    timed "$WORK/$p" "$(bound 60)" "$base.disabled.txt" env KLARAPTOR_DISABLE=1 "./$p" $args
    rc_d=$rc
    # stdout only (klaraptor's log lines go to stderr and are kept in the .txt files)
    grep -v '^klaraptor' "$base.klaraptor.txt" > "$base.klaraptor.out" || true
    grep -v '^klaraptor' "$base.disabled.txt" > "$base.disabled.out" || true
    if diff "$base.disabled.out" "$base.klaraptor.out" > "$base.diff"; then same=1; else same=0; fi
    rm -f "$base.klaraptor.out" "$base.disabled.out"
    [ -s "$base.diff" ] || rm -f "$base.diff"
    passed=0
    [ "$rc_k" = 0 ] && [ "$rc_d" = 0 ] && grep -q '^PASS' "$base.klaraptor.txt" && grep -q '^PASS' "$base.disabled.txt" && passed=1
    check "run $p ${args:-(defaults)}" "$([ $passed = 1 ] && [ $same = 1 ] && echo 1)" \
      "klaraptor exit $rc_k ($took_k s), disabled exit $rc_d, outputs $([ $same = 1 ] && echo identical || echo "differ ($p.$tag.diff)")"
    grep -E '^klaraptor: ' "$base.klaraptor.txt" | cut -c1-200 | head -4 | sed 's/^/  | /' | tee -a "$summary"
    grep -E 'checksum' "$base.klaraptor.txt" | head -1 | sed 's/^/  | /' | tee -a "$summary"
  done < <(run_args "$p")
done

# --- 5. validate ------------------------------------------------------------------------------------
validate_sizes() { # the --sizes of program $1
  case $1 in
    reduce) printf '%s\n' "1048576" "4194304" "16777216" ;;
    template_scale) printf '%s\n' "1048576 1048576" "4194304 3145728" ;;
  esac
}
for p in "${programs[@]}"; do
  vargs=()
  while IFS= read -r s; do vargs+=(--sizes "$s"); done < <(validate_sizes "$p")
  timed "$WORK/$p" "$(bound 100)" "$OUT/validate/$p.txt" "$klaraptor" validate "./$p" "${vargs[@]}" \
    --timeout 60 --out "$WORK/validate/$p" --json "$OUT/validate/$p.json"
  echo "$p validate_s=$took rc=$rc" >> "$OUT/times.txt"
  check "validate $p" "$([ "$rc" = 0 ] && echo 1)" "exit $rc in $took s (validate/$p.txt, validate/$p.json)"
  grep -vE '^klaraptor validate:' "$OUT/validate/$p.txt" | head -30 | cut -c1-200 | sed 's/^/  | /' | tee -a "$summary"
  [ -d "$WORK/validate/$p" ] && tar -C "$WORK/validate" -czf "$OUT/validate/$p.sweeps.tar.gz" "$p"
done

# --- 6. the profile database and the records -----------------------------------------------------------
"$klaraptor" profile list > "$OUT/db-list.txt" 2>&1
for k in reduce_detect reduce_clause reduce_static stencil1d; do
  "$klaraptor" profile show "$k" > "$OUT/profile-show-$k.txt" 2>&1 || true
done
tar -C "$KLARAPTOR_PROFILE_DB" -czf "$OUT/profile-db.tar.gz" .
n_entries=$(find "$KLARAPTOR_PROFILE_DB" -name '*.toml' | wc -l)
check "profile database" "$([ "$n_entries" -ge 5 ] && echo 1)" "$n_entries entr(y/ies) (profile-db.tar.gz, db-list.txt; expected 5: three reduce kernels, two stencil1d instances)"
cp -r "$XDG_CACHE_HOME/klaraptor/devices" "$WORK/devices-report" 2>/dev/null && \
  tar -C "$WORK" -czf "$OUT/device-report.tar.gz" devices-report
if [ -n "${kept[reduce]:-}" ] && [ -d "${kept[reduce]}/profile" ]; then
  tar -C "${kept[reduce]}/profile" --exclude=profiling-variant -czf "$OUT/reduce-profile-runs.tar.gz" .
  n_stopped=$(find "${kept[reduce]}/profile" -name stopped.tsv | wc -l)
  check "reduce: the recipe runs' records" "$([ "$n_stopped" -ge 1 ] && echo 1)" \
    "$(find "${kept[reduce]}/profile" -maxdepth 1 -name 'run-*' | wc -l) run(s), $n_stopped stopped at a fault (reduce-profile-runs.tar.gz)"
  find "${kept[reduce]}/profile" -name stopped.tsv -exec cat {} + | cut -c1-200 | head -8 | sed 's/^/  | /' | tee -a "$summary"
else
  check "reduce: the recipe runs' records" 0 "the link kept no profile runs (it did not profile)"
fi
for p in "${programs[@]}"; do
  [ -n "${kept[$p]:-}" ] && [ "$p" != reduce ] && [ -d "${kept[$p]}/profile" ] && \
    tar -C "${kept[$p]}/profile" --exclude=profiling-variant -czf "$OUT/$p-profile-runs.tar.gz" .
  mkdir -p "$WORK/models/$p"
  cp "$WORK/$p/$p.klaraptor/"*.c "$WORK/$p/$p.klaraptor/"*.json "$WORK/models/$p/" 2>/dev/null
done
tar -C "$WORK/models" -czf "$OUT/models.tar.gz" .
cp "$WORK/bundle/BUILD-INFO" "$OUT/BUILD-INFO"

say "RESULT: $([ $fails = 0 ] && echo PASS || echo FAIL) ($fails failure(s)) in $SECONDS s; times in times.txt"
[ $fails = 0 ]

#!/usr/bin/env bash
# The build-machine side of the accuracy study (no GPU needed). Run from the repository root.
#
#   bench/accuracy/prepare.sh build          # 1. binaries, plans and the job list
#   bench/accuracy/prepare.sh import <OUT>   # 3. profile records of device.sh PHASE=profile -> database
#   bench/accuracy/prepare.sh models         # 4. relink each program with its rational programs
#
# build: compiles each sample of the suite (SUITE, default polybench) with klaraptor-cc
#   (-O3 -std=c++17 -arch=sm_90, as samples/<suite>/common/program.mk does) and links, in
#   one klaraptor-cc link, its instrumented build and its profiling variant
#   (--kl-profiling-variant). Stripped copies go
#   to $STUDY/<program>/: <program> (the variant, under the name its recipes run) and
#   <program>.klaraptor (the instrumented build); then `accuracy-report jobs` writes the
#   plans, kernels.tsv, recipes.txt and $STUDY/jobs.txt from bench/accuracy/sizes.toml
#   (sizes-idioms.toml with SUITE=idioms).
#   Objects and unstripped binaries stay in $BUILD/<program>/.
# import: `klaraptor import` of $OUT/profile/<program>/run*/ into $STUDY_DB.
# models: relinks each program twice from the same objects, timing both: once against an
#   empty profile database (the plain link) and once against $STUDY_DB with
#   --kl-require-model (the model link: fit, code generation, compile of the rational
#   programs). The model build replaces $STUDY/<program>/<program>.klaraptor; its manifests
#   go to $STUDY/<program>/models/, the two times to $STUDY/<program>/build-times.tsv, and
#   the klaraptor-cc and commit that made them to $STUDY/BUILD-INFO (lines "models: ...").
#
# Environment: SUITE (polybench, the default, or idioms: which samples/<suite>/ is studied,
#   with bench/accuracy/sizes.toml resp. sizes-idioms.toml), CARGO_TARGET_DIR (where
#   klaraptor-cc, klaraptor and accuracy-report are built; default target/), KCC and
#   KLARAPTOR (override the tools), STUDY (default .dev/study; .dev/study-idioms with
#   SUITE=idioms), BUILD (default .dev/study-build; .dev/study-idioms-build), STUDY_DB
#   (default .dev/study-db; .dev/study-idioms-db), PROGRAMS (a subset, space-separated;
#   default every program of samples/<suite>/Makefile).
set -u
cmd=${1:-}
SUITE=${SUITE:-polybench}
case $SUITE in
  polybench) suite_sizes=bench/accuracy/sizes.toml; suite_tag= ;;
  idioms) suite_sizes=bench/accuracy/sizes-idioms.toml; suite_tag=-idioms ;;
  *) echo "prepare.sh: SUITE must be polybench or idioms, not '$SUITE'" >&2; exit 2 ;;
esac
[ -f samples/$SUITE/Makefile ] && [ -f $suite_sizes ] ||
  { echo "prepare.sh: run from the repository root" >&2; exit 2; }
root=$(pwd)
tdir=${CARGO_TARGET_DIR:-$root/target}
KCC=${KCC:-$tdir/release/klaraptor-cc}
KLARAPTOR=${KLARAPTOR:-$tdir/release/klaraptor}
STUDY=${STUDY:-$root/.dev/study$suite_tag}
BUILD=${BUILD:-$root/.dev/study$suite_tag-build}
STUDY_DB=${STUDY_DB:-$root/.dev/study$suite_tag-db}
case $STUDY in /*) ;; *) STUDY=$root/$STUDY ;; esac
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
case $STUDY_DB in /*) ;; *) STUDY_DB=$root/$STUDY_DB ;; esac
progs=${PROGRAMS:-$(sed -n 's/^PROGRAMS := //p' samples/$SUITE/Makefile)}
common=$root/samples/polybench/common
# The include directories of samples/<suite>/common/program.mk (the idioms use the
# PolyBench harness and their own header).
includes=(-I"$common")
[ "$SUITE" = idioms ] && includes+=(-I"$root/samples/idioms/common")

need_tools() {
  for t in "$KCC" "$KLARAPTOR"; do
    [ -x "$t" ] || { echo "prepare.sh: no $t: run 'cargo build --release' (with CARGO_TARGET_DIR=$tdir) first, or set KCC/KLARAPTOR" >&2; exit 2; }
  done
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

build() {
  need_tools
  mkdir -p "$STUDY" "$BUILD" "$STUDY_DB"
  # The instrumented build of this step is the plain one (models come with `models`): link
  # it against an empty database even when $STUDY_DB already holds profiles.
  local fail=0 empty
  empty=$(mktemp -d)
  for p in $progs; do
    local src="$root/samples/$SUITE/$p/$p.cu" b="$BUILD/$p" d="$STUDY/$p"
    [ -f "$src" ] || { echo "prepare.sh: no $src" >&2; fail=1; continue; }
    mkdir -p "$b" "$d"
    local log="$b/build.log"
    : > "$log"
    local t0; t0=$(now)
    # The recipes run ./<program> in the program's directory: the variant takes that name.
    if ! (cd "$b" &&
          KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$empty" \
            "$KCC" -O3 -std=c++17 -arch=sm_90 "${includes[@]}" -c "$src" -o "$p.o" &&
          KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$empty" \
            "$KCC" -arch=sm_90 "$p.o" -o "$p.klaraptor" --kl-profiling-variant="$p") >> "$log" 2>&1; then
      echo "FAIL $p (see $log):"; tail -15 "$log"; fail=1; continue
    fi
    strip -o "$d/$p" "$b/$p" && strip -o "$d/$p.klaraptor" "$b/$p.klaraptor" || { fail=1; continue; }
    rm -rf "$d/models" "$d/build-times.tsv"
    echo "built $p in $(elapsed "$t0") s"
  done
  rm -rf "$empty"
  [ $fail -eq 0 ] || { echo "prepare.sh: some programs failed to build" >&2; exit 1; }
  { "$KCC" --version 2>/dev/null | head -1; git -C "$root" log -1 --format='commit %H (%cd)'; } > "$STUDY/BUILD-INFO"
  jobs
  echo "study directory: $STUDY ($(du -sh "$STUDY" | cut -f1); the carry limit is 64 MiB for all of .dev)"
}

jobs() {
  (cd "$root" && cargo build -q -p klaraptor-accuracy) || { echo "prepare.sh: building accuracy-report failed" >&2; exit 1; }
  local args=()
  [ -n "${PROGRAMS:-}" ] && for p in $PROGRAMS; do args+=(--program "$p"); done
  "$tdir/debug/accuracy-report" jobs --study "$STUDY" --sizes "$root/$suite_sizes" "${args[@]}" || exit 1
}

import() {
  need_tools
  local out=${1:-}
  [ -n "$out" ] && [ -d "$out/profile" ] || { echo "prepare.sh import: give device.sh's \$OUT of PHASE=profile (a directory with profile/)" >&2; exit 2; }
  case $out in /*) ;; *) out=$root/$out ;; esac
  mkdir -p "$STUDY_DB"
  local fail=0
  for p in $progs; do
    local runs=("$out/profile/$p"/run*)
    [ -d "${runs[0]}" ] || { echo "prepare.sh import: no $out/profile/$p/run*: not profiled" >&2; fail=1; continue; }
    "$KLARAPTOR" import --binary "$BUILD/$p/$p" --db "$STUDY_DB" "${runs[@]}" || fail=1
  done
  [ $fail -eq 0 ] || { echo "prepare.sh import: some programs were not imported" >&2; exit 1; }
}

models() {
  need_tools
  local fail=0 empty
  empty=$(mktemp -d)
  for p in $progs; do
    local b="$BUILD/$p" d="$STUDY/$p"
    [ -f "$b/$p.o" ] || { echo "prepare.sh models: no $b/$p.o: run prepare.sh build first" >&2; fail=1; continue; }
    local log="$b/models.log" t0 plain model
    t0=$(now)
    (cd "$b" && KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$empty" "$KCC" -arch=sm_90 "$p.o" -o "$p.plain") > "$log" 2>&1 ||
      { echo "FAIL $p plain link (see $log)"; fail=1; continue; }
    plain=$(elapsed "$t0")
    t0=$(now)
    if ! (cd "$b" && KLARAPTOR_NO_GPU=1 KLARAPTOR_PROFILE_DB="$STUDY_DB" \
            "$KCC" -arch=sm_90 "$p.o" -o "$p.klaraptor" --kl-require-model) >> "$log" 2>&1; then
      echo "FAIL $p model link (see $log):"; tail -5 "$log"; fail=1; continue
    fi
    model=$(elapsed "$t0")
    rm -f "$b/$p.plain"
    rm -rf "$b/$p.plain.klaraptor" "$d/models"
    cp -r "$b/$p.klaraptor.klaraptor" "$d/models"
    strip -o "$d/$p.klaraptor" "$b/$p.klaraptor" || { fail=1; continue; }
    printf 'plain_link_s\t%s\nmodel_link_s\t%s\n' "$plain" "$model" > "$d/build-times.tsv"
    echo "$p: $(ls "$d/models"/*.json | wc -l) rational programs; link ${plain} s plain, ${model} s with models"
  done
  rm -rf "$empty"
  [ $fail -eq 0 ] || { echo "prepare.sh models: some programs have no model build" >&2; exit 1; }
  # The rational programs are this klaraptor-cc's: the report names it beside the build's.
  if [ -f "$STUDY/BUILD-INFO" ]; then
    sed -i '/^models: /d' "$STUDY/BUILD-INFO"
    { printf 'models: '; "$KCC" --version 2>/dev/null | head -1; printf 'models: '; git -C "$root" log -1 --format='commit %H (%cd)'; } >> "$STUDY/BUILD-INFO"
  fi
}

case $cmd in
  build) build ;;
  jobs) jobs ;;
  import) shift; import "$@" ;;
  models) models ;;
  *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

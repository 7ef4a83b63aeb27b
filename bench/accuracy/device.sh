#!/usr/bin/env bash
# The GPU-machine side of the accuracy study. Run from the repository root, one phase a call:
#
#   PHASE=profile    bench/accuracy/device.sh   # recipe runs, full collector, default plans
#   PHASE=exhaustive bench/accuracy/device.sh   # every candidate shape at every study size
#   PHASE=choice     bench/accuracy/device.sh   # klaraptor's choice and where the runtime
#                                               # settled (--time $MODEL_REPS, 30), the default (--time 5)
#
# Needs what bench/accuracy/prepare.sh made on the build machine, carried: .dev/study/ (the
# binaries, plans and jobs.txt) and .dev/collector/libklaraptor_collector.so. Nothing is
# built here. Writes under $OUT/$PHASE/:
#   env.txt      nvidia-smi name,uuid,compute_cap,driver_version; nvcc --version; date -u
#                (the format `klaraptor import` reads; profile/<program>/env.txt is a copy)
#   summary-<UTC date-time>.tsv   per job: id, exit status, wall s, kernel time s, estimated s
#   profile:     <program>/run<i>/records/ (the collector's records), stdout.txt, stderr.txt
#   exhaustive:  <program>/x<k>/records/, stdout.txt (the variant's KL_TIME/KL_OCC), stderr.txt
#   choice:      <program>/x<k>/model.log (KLARAPTOR_LOG of every run: the decision and
#                refine lines), model.out, model.err (the last run's), model.runs, choices/:
#                runs with --time $MODEL_REPS (30) sharing a fresh choices cache until none
#                ends with a key unsettled, at most $MODEL_RUNS (10); default.out,
#                default.err (KLARAPTOR_DISABLE=1 --time 5); with WHOLE_RUN=1 (the default)
#                wholerun/<stem>.{times.jsonl,log,out,err,status}: the whole-run measurement,
#                the job's command (--time 5) again with every launch of an annotated kernel
#                timed (KLARAPTOR_LAUNCH_TIMES): default (KLARAPTOR_DISABLE=1), model
#                (KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off: the model's first choice), f<j>
#                (also KLARAPTOR_FORCE: the shapes settled on in model.log that are neither the
#                model's choice nor the program's own at that key, one per kernel a run;
#                f<j>.force lists them); with WHOLE_RUN_REPEATS=n each of those n times,
#                round-robin, the repeats' stems <stem>.r2 … <stem>.r<n>; with
#                WHOLE_RUN_ISOLATE=1 (the default) isolated/: the same per kernel, only that
#                kernel's shape changed (see below): plan.tsv, ref.{times.jsonl,log,out,err,
#                status,force} (every kernel at its settled shape), iso-<kernel>-own and
#                iso-<kernel>-model (that kernel at the program's own shape, at the model's
#                first choice), repeats .r2 … .r<n> in the same rounds
# and prints one line per job (wall and kernel time against the estimate) and the totals.
#
# Environment: PHASE (required); OUT (default /tmp/accuracy-out); STUDY (default .dev/study;
#   .dev/study-idioms with SUITE=idioms, the suite prepare.sh built with SUITE=idioms);
#   COLLECTOR (default .dev/collector/libklaraptor_collector.so); DEADLINE_S (default 420: a
#   job whose estimate would end past it is skipped, and said so); LIMIT_FACTOR (default 4)
#   and LIMIT_MIN_S / LIMIT_MAX_S (default 60 / 120): each job's timeout is its estimate
#   times the factor, within those bounds; JOBS (an extended regex on job ids, e.g.
#   '^(gemm|atax)/'); NVCC (default /usr/local/cuda/bin/nvcc, only for its --version);
#   choice phase: MODEL_REPS (30), MODEL_RUNS (10), REFINE_BUDGET (off: see below),
#   WHOLE_RUN (1; 0: no whole-run measurement), WHOLE_RUN_EST_FACTOR (1.6: with WHOLE_RUN the
#   deadline check counts a job's estimate times this; a whole run that would start past
#   DEADLINE_S is skipped, and said in wholerun/skipped), WHOLE_RUN_REPEATS (1),
#   WHOLE_RUN_ISOLATE (1; 0: no isolated whole runs), WHOLE_RUN_ISOLATE_EST_FACTOR (1.5: the
#   deadline check multiplies the estimate of a job of a program with two or more kernels by
#   this as well).
set -u
# The isolation plan of a choice job's model.log (WHOLE_RUN_ISOLATE, below): lines
#   P\t<kernel>\t<stem or ->\t<keys>\t<own>\t<model>\t<settled>\t<status>\t<note>  (plan.tsv)
#   R\t<KLARAPTOR_FORCE of the reference run>
#   I\t<stem>\t<method>\t<KLARAPTOR_FORCE of that run>
# (own, model, settled: one shape, or the keys' shapes joined by commas, or -).
isolate_plan() {
  awk '
    function kname(h,   k) { k = h; while (sub(/ [A-Za-z_][A-Za-z0-9_]*=-?[0-9]+$/, "", k)) {} return k }
    function one(list,   n, a) { n = split(list, a, ","); return n == 1 ? a[1] : "" }
    function addto(list, v) { return index("," list ",", "," v ",") ? list : (list == "" ? v : list "," v) }
    function join(a, b) { return a == "" ? b : (b == "" ? a : a "," b) }
    /^klaraptor: / {
      line = substr($0, 12)
      r = index(line, " refine: ")
      if (r) {
        head = substr(line, 1, r - 1); tail = substr(line, r + 9)
        if (tail ~ /^(settled on |kept )block=[0-9]+x[0-9]+x[0-9]+/ &&
            match(tail, /block=[0-9]+x[0-9]+x[0-9]+/)) {
          settled[head] = substr(tail, RSTART + 6, RLENGTH - 6); key[head] = 1
        }
      } else if (index(line, " source=model") && (b = index(line, " block="))) {
        head = substr(line, 1, b - 1)
        split(substr(line, b + 7), a, " "); model[head] = a[1]; key[head] = 1
        if (match(line, /program_block=[0-9]+x[0-9]+x[0-9]+/))
          own[head] = substr(line, RSTART + 14, RLENGTH - 14)
      }
    }
    END {
      nk = 0
      for (h in key) {
        k = kname(h)
        if (!(k in nkeys)) { order[++nk] = k; nkeys[k] = 0 }
        nkeys[k]++
        s = ""
        if (h in own) { owns[k] = addto(owns[k], own[h]); s = addto(s, own[h]) }
        if (h in model) { models[k] = addto(models[k], model[h]); s = addto(s, model[h]) }
        if (h in settled) { setl[k] = addto(setl[k], settled[h]); s = addto(s, settled[h]) }
        if (index(s, ",")) changing[k] = 1
      }
      for (i = 2; i <= nk; i++) {
        v = order[i]
        for (j = i - 1; j >= 1 && order[j] > v; j--) order[j + 1] = order[j]
        order[j + 1] = v
      }
      nch = 0; ref = ""
      for (i = 1; i <= nk; i++) {
        k = order[i]; rs[k] = one(setl[k])
        if (k in changing) nch++
        if (rs[k] != "") ref = join(ref, k ":" rs[k])
      }
      printf "R\t%s\n", ref
      for (i = 1; i <= nk; i++) {
        k = order[i]; stem = "-"; note = ""
        if (!(k in changing)) {
          st = "same"; note = "its own shape, the model'"'"'s first choice and the settled shape are one"
        } else if (setl[k] == "") {
          st = "unsettled"; note = "no key of it settled"
        } else if (rs[k] == "") {
          st = "mixed"; note = "its keys settled on different shapes (" setl[k] "): KLARAPTOR_FORCE is per kernel"
        } else if (nch < 2) {
          st = "alone"; note = "the only kernel whose shape differs between the methods: the all-at-once whole runs vary it alone"
        } else {
          st = "isolated"
          safe = k; gsub(/[^A-Za-z0-9_]/, "_", safe)
          stem = "iso-" safe
          for (n = 2; stem in used; n++) stem = "iso-" safe "_" n
          used[stem] = 1
          others = ""
          for (j = 1; j <= nk; j++)
            if (order[j] != k && rs[order[j]] != "") others = join(others, order[j] ":" rs[order[j]])
          needm = 0; nm = split(models[k], ma, ",")
          for (j = 1; j <= nm; j++) if (ma[j] != rs[k]) needm = 1
          if (needm) printf "I\t%s-model\tmodel\t%s\n", stem, others
          o1 = one(owns[k])
          if (owns[k] == "") note = "no program_block logged: its own shape not run"
          else if (o1 == "") note = "its keys'"'"' own shapes differ (" owns[k] "): its own shape not run"
          else if (o1 != rs[k] && !(needm && models[k] == o1))
            printf "I\t%s-own\town\t%s\n", stem, join(others, k ":" o1)
        }
        printf "P\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", k, stem, nkeys[k],
          (owns[k] == "" ? "-" : owns[k]), (models[k] == "" ? "-" : models[k]),
          (setl[k] == "" ? "-" : setl[k]), st, note
      }
    }' "$1"
}
# A KLARAPTOR_FORCE value as a .force file: "<kernel> <block>" a line.
force_file() { printf '%s\n' "$1" | tr ',' '\n' | sed -n 's/^\(.*\):\([^:]*\)$/\1 \2/p'; }
# `device.sh --isolate-plan <model.log>` prints it and exits: to check a plan without a GPU
# (bench/accuracy/tests/isolated.rs).
if [ "${1:-}" = --isolate-plan ]; then
  [ -f "${2:-}" ] || { echo "device.sh: --isolate-plan <model.log>" >&2; exit 2; }
  isolate_plan "$2"
  exit
fi
PHASE=${PHASE:-}
case $PHASE in profile|exhaustive|choice) ;; *)
  echo "device.sh: set PHASE=profile, exhaustive or choice" >&2; exit 2 ;;
esac
[ -d bench/accuracy ] || { echo "device.sh: run from the repository root" >&2; exit 2; }
root=$(pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
OUT=$(abs "${OUT:-/tmp/accuracy-out}")
case ${SUITE:-polybench} in
  polybench) default_study=.dev/study ;;
  idioms) default_study=.dev/study-idioms ;;
  *) echo "device.sh: SUITE must be polybench or idioms, not '$SUITE'" >&2; exit 2 ;;
esac
STUDY=$(abs "${STUDY:-$default_study}")
COLLECTOR=$(abs "${COLLECTOR:-.dev/collector/libklaraptor_collector.so}")
DEADLINE_S=${DEADLINE_S:-420}
LIMIT_FACTOR=${LIMIT_FACTOR:-4}
LIMIT_MIN_S=${LIMIT_MIN_S:-60}
LIMIT_MAX_S=${LIMIT_MAX_S:-120}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
jobs_txt=$STUDY/jobs.txt
[ -f "$jobs_txt" ] || { echo "device.sh: no $jobs_txt: run bench/accuracy/prepare.sh build on the build machine and carry .dev/study" >&2; exit 2; }
if [ "$PHASE" != choice ]; then
  [ -f "$COLLECTOR" ] || { echo "device.sh: no collector at $COLLECTOR (carry .dev/collector)" >&2; exit 2; }
fi
if [ "$PHASE" = exhaustive ] && ! grep -a -q KLARAPTOR_COLLECT_TIME_ONLY "$COLLECTOR"; then
  echo "device.sh: $COLLECTOR has no time-only mode (KLARAPTOR_COLLECT_TIME_ONLY): the sweep would run every profiler pass at the study sizes; rebuild .dev/collector first" >&2
  exit 2
fi
ph=$OUT/$PHASE
mkdir -p "$ph"
# One summary per call, so the outputs of several calls (JOBS subsets, a second machine) can
# be merged into one directory: the report reads every summary-*.tsv, later files winning.
# With CUDA_VISIBLE_DEVICES (lanes.sh runs one lane per GPU) the GPU it names is the one
# described and the summary's name says which, so two lanes started in the same second merge
# without clashing. (nvidia-smi numbers GPUs in PCI order, as CUDA does for GPUs of one kind.)
gpu_sel=()
gpu_tag=
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  gpu_sel=(-i "${CUDA_VISIBLE_DEVICES%%,*}")
  gpu_tag=-gpu${CUDA_VISIBLE_DEVICES%%,*}
fi
summary=$ph/summary-$(date -u +%Y%m%dT%H%M%S)$gpu_tag.tsv
printf '# id\trc\twall_s\tgpu_s\test_s\n' > "$summary"
{
  nvidia-smi "${gpu_sel[@]}" --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>/dev/null | head -1 |
    grep . || nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader | head -1
  "$NVCC" --version
  date -u +%Y-%m-%dT%H:%M:%SZ
} > "$ph/env.txt" 2>&1
head -1 "$ph/env.txt"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
limit_for() {
  awk -v e="$1" -v f="$LIMIT_FACTOR" -v lo="$LIMIT_MIN_S" -v hi="$LIMIT_MAX_S" \
    'BEGIN { l = e * f; if (l < lo) l = lo; if (l > hi) l = hi; printf "%d", l + 0.999 }'
}
# Kernel time the records hold: per sample the timed runs (each the mean of its
# launches_per_run launches) plus the warm-up and the one-launch probe at the median.
records_gpu_s() {
  cat "$1"/*.jsonl 2>/dev/null | awk '
    { t = 0; per = 1
      if (match($0, /"launches_per_run":[0-9]+/)) per = substr($0, RSTART + 19, RLENGTH - 19)
      if (match($0, /"time_runs_ms":\[[^]]*\]/)) {
        s = substr($0, RSTART + 16, RLENGTH - 17); n = split(s, v, ",")
        for (i = 1; i <= n; i++) t += per * v[i]
      }
      if (match($0, /"time_ms":[0-9.eE+-]+/)) t += 2 * substr($0, RSTART + 10, RLENGTH - 10)
      sum += t }
    END { printf "%.3f", sum / 1000 }'
}
# Kernel time of KL_TIME lines: per site one warm-up, one probe and REPS timed repetitions
# (each batched to ~100 us, so counted as max(median, 0.1 ms)); $1 is REPS.
kltime_gpu_s() {
  local reps=$1; shift
  cat "$@" 2>/dev/null | awk -v r="$reps" '/^KL_TIME / { for (i = 1; i <= NF; i++) if ($i ~ /^median_ms=/) { split($i, a, "="); t = a[2]; s += 2 * t + r * (t > 0.1 ? t : 0.1) } }
    END { printf "%.3f", s / 1000 }'
}
# The choice phase's instrumented run: --time 30 in place of the job's --time 5, so the
# runtime sees enough launches of each kernel x size to settle (MODEL_REPS=5 for programs
# that launch each kernel many times a run anyway, e.g. gramschm's and lu's k loops).
MODEL_REPS=${MODEL_REPS:-30}
MODEL_RUNS=${MODEL_RUNS:-10}
# The choice phase measures where the runtime's refinement settles, not how it paces its
# tries over a user's runs (bench/gpu/refine measures that): without the budget a key tries
# its candidates as fast as its launches allow, so a job settles in one or two runs instead of
# many (on an H100 on 2026-11-25, with the 1 % budget, 13 of the first 18 jobs were still
# unsettled after 6 runs). REFINE_BUDGET=1 keeps a user's pacing.
REFINE_BUDGET=${REFINE_BUDGET:-off}
# The whole-run measurement (issue 41): after a job's choice runs, its command again, every
# launch of an annotated kernel timed between CUDA events (KLARAPTOR_LAUNCH_TIMES, written at
# exit), once per distinct shape of the compared methods that can be known here: the
# program's own (KLARAPTOR_DISABLE=1), the model's first choice (refinement and the choices
# cache off) and the shapes refinement settled on (KLARAPTOR_FORCE). profiled_best's shape is
# the report's (the profile database is not here): it gets a whole-run time where it is one
# of those. accuracy-report report reads wholerun/*.times.jsonl.
# WHOLE_RUN_REPEATS=<n> (default 1) makes each of those runs n times, round-robin over the
# shapes (stems <stem>, <stem>.r2, …); the report takes each shape's median.
WHOLE_RUN=${WHOLE_RUN:-1}
WHOLE_RUN_EST_FACTOR=${WHOLE_RUN_EST_FACTOR:-1.6}
WHOLE_RUN_REPEATS=${WHOLE_RUN_REPEATS:-1}
# Isolated whole runs (WHOLE_RUN_ISOLATE=1, the default; 0 leaves them out): in the whole runs
# above every kernel of the program takes the method's shape together, so kernel A's time can
# differ because kernel B, run before it, left the caches in another state (corr_center
# 1000x256 on an H200: 1.050 x min(own, model) in whole runs, its shapes equal per launch and
# in paired launches). Issue 41's acceptance is per kernel: with this on, per job and per kernel
# K whose own shape, model's first choice and settled shape are not all one, the job's command
# (--time 5, refinement and the choices cache off) with every other kernel forced to its
# settled shape and K at the method's: iso-<K>-own (K forced to its program_block),
# iso-<K>-model (K left to the model's first choice), and ref (every kernel at its settled
# shape, K's settled run; one for all K). A method's shape equal to K's settled shape is timed
# by ref; own equal to the model's at every key by iso-<K>-model. A kernel whose keys settled
# on different shapes is not isolated (KLARAPTOR_FORCE is per kernel) and is left unforced in
# the others' runs (the model's first choice at each key: the same in every run); a job with
# at most one kernel whose shapes differ has no isolated runs: its all-at-once runs vary that
# kernel alone. isolated/plan.tsv says per kernel which ("isolated", "alone", "same", "mixed",
# "unsettled") and why; accuracy-report report reads it and the runs.
WHOLE_RUN_ISOLATE=${WHOLE_RUN_ISOLATE:-1}
WHOLE_RUN_ISOLATE_EST_FACTOR=${WHOLE_RUN_ISOLATE_EST_FACTOR:-1.5}
# The settled shapes to force, from a choice job's model.log: lines "<j>\t<kernel>\t<block>",
# the j-th distinct shape of that kernel; a key's settled shape equal to its model choice or
# its program_block is measured by the model or default run already.
settled_to_force() {
  awk '
    /^klaraptor: / {
      line = substr($0, 12)
      r = index(line, " refine: ")
      if (r) {
        head = substr(line, 1, r - 1); tail = substr(line, r + 9)
        if (tail ~ /^(settled on |kept )block=[0-9]+x[0-9]+x[0-9]+/ &&
            match(tail, /block=[0-9]+x[0-9]+x[0-9]+/))
          settled[head] = substr(tail, RSTART + 6, RLENGTH - 6)
      } else if (index(line, " source=model") && (b = index(line, " block="))) {
        head = substr(line, 1, b - 1)
        split(substr(line, b + 7), a, " "); model[head] = a[1]
        if (match(line, /program_block=[0-9]+x[0-9]+x[0-9]+/))
          own[head] = substr(line, RSTART + 14, RLENGTH - 14)
      }
    }
    END {
      for (h in settled) {
        b = settled[h]
        if (b == model[h] || b == own[h]) continue
        k = h
        while (sub(/ [A-Za-z_][A-Za-z0-9_]*=-?[0-9]+$/, "", k)) {}
        if (!((k, b) in seen)) { seen[k, b] = 1; n[k]++; printf "%d\t%s\t%s\n", n[k], k, b }
      }
    }' "$1" | sort -t$'\t' -k1,1n -k2,2 -k3,3
}

if [ "$PHASE" = choice ]; then
  for d in "$STUDY"/*/; do
    p=$(basename "$d")
    [ -x "$d/$p.klaraptor" ] || continue
    ls "$d/models/"*.json > /dev/null 2>&1 ||
      echo "device.sh: warning: $p has no models/ (prepare.sh models not run?): its launches keep the program's own shape"
  done
fi

t0=$(now)
n_ok=0 n_fail=0 n_skip=0 checked=0
failed="" skipped=""
est_total=0
while IFS=$'\t' read -r phase id prog est plan cmd; do
  case $phase in ''|\#*) continue ;; esac
  [ "$phase" = "$PHASE" ] || continue
  if [ -n "${JOBS:-}" ] && ! [[ $id =~ $JOBS ]]; then continue; fi
  el=$(since "$t0")
  xest=$est
  if [ "$PHASE" = choice ] && [ "$WHOLE_RUN" != 0 ]; then
    f2=1
    # isolated runs only in programs of two or more kernels
    [ "$WHOLE_RUN_ISOLATE" != 0 ] &&
      [ "$(grep -c -v '^#' "$STUDY/$prog/kernels.tsv" 2>/dev/null)" -ge 2 ] 2>/dev/null &&
      f2=$WHOLE_RUN_ISOLATE_EST_FACTOR
    xest=$(awk -v e="$est" -v f="$WHOLE_RUN_EST_FACTOR" -v g="$f2" 'BEGIN { printf "%.1f", e * f * g }')
  fi
  if awk -v e="$el" -v x="$xest" -v d="$DEADLINE_S" 'BEGIN { exit !(e + x > d) }'; then
    printf '%s\tskipped\t0\t0\t%s\n' "$id" "$xest" >> "$summary"
    printf '[%6.1f s] %-10s %-16s skipped: est %s s would pass DEADLINE_S=%s\n' "$el" "$PHASE" "$id" "$xest" "$DEADLINE_S"
    n_skip=$((n_skip + 1)); skipped="$skipped $id"
    continue
  fi
  limit=$(limit_for "$est")
  stem=${id#*/}
  dir=$ph/$prog/$stem
  rm -rf "$dir"
  mkdir -p "$dir"
  js=$(now)
  case $PHASE in
    profile|exhaustive)
      mkdir -p "$dir/records"
      [ "$PHASE" = profile ] && cp "$ph/env.txt" "$ph/$prog/env.txt"
      # profile: the program's own block measured as well at each size where it is a legal
      # shape (program_profiled), as a link's profiling does
      extra=(KLARAPTOR_PROFILE_PROGRAM=1)
      [ "$PHASE" = exhaustive ] && extra=(KLARAPTOR_COLLECT_TIME_ONLY=1 KLARAPTOR_PROFILE_MAX_SIZES=1000)
      (cd "$STUDY/$prog" && env -u KLARAPTOR_FORCE -u KLARAPTOR_DISABLE -u KLARAPTOR_LOG \
         KLARAPTOR_PROFILE_OUT="$dir/records" KLARAPTOR_PROFILE_PLAN="$STUDY/$plan" \
         KLARAPTOR_COLLECTOR="$COLLECTOR" KLARAPTOR_PROFILE_RUNS=5 KLARAPTOR_PROFILE_WARMUP=1 \
         "${extra[@]}" timeout -k 5 "$limit" sh -c "$cmd" > "$dir/stdout.txt" 2> "$dir/stderr.txt")
      rc=$?
      gpu=$(records_gpu_s "$dir/records")
      ;;
    choice)
      case $cmd in
        *' --time 5') mcmd="${cmd% --time 5} --time $MODEL_REPS" ;;
        *) echo "device.sh: $id: the choice command does not end with --time 5: $cmd" >&2; mcmd=$cmd ;;
      esac
      # Runs sharing a fresh choices cache until none ends with a key unsettled (the runtime
      # spends at most KLARAPTOR_REFINE_BUDGET of a run's kernel time on tries), at most
      # $MODEL_RUNS; model.log has every run's lines, model.out the last run's output.
      runs=0
      while :; do
        runs=$((runs + 1))
        seen=$(stat -c %s "$dir/model.log" 2>/dev/null || echo 0)
        (cd "$STUDY/$prog" && env -u KLARAPTOR_FORCE -u KLARAPTOR_DISABLE -u KLARAPTOR_PROFILE_OUT \
           -u KLARAPTOR_PROFILE_PLAN KLARAPTOR_LOG="$dir/model.log" KLARAPTOR_CHOICES="$dir/choices" \
           KLARAPTOR_REFINE_BUDGET="$REFINE_BUDGET" \
           timeout -k 5 "$limit" sh -c "$mcmd" > "$dir/model.out" 2> "$dir/model.err")
        rc1=$?
        [ $rc1 -ne 0 ] || [ $runs -ge "$MODEL_RUNS" ] && break
        tail -c +$((seen + 1)) "$dir/model.log" | grep -q ' refine: not settled at exit' || break
      done
      echo "$runs" > "$dir/model.runs"
      (cd "$STUDY/$prog" && env -u KLARAPTOR_FORCE -u KLARAPTOR_LOG -u KLARAPTOR_PROFILE_OUT \
         -u KLARAPTOR_PROFILE_PLAN KLARAPTOR_DISABLE=1 \
         timeout -k 5 "$limit" sh -c "$cmd" > "$dir/default.out" 2> "$dir/default.err")
      rc2=$?
      rc="$rc1,$rc2"
      wnote=""
      if [ "$WHOLE_RUN" != 0 ]; then
        wr=$dir/wholerun
        mkdir -p "$wr"
        nw=0 wfail=0 wskip=0
        # wrun <dir> <stem> <VAR=value>...: the job's command once, every launch timed.
        wrun() {
          local wd=$1 stem=$2; shift 2
          if awk -v e="$(since "$t0")" -v d="$DEADLINE_S" 'BEGIN { exit !(e > d) }'; then
            echo "$stem: not run, DEADLINE_S=$DEADLINE_S passed" >> "$wd/skipped"
            wskip=$((wskip + 1)); return
          fi
          (cd "$STUDY/$prog" && env -u KLARAPTOR_FORCE -u KLARAPTOR_DISABLE -u KLARAPTOR_PROFILE_OUT \
             -u KLARAPTOR_PROFILE_PLAN -u KLARAPTOR_REFINE -u KLARAPTOR_CHOICES \
             KLARAPTOR_LAUNCH_TIMES="$wd/$stem.times.jsonl" KLARAPTOR_LOG="$wd/$stem.log" "$@" \
             timeout -k 5 "$limit" sh -c "$cmd" > "$wd/$stem.out" 2> "$wd/$stem.err")
          local st=$?
          echo "$st" > "$wd/$stem.status"
          nw=$((nw + 1)); [ "$st" -eq 0 ] || wfail=$((wfail + 1))
        }
        plan=$(settled_to_force "$dir/model.log")
        nf=$(printf '%s\n' "$plan" | awk -F'\t' 'NF >= 3 && $1 > m { m = $1 } END { print m + 0 }')
        for ((j = 1; j <= nf; j++)); do
          printf '%s\n' "$plan" | awk -F'\t' -v j="$j" '$1 == j { print $2 " " $3 }' > "$wr/f$j.force"
        done
        # The isolated runs' plan (see WHOLE_RUN_ISOLATE above).
        iruns=() iref="" inote="" ikernels=0
        if [ "$WHOLE_RUN_ISOLATE" != 0 ]; then
          iso=$dir/isolated
          mkdir -p "$iso"
          ip=$(isolate_plan "$dir/model.log")
          { printf '# kernel\tstem\tkeys\town\tmodel\tsettled\tstatus\tnote\n'
            printf '%s\n' "$ip" | awk -F'\t' '$1 == "P"' | cut -f2-; } > "$iso/plan.tsv"
          iref=$(printf '%s\n' "$ip" | awk -F'\t' '$1 == "R" { print $2 }')
          while IFS=$'\t' read -r _ istem _ iforce; do
            iruns+=("$istem"$'\t'"$iforce")
            force_file "$iforce" > "$iso/$istem.force"
          done < <(printf '%s\n' "$ip" | awk -F'\t' '$1 == "I"')
          if [ ${#iruns[@]} -gt 0 ]; then
            force_file "$iref" > "$iso/ref.force"
            ikernels=$(awk -F'\t' '$7 == "isolated"' "$iso/plan.tsv" | wc -l)
          fi
          alone=$(awk -F'\t' '$7 == "alone" { print $1 }' "$iso/plan.tsv")
          [ -n "$alone" ] && inote=", no isolated runs needed (only $alone changes shape)"
          mixed=$(awk -F'\t' '$7 == "mixed" { printf "%s%s", (n++ ? ", " : ""), $1 }' "$iso/plan.tsv")
          [ -n "$mixed" ] && inote="$inote; not isolated (keys settled on different shapes): $mixed"
        fi
        for ((k = 1; k <= WHOLE_RUN_REPEATS; k++)); do
          sfx=""
          [ "$k" -gt 1 ] && sfx=".r$k"
          wrun "$wr" "default$sfx" KLARAPTOR_DISABLE=1
          wrun "$wr" "model$sfx" KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off
          for ((j = 1; j <= nf; j++)); do
            force=$(printf '%s\n' "$plan" | awk -F'\t' -v j="$j" \
              '$1 == j { printf "%s%s:%s", (n++ ? "," : ""), $2, $3 }')
            wrun "$wr" "f$j$sfx" KLARAPTOR_FORCE="$force" KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off
          done
          if [ ${#iruns[@]} -gt 0 ]; then
            wrun "$iso" "ref$sfx" KLARAPTOR_FORCE="$iref" KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off
            for r in "${iruns[@]}"; do
              wrun "$iso" "${r%%$'\t'*}$sfx" KLARAPTOR_FORCE="${r#*$'\t'}" KLARAPTOR_REFINE=off \
                KLARAPTOR_CHOICES=off
            done
          fi
        done
        niso=$(ls "$dir"/isolated/*.status 2>/dev/null | wc -l)
        [ "$ikernels" -gt 0 ] && inote=" ($niso of them isolating $ikernels kernel(s))$inote"
        wnote=" wholerun $nw run(s)$inote"
        [ $wfail -gt 0 ] && wnote="$wnote, $wfail failed"
        [ $wskip -gt 0 ] && wnote="$wnote, $wskip skipped (deadline)"
      fi
      gpu=$(awk -v a="$(kltime_gpu_s "$MODEL_REPS" "$dir/model.out")" \
        -v b="$(kltime_gpu_s 5 "$dir/default.out" "$dir"/wholerun/*.out "$dir"/isolated/*.out)" \
        'BEGIN { printf "%.3f", a + b }')
      ;;
  esac
  wall=$(since "$js")
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$rc" "$wall" "$gpu" "$xest" >> "$summary"
  # A recipe run exits 1 when its own check fails under the sweep (accumulating kernels run
  # once per shape): that is expected, the records are what counts.
  ok=0
  case "$PHASE:$rc" in profile:0|profile:1|exhaustive:0|choice:0,0) ok=1 ;; esac
  if [ $ok -eq 1 ]; then n_ok=$((n_ok + 1)); else n_fail=$((n_fail + 1)); failed="$failed $id(rc=$rc)"; fi
  note=""
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" TIMEOUT after ${limit} s"
  [ "$PHASE" = choice ] && note="$note${wnote:-}"
  printf '[%6.1f s] %-10s %-16s rc=%-5s wall %6.2f s (est %5s) kernels %7.3f s%s\n' \
    "$(since "$t0")" "$PHASE" "$id" "$rc" "$wall" "$xest" "$gpu" "$note"
  if [ $ok -eq 0 ]; then
    for f in "$dir"/*.err "$dir/stderr.txt"; do [ -s "$f" ] && tail -n 3 "$f" | sed 's/^/    /'; done
  fi
  # The first exhaustive records must be time-only: counters mean the collector ignored
  # KLARAPTOR_COLLECT_TIME_ONLY and every later sweep would run the profiler's passes.
  if [ "$PHASE" = exhaustive ] && [ $checked -eq 0 ] && ls "$dir/records/"*.jsonl > /dev/null 2>&1; then
    checked=1
    if grep -h -o '"inst_executed":[0-9]*' "$dir/records/"*.jsonl | grep -q -v ':0$'; then
      echo "device.sh: the records of $id hold counters: the collector did not honour KLARAPTOR_COLLECT_TIME_ONLY=1; stopping" >&2
      exit 3
    fi
  fi
done < "$jobs_txt"

total=$(since "$t0")
est_total=$(awk -F'\t' -v p="$PHASE" '$1 == p { s += $4 } END { printf "%.0f", s }' "$jobs_txt")
echo "$PHASE: $n_ok ok, $n_fail failed, $n_skip skipped; ${total} s in all (jobs.txt estimates ${est_total} s for the whole phase)"
[ -n "$failed" ] && echo "failed:$failed"
[ -n "$skipped" ] && echo "skipped (run again with JOBS='^(...)$' to do them):$skipped"
echo "results under $ph"
[ $n_fail -eq 0 ]

#!/usr/bin/env bash
# The one-line pragma on a GPU (issue 40's acceptance): a program annotated only with
# `#pragma klaraptor kernel(k)` lines (bench/oneline/app.cu: a saxpy without bounds check
# launched with n/256 blocks of 256, and a 2-D kernel on 16 x 16 tiles), from an empty profile
# database:
#  1. links ./app from the object bench/oneline/bundle.sh compiled (the compile needs clang-19,
#     which this machine lacks; the link runs here with the bundled klaraptor-cc): no profile,
#     the kernels keep their launches, the link says to run klaraptor profile;
#  2. runs it as given (KLARAPTOR_LOG=1): correct results, the program's own shapes;
#  3. `klaraptor profile ./app <args>`: no recipe, so the program runs once as given and each
#     kernel is profiled at the sizes its launches reach;
#  4. links again (the rebuild: the link finds the profiles and links the rational programs;
#     with --kl-profiling-variant for validate), `klaraptor inspect` and `explain`;
#  5. runs it three times with KLARAPTOR_LOG=1 and one choices cache (and once with the model
#     alone): results still correct (the exact-cover rule), the decisions logged;
#  6. `klaraptor validate ./app --sizes "<args>"`: every candidate shape timed at that size,
#     klaraptor's choice (model, settled) against the best and the profile's fastest shape.
#
#   OUT=$OUT bench/oneline/run.sh          (from the repo root, carrying .dev/oneline)
#
# ONELINE_ARGS: the program's arguments (default "16777216 4096 4096 200": n, w, h and the
# launches of each kernel per run); ONELINE_NVCC (default /usr/local/cuda/bin/nvcc);
# ONELINE_BUNDLE (default .dev/oneline/bundle.tar.xz). Writes summary.txt (PASS/FAIL lines
# and the comparison), log.txt (every command's output), validate.json and results.tar.gz
# (rational programs, manifests, profile entries) into $OUT.
set -uo pipefail
ARCH=(-gencode arch=compute_90,code=sm_90)
WORK=/tmp/klaraptor-oneline
: "${OUT:?set OUT to the directory the results go to}"
repo=$(pwd)
bundle=${ONELINE_BUNDLE:-$repo/.dev/oneline/bundle.tar.xz}
nvcc=${ONELINE_NVCC:-/usr/local/cuda/bin/nvcc}
case $nvcc in /*) ;; *) nvcc=$repo/$nvcc ;; esac
args=${ONELINE_ARGS:-16777216 4096 4096 200}
mkdir -p "$OUT"
summary=$OUT/summary.txt
log=$OUT/log.txt
: > "$summary"
: > "$log"
. "$repo/bench/linkprof/checks.sh"

say "== klaraptor one-line pragma check ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname)), ./app $args"
[ -f "$bundle" ] || die "bundle: no $bundle: run bench/oneline/bundle.sh <target dir> on the build machine and carry .dev/oneline"
[ -x "$nvcc" ] || die "nvcc: none at $nvcc (set ONELINE_NVCC)"
rm -rf "$WORK"
mkdir -p "$WORK/app"
. "$repo/bench/linkprof/unpack.sh"
unpack_bundle "$bundle" "$WORK/bundle" "$nvcc"
cp "$B/objs/app.o" "$B/objs/app.cu" "$WORK/app/"
export KLARAPTOR_PROFILE_DB=$WORK/db XDG_CACHE_HOME=$WORK/cache
unset KLARAPTOR_FORCE KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_COLLECTOR KLARAPTOR_CHOICES \
  KLARAPTOR_REFINE NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
cd "$WORK/app" || die "no $WORK/app"

# step <name> <command...>: runs it here, its output appended to log.txt (and to $WORK/<name>.txt)
step() {
  local name=$1 rc t0
  shift
  t0=$(now)
  { echo; echo "===== $name: \$ $*"; } >> "$log"
  "$@" > "$WORK/$name.txt" 2>&1
  rc=$?
  cat "$WORK/$name.txt" >> "$log"
  echo "===== $name: exit $rc in $(secs "$t0" "$(now)") s" >> "$log"
  return $rc
}

# --- 1. link without a profile -----------------------------------------------------------
step link1 "$kcc" -O2 "${ARCH[@]}" app.o -o app
check "link without a profile" "$([ -x app ] && echo 1)" "$(grep -c 'klaraptor profile <binary> <arguments>' "$WORK/link1.txt") hint(s) to run klaraptor profile"
[ -x app ] || die "no ./app (log.txt)"

# --- 2. the program as given -------------------------------------------------------------
KLARAPTOR_LOG=1 KLARAPTOR_CHOICES=off step run0 ./app $args
check "run before profiling" "$(grep -q ': correct,' "$WORK/run0.txt" && echo 1)" "$(grep -E 'correct|WRONG' "$WORK/run0.txt" | head -1)"

gpu=0
if { [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; } && [ "${KLARAPTOR_NO_GPU:-0}" = 0 ]; then gpu=1; fi
[ $gpu = 1 ] || die "no GPU here: the rest needs one"
nvidia-smi --query-gpu=name,uuid,compute_cap,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"

# --- 3. klaraptor profile ./app <args> ---------------------------------------------------
step profile "$klaraptor" profile ./app $args
rc=$?
check "klaraptor profile ./app $args" "$([ $rc = 0 ] && echo 1)" "exit $rc; $(grep -E 'profiled ->|no complete profile' "$WORK/profile.txt" | tr '\n' ' ')"
step dblist "$klaraptor" profile list
for k in saxpy scale2d; do
  check "profile entry of $k" "$(grep -w "$k" "$WORK/dblist.txt" | grep -qw ok && echo 1)" "$(grep -w "$k" "$WORK/dblist.txt" | head -1 | tr -s ' ')"
  step "show-$k" "$klaraptor" profile show "$k"
done

# --- 4. the rebuild: link again ----------------------------------------------------------
step link2 "$kcc" -O2 "${ARCH[@]}" app.o -o app --kl-profiling-variant=app.profiling
rc=$?
check "link with the profiles" "$([ $rc = 0 ] && [ -x app ] && echo 1)" "exit $rc; $(ls app.klaraptor 2>/dev/null | tr '\n' ' ')"
step inspect "$klaraptor" inspect ./app
read -r n w h _ <<< "$args"
n=$((n - n % 256)) w=$((w - w % 16)) h=$((h - h % 16))
step explain-saxpy "$klaraptor" explain ./app saxpy --size "$n"
step explain-scale2d "$klaraptor" explain ./app scale2d --size "$w,$h"
for k in saxpy scale2d; do
  check "rational program of $k" "$(grep -q "^kernel $k" "$WORK/inspect.txt" && grep -q 'rational program:' "$WORK/inspect.txt" && echo 1)" "$(grep -A4 "^kernel $k" "$WORK/inspect.txt" | grep -E 'decision|chosen|rational program' | head -2 | tr -s ' ' | tr '\n' ' ')"
  say "  explain $k (top 3): $(grep -E '^\*? +[0-9]+ ' "$WORK/explain-$k.txt" | head -3 | tr -s ' ' | tr '\n' '|')"
done

# --- 5. the program with its rational programs -------------------------------------------
KLARAPTOR_LOG=1 KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off step run-model ./app $args
check "run, the model's first choice" "$(grep -q ': correct,' "$WORK/run-model.txt" && echo 1)" "$(grep -E 'correct|WRONG' "$WORK/run-model.txt" | head -1); $(grep -E '^klaraptor: (saxpy|scale2d) ' "$WORK/run-model.txt" | grep -v refine | head -2 | tr '\n' ' ')"
for r in 1 2 3; do
  KLARAPTOR_LOG=1 KLARAPTOR_CHOICES=$WORK/choices step "run$r" ./app $args
  check "run $r (refinement, one choices cache)" "$(grep -q ': correct,' "$WORK/run$r.txt" && echo 1)" "$(grep -E 'correct|WRONG' "$WORK/run$r.txt" | head -1); $(grep -E 'settled|source=' "$WORK/run$r.txt" | head -4 | tr '\n' ' ')"
done
step choices "$klaraptor" choices list --dir "$WORK/choices"

# --- 6. klaraptor validate ----------------------------------------------------------------
step validate "$klaraptor" validate ./app --sizes "$args" --profile-db "$WORK/db" --out "$WORK/validate" --json "$OUT/validate.json"
rc=$?
check "klaraptor validate" "$([ $rc = 0 ] && echo 1)" "exit $rc (the table is in summary.txt below and log.txt)"
{
  echo
  echo "== klaraptor validate ./app --sizes \"$args\" (every candidate timed; ratios: best time / the method's time)"
  cat "$WORK/validate.txt"
} >> "$summary"
if command -v python3 >/dev/null && [ -f "$OUT/validate.json" ]; then
  python3 - "$OUT/validate.json" <<'PY' | tee -a "$summary"
import json, sys
data = json.load(open(sys.argv[1]))
rows = data if isinstance(data, list) else data.get("results", data.get("cases", [data]))
def find(d, *keys):
    for k in keys:
        if isinstance(d, dict) and k in d:
            return d[k]
    return None
print("== chosen vs the profile's fastest shape (from validate.json)")
for r in rows if isinstance(rows, list) else []:
    if not isinstance(r, dict):
        continue
    print(json.dumps({k: r[k] for k in r if not isinstance(r[k], (list, dict))}))
    for m in ("klaraptor", "settled", "profiled_best", "best", "program"):
        v = find(r, m)
        if v is not None:
            print(f"  {m}: {json.dumps(v)[:300]}")
PY
fi

cd "$WORK" || true
tar -czf "$OUT/results.tar.gz" -C "$WORK" db app/app.klaraptor validate choices bundle/BUILD-INFO 2>/dev/null || true
say "RESULT: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails)")"
[ $fails = 0 ]

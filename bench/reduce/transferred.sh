#!/usr/bin/env bash
# One binary, the programs of several GPUs (issue 22), on the GPU machine, from the repo root
# with .dev/reduce carried (bench/reduce/bundle.sh):
#
#   OUT=$OUT bench/reduce/transferred.sh
#
# links samples/reduce's objects against a copy of the committed H200 profile
# (tests/fixtures/reduce-h200-2026-11-26; REDUCE_DB to use another) with --kl-no-profile: the
# binary carries the H200's programs and, for the H100 (a shipped description, no profile of
# its own), programs transferred from the H200's profile. Then `klaraptor inspect`, and the
# program at two sizes with KLARAPTOR_LOG=1: on an H200 the log names the H200's programs, on
# an H100 the transferred ones. Writes summary.txt, link.txt, inspect.txt, runs.txt.
set -uo pipefail
WORK=/tmp/klaraptor-reduce
ARCH=(-gencode arch=compute_90,code=sm_90)
: "${OUT:?set OUT}"
repo=$(pwd)
bundle=${REDUCE_BUNDLE:-$repo/.dev/reduce/bundle.tar.xz}
db_src=${REDUCE_DB:-$repo/tests/fixtures/reduce-h200-2026-11-26}
nvcc=${LINKPROF_NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
. "$repo/bench/linkprof/checks.sh"
say "== one binary, several GPUs' programs ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
[ -f "$bundle" ] || die "no $bundle: run bench/reduce/bundle.sh and carry .dev/reduce"
gpu=$(nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader 2>/dev/null | head -1)
say "gpu: ${gpu:-none}"
rm -rf "$WORK"
mkdir -p "$WORK"
set -e
. "$repo/bench/linkprof/unpack.sh"
unpack_bundle "$bundle" "$WORK/bundle" "$nvcc"
set +e
b=$WORK/reduce
mkdir -p "$b"
cp "$WORK"/bundle/objs/reduce/* "$b/"
cp -r "$db_src" "$WORK/db"
export KLARAPTOR_PROFILE_DB=$WORK/db XDG_CACHE_HOME=$WORK/cache KLARAPTOR_CHOICES=off
unset KLARAPTOR_DISABLE KLARAPTOR_LOG KLARAPTOR_TRANSFER
(cd "$b" && timeout 120 "$kcc" "${ARCH[@]}" --kl-verbose --kl-no-profile reduce.o -o reduce) > "$OUT/link.txt" 2>&1
rc=$?
check "link against the H200 profile" "$([ $rc = 0 ] && echo 1)" \
  "exit $rc; $(grep -c 'transferred from' "$OUT/link.txt") transferred program(s) in the link's log"
grep -E 'rational program of|warning' "$OUT/link.txt" | head -12 | sed 's/^/  | /' | tee -a "$summary"
(cd "$b" && "$klaraptor" inspect ./reduce) > "$OUT/inspect.txt" 2>&1
check "inspect" "$(grep -q 'transferred from NVIDIA H200' "$OUT/inspect.txt" && echo 1)" \
  "$(grep -c '^kernel ' "$OUT/inspect.txt") program(s), $(grep -c 'transferred from' "$OUT/inspect.txt") transferred"
: > "$OUT/runs.txt"
for n in 1048576 16777216; do
  (cd "$b" && KLARAPTOR_LOG=1 timeout 60 ./reduce "$n") >> "$OUT/runs.txt" 2>&1
  rc=$?
  check "reduce $n with KLARAPTOR_LOG=1" "$([ $rc = 0 ] && echo 1)" "exit $rc"
done
grep -E '^klaraptor: reduce_(detect|static) .*source=' "$OUT/runs.txt" | head -4 | sed 's/^/  | /' | tee -a "$summary"
say "RESULT: $([ $fails = 0 ] && echo PASS || echo FAIL) ($fails failure(s))"
[ $fails = 0 ]

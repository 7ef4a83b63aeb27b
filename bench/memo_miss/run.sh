#!/usr/bin/env bash
# The cost of a memo miss: how long the generated rational program of the matmul sample's
# 2-D kernel mm takes to evaluate every candidate block shape and choose, on this machine's
# CPU (no GPU needed). Writes bench/results/memo-miss-<date>.md and prints a summary.
#
#   bench/memo_miss/run.sh [path/to/klaraptor-cc]     (default: target/release/klaraptor-cc)
#
# 1. builds samples/matmul with `make NVCC=klaraptor-cc` in a scratch copy beside the
#    committed H200 profiles (samples/klaraptor-profiles), which generates
#    matmul.klaraptor/mm.nvidia-h200.c;
# 2. links that C file, compiled as klaraptor-cc compiles it (-std=c99 -O2 -fPIC
#    -ffp-contract=off), with tests/fixtures/select-harness/harness.c, and times each call of
#    the `select` pointer it registers (klaraptor_model.select: every candidate evaluated),
#    over SIZES distinct data sizes (default 2000, N from 1 to about 100000), ROUNDS times
#    (default 5);
# 3. links it with the real runtime (runtime-shim/src/klaraptor_rt.c, fake device hooks) and
#    times klaraptor_select on a miss (memo lookup, select, grid, memo insertion) and on the
#    following hit, once per size (bench/memo_miss/miss_rt.c).
# Each call is timed alone with clock_gettime (about 20-30 ns of the figure).
# Environment: KLARAPTOR_NVCC (default .toolchain/cuda/bin/nvcc), CC (default cc), SIZES,
# ROUNDS, OUT_MD (default bench/results/memo-miss-<UTC date>.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kcc=${1:-${KLARAPTOR_CC:-$repo/target/release/klaraptor-cc}}
[ -x "$kcc" ] || { echo "memo_miss: $kcc is not an executable klaraptor-cc: build it (cargo build --release) or pass its path" >&2; exit 1; }
export KLARAPTOR_NVCC=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
[ -x "$KLARAPTOR_NVCC" ] || { echo "memo_miss: no nvcc at $KLARAPTOR_NVCC: run scripts/setup or set KLARAPTOR_NVCC" >&2; exit 1; }
cc=${CC:-cc}
nsizes=${SIZES:-2000}
rounds=${ROUNDS:-5}
[ "$nsizes" -ge 1000 ] || { echo "memo_miss: SIZES must be at least 1000" >&2; exit 1; }
date=$(date -u +%F)
out_md=${OUT_MD:-$repo/bench/results/memo-miss-$date.md}

work=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-memo-miss.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/samples/matmul"
cp "$repo"/samples/matmul/{Makefile,kernels.h,main.cu,mm.cu,saxpy.cu} "$work/samples/matmul/"
cp -r "$repo/samples/klaraptor-profiles" "$work/samples/"
rm -f "$work"/samples/klaraptor-profiles/.lock*
(cd "$work/samples/matmul" && env -u KLARAPTOR_PROFILE_DB KLARAPTOR_NO_GPU=1 \
   XDG_CACHE_HOME="$work/cache" make -s NVCC="$kcc" > "$work/make.log" 2>&1) \
  || { cat "$work/make.log" >&2; echo "memo_miss: building samples/matmul failed" >&2; exit 1; }
prog=$work/samples/matmul/matmul.klaraptor/mm.nvidia-h200.c
[ -f "$prog" ] || { cat "$work/make.log" >&2; echo "memo_miss: no rational program of mm was generated (no valid profile?)" >&2; exit 1; }
ncand=$(sed -n 's|^/\* Candidate block shapes (\([0-9]*\) of them.*|\1|p' "$prog")

flags=(-std=c99 -O2 -fPIC -ffp-contract=off -I"$repo/runtime-shim/include")
"$cc" "${flags[@]}" "$repo/tests/fixtures/select-harness/harness.c" "$prog" -lm -o "$work/harness"
"$cc" "${flags[@]}" -DKLARAPTOR_NO_CUDART -I"$repo/runtime-shim/src" \
  "$repo/bench/memo_miss/miss_rt.c" "$repo/runtime-shim/src/klaraptor_rt.c" "$prog" \
  -lpthread -lm -o "$work/miss_rt"

# Distinct sizes spread over 1 .. ~100000: step 50, jittered.
sizes=$(awk -v n="$nsizes" 'BEGIN { for (i = 0; i < n; i++) print 1 + i * 50 + (i * 37) % 50 }')
[ "$(printf '%s\n' $sizes | sort -u | wc -l)" -eq "$nsizes" ] || { echo "memo_miss: sizes not distinct" >&2; exit 1; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# shellcheck disable=SC2086
"$work/harness" bench "$rounds" $sizes > "$work/select.txt"
# shellcheck disable=SC2086
"$work/miss_rt" $sizes > "$work/rt.txt"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# stats <file of ns values>: "median p99 min max mean" in µs.
stats() {
  sort -n "$1" | awk '{ v[NR] = $1; s += $1 }
    END { i50 = int((NR + 1) / 2); i99 = int(NR * 0.99 + 0.999999); if (i99 > NR) i99 = NR;
          printf "%.2f %.2f %.2f %.2f %.2f", v[i50] / 1e3, v[i99] / 1e3, v[1] / 1e3, v[NR] / 1e3, s / NR / 1e3 }'
}
awk '{ print $3 }' "$work/select.txt" > "$work/select.ns"
awk '$1 == 0 { print $3 }' "$work/select.txt" > "$work/select0.ns"
awk '$1 > 0 { print $3 }' "$work/select.txt" > "$work/selectw.ns"
awk '$1 == "miss" { print $3 }' "$work/rt.txt" > "$work/miss.ns"
awk '$1 == "hit" { print $3 }' "$work/rt.txt" > "$work/hit.ns"
read -r s_med s_p99 s_min s_max s_mean <<< "$(stats "$work/select.ns")"
read -r s0_med s0_p99 _ _ _ <<< "$(stats "$work/select0.ns")"
read -r sw_med sw_p99 _ _ _ <<< "$(stats "$work/selectw.ns")"
read -r m_med m_p99 m_min m_max m_mean <<< "$(stats "$work/miss.ns")"
read -r h_med h_p99 _ _ _ <<< "$(stats "$work/hit.ns")"
first_miss=$(awk '$1 == "miss" { printf "%.1f", $3 / 1e3; exit }' "$work/rt.txt")
verdict=$(awk -v p="$m_p99" -v q="$s_p99" 'BEGIN { print ((p <= 50 && q <= 50) ? "met" : "NOT met") }')
choices=$(awk '$1 == "miss" { print $4 "x" $5 "x" $6 }' "$work/rt.txt" | sort | uniq -c | sort -rn | head -5 | awk '{ printf "%s%s (%s sizes)", sep, $2, $1; sep = ", " }')

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
ccv=$("$cc" --version | head -1)
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
mkdir -p "$(dirname "$out_md")"
cat > "$out_md" <<EOF
# Memo miss of a rational program ($date)

The cost of deciding a launch the memo has not seen: the generated rational program of the
matmul sample's 2-D kernel \`mm\` (profiles: samples/klaraptor-profiles, NVIDIA H200)
evaluates all $ncand candidate block shapes (fitted metrics, occupancy, MWP-CWP) and keeps the
fastest. Target: at most 50 µs per miss. Command: \`bench/memo_miss/run.sh\`.

Machine: $cpu, $(nproc) CPUs, $os ($(uname -r)); $ccv; flags -std=c99 -O2 -fPIC
-ffp-contract=off (as klaraptor-cc compiles rational programs). Load average $load_before
before, $load_after after (the machine is shared). klaraptor $rev.

| what | calls | median µs | p99 µs | min µs | max µs | mean µs |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
| \`klaraptor_model.select\` (harness), all rounds | $((nsizes * rounds)) | $s_med | $s_p99 | $s_min | $s_max | $s_mean |
| \`klaraptor_select\` miss, whole runtime | $nsizes | $m_med | $m_p99 | $m_min | $m_max | $m_mean |
| \`klaraptor_select\` hit, same sizes | $nsizes | $h_med | $h_p99 | | | |

- select, first round (cold) median $s0_med µs, p99 $s0_p99 µs; later rounds median $sw_med µs,
  p99 $sw_p99 µs. The very first miss through the runtime (device description, first memo
  allocation) took $first_miss µs.
- $nsizes distinct sizes N = 1 … $(printf '%s\n' $sizes | tail -1) ($rounds rounds for select).
  Most frequent choices: $choices.
- Target ≤ 50 µs at p99: **$verdict**.
EOF
echo "memo miss (mm, $ncand candidates, $nsizes sizes): select median $s_med µs, p99 $s_p99 µs; through klaraptor_select median $m_med µs, p99 $m_p99 µs (hit $h_med µs); target <= 50 µs: $verdict"
echo "written: $out_md"

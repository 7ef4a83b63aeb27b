#!/usr/bin/env bash
# What klaraptor-cc costs a build: wall time of `make` of samples/matmul from clean with plain
# nvcc and with klaraptor-cc when the profile database has a valid entry for every kernel
# (the committed H200 profiles: nothing is profiled, each kernel's rational program is fitted
# and generated), RUNS runs each (default 5, interleaved), medians and their ratio (target
# <= 1.5x), and where klaraptor-cc's time goes (one more build with --kl-verbose, each line
# of its output timestamped). Writes bench/results/rebuild-<date>.md and prints a summary.
# No GPU needed (KLARAPTOR_NO_GPU=1: never profile).
#
#   bench/rebuild/run.sh [path/to/klaraptor-cc]     (default: target/release/klaraptor-cc)
#
# Environment: KLARAPTOR_NVCC (default .toolchain/cuda/bin/nvcc), RUNS, OUT_MD (default
# bench/results/rebuild-<UTC date>.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kcc=${1:-${KLARAPTOR_CC:-$repo/target/release/klaraptor-cc}}
[ -x "$kcc" ] || { echo "rebuild: $kcc is not an executable klaraptor-cc: build it (cargo build --release) or pass its path" >&2; exit 1; }
kcc=$(cd "$(dirname "$kcc")" && pwd)/$(basename "$kcc")
nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "rebuild: no nvcc at $nvcc: run scripts/setup or set KLARAPTOR_NVCC" >&2; exit 1; }
export KLARAPTOR_NVCC=$nvcc KLARAPTOR_NO_GPU=1
unset KLARAPTOR_PROFILE_DB NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
runs=${RUNS:-5}
date=$(date -u +%F)
out_md=${OUT_MD:-$repo/bench/results/rebuild-$date.md}

work=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-rebuild.XXXXXX")
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME=$work/cache
mkdir -p "$work/samples/matmul"
cp "$repo"/samples/matmul/{Makefile,kernels.h,main.cu,mm.cu,saxpy.cu} "$work/samples/matmul/"
cp -r "$repo/samples/klaraptor-profiles" "$work/samples/"
rm -f "$work"/samples/klaraptor-profiles/.lock*
cd "$work/samples/matmul"

clean() { rm -rf matmul ./*.o matmul.klaraptor; }
# build <NVCC value> <log>: prints the wall time of `make` in seconds.
build() {
  clean
  local t0=$EPOCHREALTIME
  make NVCC="$1" > "$2" 2>&1 || { cat "$2" >&2; echo "rebuild: make NVCC=$1 failed" >&2; exit 1; }
  local t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# One untimed build of each first (file cache, libLLVM and libclang loaded once).
build "$nvcc" "$work/warm-nvcc.log" > /dev/null
build "$kcc" "$work/warm-kcc.log" > /dev/null
: > "$work/nvcc.times"
: > "$work/kcc.times"
for i in $(seq 1 "$runs"); do
  build "$nvcc" "$work/nvcc.log" >> "$work/nvcc.times"
  build "$kcc" "$work/kcc.log" >> "$work/kcc.times"
  if grep -q "no profile" "$work/kcc.log"; then
    cat "$work/kcc.log" >&2
    echo "rebuild: klaraptor-cc found no valid profile entry: the measurement needs one" >&2
    exit 1
  fi
  [ -f matmul.klaraptor/mm.nvidia-h200.c ] && [ -f matmul.klaraptor/saxpy.nvidia-h200.c ] \
    || { echo "rebuild: klaraptor-cc linked no rational programs" >&2; exit 1; }
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
list() { sort -n "$1" | paste -sd' ' | sed 's/ /, /g'; }
m_nvcc=$(median "$work/nvcc.times")
m_kcc=$(median "$work/kcc.times")
ratio=$(awk -v a="$m_kcc" -v b="$m_nvcc" 'BEGIN { printf "%.2f", a / b }')
verdict=$(awk -v r="$ratio" 'BEGIN { print (r <= 1.5) ? "met" : "NOT met" }')

# Where klaraptor-cc's time goes: a wrapper timestamps every line klaraptor-cc --kl-verbose
# writes; a line's duration is the time to the next line of the same command (a "running X"
# line is written just before X starts).
cat > "$work/timed-kcc" <<EOF
#!/usr/bin/env bash
{ "$kcc" --kl-verbose "\$@" 2>&1 1>&3 3>&-; echo "klaraptor-cc: exit \$?"; } 3>&1 |
  while IFS= read -r line; do echo "\$EPOCHREALTIME \$line"; done >> "$work/stamps.log"
EOF
chmod +x "$work/timed-kcc"
: > "$work/stamps.log"
clean
t0=$EPOCHREALTIME
make NVCC="$work/timed-kcc" > /dev/null 2>&1
t1=$EPOCHREALTIME
verbose_total=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
awk '
  function cat(l) {
    if (l ~ /running .*nvcc.* "-cuda"/) return "nvcc -cuda: device code and host translation"
    if (l ~ /running exactly the nvcc command/ || l ~ /running .*nvcc -O2/) return "nvcc (unannotated main.cu, as given)"
    if (l ~ /running "clang\+\+-19" "-S" "-emit-llvm"/) return "clang-19 -emit-llvm + IO-builder pass"
    if (l ~ /running "clang\+\+-19" "-c"/) return "clang-19 -c (instrumented host code)"
    if (l ~ /running "cc" .*kernels\.c/) return "cc kernel descriptors"
    if (l ~ /running "ld" "-r"/) return "ld -r"
    if (l ~ /front-end:/ || l ~ /kernel .* annotated at /) return "front-end (annotations, libclang)"
    if (l ~ /linking instrumented objects/) return "link: kernel specs from the objects, runtime archive"
    if (l ~ /rational program of .* for /) return "link: profile lookup + fit + codegen (first kernel)"
    if (l ~ /link: [0-9]+ annotated/) return "link: profile lookup + fit + codegen (first kernel)"
    if (l ~ /running "cc" .*nvidia-h200\.c/) return "link: cc rational program (+ fit of the next kernel)"
    if (l ~ /running .*nvcc.* "main\.o"/) return "link: nvcc final link (+ runtime)"
    return "other klaraptor-cc work"
  }
  { t = $1; sub(/^[^ ]+ /, ""); line = $0
    if (have) { sum[c] += t - prev; if (!(c in seen)) { seen[c] = 1; order[++n] = c } }
    if (line ~ /klaraptor-cc: exit/) { have = 0 } else { have = 1; prev = t; c = cat(line) }
  }
  END { for (i = 1; i <= n; i++) printf "%s\t%.3f\n", order[i], sum[order[i]] }
' "$work/stamps.log" > "$work/breakdown.tsv"

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
nvcc_v=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p')
mkdir -p "$(dirname "$out_md")"
{
  cat <<EOF
# Rebuild cost of klaraptor-cc ($date)

\`make\` of samples/matmul (3 translation units, 2 annotated kernels, then the link) from
clean, with plain nvcc and with klaraptor-cc (\`make NVCC=klaraptor-cc\`) when the profile
database (samples/klaraptor-profiles, found by walking up) holds a valid entry for both
kernels: nothing is profiled; each annotated unit is instrumented and the link fits and
generates both rational programs. $runs runs each, interleaved, after one untimed build of
each. Target: at most 1.5 times plain nvcc. Command: \`bench/rebuild/run.sh\`.

Machine: $cpu, $(nproc) CPUs, $os ($(uname -r)); nvcc $nvcc_v; klaraptor-cc release build
of $rev. \`make\` runs one command at a time. Load average $load_before before, $load_after after
(the machine is shared with other builds).

| build | runs (s) | median (s) |
| --- | --- | ---: |
| plain nvcc | $(list "$work/nvcc.times") | $m_nvcc |
| klaraptor-cc, valid profiles | $(list "$work/kcc.times") | $m_kcc |

Ratio of medians: **${ratio}x** (target ≤ 1.5x: **$verdict**).

## Where klaraptor-cc's time goes

One more build with \`--kl-verbose\` ($verbose_total s in all, timestamps add a little), every
line klaraptor-cc writes timestamped; a step lasts until the next line of the same command.

| step (all three units and the link) | seconds |
| --- | ---: |
EOF
  sort -t$'\t' -k2 -rn "$work/breakdown.tsv" | awk -F'\t' '{ printf "| %s | %s |\n", $1, $2 }'
  echo
  echo "Per command (klaraptor-cc --kl-verbose lines, seconds from the start of make):"
  echo
  echo '```'
  awk -v s="$t0" '{ t = $1; sub(/^[^ ]+ /, ""); printf "%7.3f  %s\n", t - s, substr($0, 1, 150) }' "$work/stamps.log"
  echo '```'
} > "$out_md"
echo "rebuild of samples/matmul: nvcc median $m_nvcc s, klaraptor-cc median $m_kcc s, ratio ${ratio}x (target <= 1.5x: $verdict)"
echo "largest steps of klaraptor-cc:"
sort -t$'\t' -k2 -rn "$work/breakdown.tsv" | head -4 | awk -F'\t' '{ printf "  %-60s %s s\n", $1, $2 }'
echo "written: $out_md"

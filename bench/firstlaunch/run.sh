#!/usr/bin/env bash
# The first-launch cost of each launch key (issue 41: at most 50 us a key), end to end: the
# firstlaunch program (firstlaunch.cu) built by plain nvcc and by klaraptor-cc, run on a GPU.
#
#   bench/firstlaunch/run.sh build [klaraptor-cc]   here: builds .dev/firstlaunch/{plain,kl}
#                                                   (klaraptor-cc default target/release;
#                                                   the committed H200 profiles give saxpy its
#                                                   rational program, no GPU needed)
#   bench/firstlaunch/run.sh device <out dir>       on the GPU machine, from the repository
#                                                   root with .dev/firstlaunch carried: RUNS
#                                                   runs (default 7) of each build and mode,
#                                                   modules loaded eagerly (CUDA_MODULE_LOADING
#                                                   =EAGER) so that loading is in no figure,
#                                                   then summary.txt (each run's stdout in
#                                                   <mode>.<run>.txt, its stderr in .err)
#   bench/firstlaunch/run.sh cpu <out dir>          here, no GPU: cpu.c, the runtime's host
#                                                   side of the same launches on the fake CUDA
#                                                   runtime of the shim's tests, with saxpy's
#                                                   rational program of `build` (run it first),
#                                                   built with and without the warm-up at load
#                                                   (klaraptor_rt.c: warm_up), RUNS processes
#                                                   (default 200) of each build and mode, then
#                                                   summary.txt; BASE=<commit> adds that
#                                                   commit's runtime as a third build
# Modes of the klaraptor build: shipped (refinement on, an empty choices cache each run),
# model (KLARAPTOR_REFINE=off, no cache), own (KLARAPTOR_DISABLE=1); none of them logs (one
# more shipped run writes shipped.log, untimed); dir: shipped with the cache's
# directory there and empty (a program's run after one that decided nothing; since the
# directory is made by the cache's first write, shipped's first key only looks for it).
#
# On the CPU (2-core x86-64 VM, AMD EPYC, no GPU, shared and loaded: its file system's
# numbers vary by 2x between sessions), `cpu` with BASE, 200 processes, medians, before ->
# after issue 41's cuts of the setup after a key's first launch (klaraptor_launch_end):
#   shipped  after: first key 142.0 -> 123.3 us, later keys 24.3 -> 4.4 us
#            before: first key 25.0 -> 27.2 us, later keys 9.2 -> 11.1 us
#   dir      after: first key 48.9 -> 33.0 us, later keys 20.4 -> 9.1 us
#            before: first key 41.2 -> 43.6 us, later keys 14.8 -> 17.3 us
# What is left of shipped's first key (probe build): the cache's directory made, 30-110 us
# (setup_writable), the process's first libm call, log() in the model's profiled_best, ~10-17
# us of page faults (setup_profiled), the candidates' memory, ~5 us (setup_model); dir's later
# keys: the progress file looked for (an open, ~5 us); before the launch, the choice file
# looked for is dir's ~6 us over shipped's. The decision now ranks the 32 shapes
# for refinement (rank, instead of select's one): +1 to +2 us before the launch. The probe
# build prints the setup's steps after the launch's (launched, setup_model, setup_profiled,
# setup_progress, setup_writable, setup_end).
#
# BUILD=<name> builds into (and runs from) .dev/firstlaunch-<name> instead, for a variant of
# the runtime: klaraptor-cc embeds the runtime that cargo built, with CFLAGS (the cc crate's)
# -DKLARAPTOR_NO_WARMUP (the runtime without the warm-up at load: the baseline) or
# -DKLARAPTOR_PROBE (each step of the first launches timed: "probe <step> <us>" lines on
# stderr, whose medians summary.txt adds), in a target directory of its own, e.g.
#
#   CFLAGS=-DKLARAPTOR_PROBE cargo build --release --target-dir target/probe
#   BUILD=probe bench/firstlaunch/run.sh build target/probe/release/klaraptor-cc
#   BUILD=probe RUNS=5 bench/firstlaunch/run.sh device <out dir>   (.dev/firstlaunch-probe)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dev=$repo/.dev/firstlaunch${BUILD:+-$BUILD}
case "${1:-}" in
build)
  kcc=${2:-$repo/target/release/klaraptor-cc}
  case $kcc in /*) ;; *) kcc=$PWD/$kcc ;; esac
  nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
  arch=(-gencode arch=compute_90,code=sm_90)
  rm -rf "$dev" && mkdir -p "$dev/plain" "$dev/kl"
  for d in plain kl; do
    cp "$repo/samples/matmul/saxpy.cu" "$dev/$d/"
    cp "$repo/samples/matmul/kernels.h" "$dev/$d/"
    sed 's#../../samples/matmul/kernels.h#kernels.h#' "$repo/bench/firstlaunch/firstlaunch.cu" >"$dev/$d/firstlaunch.cu"
  done
  (cd "$dev/plain" && "$nvcc" -O2 "${arch[@]}" firstlaunch.cu saxpy.cu -o firstlaunch)
  (cd "$dev/kl" && KLARAPTOR_NVCC=$nvcc KLARAPTOR_PROFILE_DB=$repo/samples/klaraptor-profiles \
    "$kcc" -O2 "${arch[@]}" firstlaunch.cu saxpy.cu -o firstlaunch --kl-verbose 2>&1 | tail -5)
  ls -l "$dev"/*/firstlaunch
  ;;
device)
  out=${2:?out dir}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  export CUDA_MODULE_LOADING=EAGER
  runs=${RUNS:-7}
  for r in $(seq "$runs"); do
    "$dev/plain/firstlaunch" 16 >"$out/plain.$r.txt" 2>"$out/plain.$r.err"
    rm -rf "$out/cache"
    KLARAPTOR_CHOICES=$out/cache "$dev/kl/firstlaunch" 16 >"$out/shipped.$r.txt" 2>"$out/shipped.$r.err"
    rm -rf "$out/cache" && mkdir "$out/cache"
    KLARAPTOR_CHOICES=$out/cache "$dev/kl/firstlaunch" 16 >"$out/dir.$r.txt" 2>"$out/dir.$r.err"
    KLARAPTOR_REFINE=off KLARAPTOR_CHOICES=off "$dev/kl/firstlaunch" 16 >"$out/model.$r.txt" 2>"$out/model.$r.err"
    KLARAPTOR_DISABLE=1 "$dev/kl/firstlaunch" 16 >"$out/own.$r.txt" 2>"$out/own.$r.err"
  done
  # One more shipped run with the log (not timed: writing the log is not what users pay).
  rm -rf "$out/cache"
  KLARAPTOR_CHOICES=$out/cache KLARAPTOR_LOG=$out/shipped.log "$dev/kl/firstlaunch" 16 >/dev/null
  # Medians over the runs: the first key's first launch, the later keys' first launches (per
  # key, then the median of those), the second launches; props_us and driver_name_us.
  python3 - "$out" "$runs" <<'PY' | tee "$out/summary.txt"
import sys, statistics as st
out, runs = sys.argv[1], int(sys.argv[2])
def read(mode, r):
    first, second, extra = [], [], {}
    for line in open(f"{out}/{mode}.{r}.txt"):
        w = line.split()
        if w[0] == "first": first.append(float(w[2]))
        elif w[0] == "second": second.append(float(w[2]))
        else: extra[w[0]] = float(w[1])
    return first, second, extra
rows, totals, second1 = {}, {}, {}
for mode in ["plain", "shipped", "dir", "model", "own"]:
    f0, fk, s, props, drv, tot, s1 = [], [], [], [], [], [], []
    for r in range(1, runs + 1):
        first, second, extra = read(mode, r)
        f0.append(first[0]); fk.append(st.median(first[1:])); s.append(st.median(second))
        props.append(extra.get("props_us", -1)); drv.append(extra.get("driver_name_us", -1))
        tot.append(sum(first) + sum(second)); s1.append(second[0])
    rows[mode] = (st.median(f0), st.median(fk), st.median(s), st.median(props), st.median(drv))
    totals[mode], second1[mode] = st.median(tot), st.median(s1)
print(f"{'mode':8} {'first key us':>13} {'later keys us':>14} {'second launch us':>17} "
      f"{'first key 2nd us':>17} {'all launches us':>16}")
for m, (a, b, c, _, _) in rows.items():
    print(f"{m:8} {a:13.1f} {b:14.1f} {c:17.1f} {second1[m]:17.1f} {totals[m]:16.1f}")
p = rows["plain"]
for m in ["shipped", "dir", "model", "own"]:
    a, b, c, _, _ = rows[m]
    print(f"{m}: first key +{a - p[0]:.1f} us, each later key +{b - p[1]:.1f} us, a memo hit +{c - p[2]:.1f} us, "
          f"the first key's second launch (the process's first timed one) +{second1[m] - second1['plain']:.1f} us, "
          f"all launches of the run +{totals[m] - totals['plain']:.1f} us over plain nvcc")
print(f"cudaGetDeviceProperties: {rows['plain'][3]:.1f} us; cuDeviceGetName: {rows['plain'][4]:.1f} us (medians, {runs} runs)")
# A build with -DKLARAPTOR_PROBE: the first key's first launch step by step (the lines before
# the second "probe entry"), medians over the runs.
for mode in ["shipped", "dir", "model", "own"]:
    steps, order = {}, []
    for r in range(1, runs + 1):
        for line in open(f"{out}/{mode}.{r}.err"):
            w = line.split()
            if len(w) != 3 or w[0] != "probe": continue
            if w[1] == "entry": break
            steps.setdefault(w[1], []).append(float(w[2]))
            if w[1] not in order: order.append(w[1])
    if order:
        print(f"probe, {mode}, the first key's first launch (us since the step before): " +
              ", ".join(f"{s} {st.median(steps[s]):.1f}" for s in order))
PY
  ;;
cpu)
  out=${2:?out dir}
  model=$dev/kl/firstlaunch.klaraptor/saxpy.nvidia-h200.c
  [ -f "$model" ] || { echo "run.sh cpu: no $model: run bench/firstlaunch/run.sh build first" >&2; exit 1; }
  inc=${KLARAPTOR_CUDA_INCLUDE:-$repo/.toolchain/cuda/include}
  cc=${CC:-cc}
  rm -rf "$out/bin" && mkdir -p "$out/bin"
  # cpu-<name>: cpu.c and saxpy's program with the runtime of the shim in $2 (its src/,
  # include/ and tests/fake_cudart.c), compiled as the object klaraptor-cc embeds is
  # (-O2 -fPIC -fvisibility=hidden), linked as nvcc links a program (PIE, -lm -ldl -lpthread).
  build_cpu() {
    local name=$1 shim=$2 o=$out/bin/$1
    shift 2
    mkdir -p "$o"
    local flags=(-std=c11 -O2 -fPIC -I"$shim/include" -I"$shim/src" -I"$inc")
    "$cc" "${flags[@]}" -fvisibility=hidden "$@" -c "$shim/src/klaraptor_rt.c" -o "$o/rt.o"
    "$cc" "${flags[@]}" -fvisibility=hidden -c "$shim/src/klaraptor_prof.c" -o "$o/prof.o"
    "$cc" "${flags[@]}" -c "$shim/tests/fake_cudart.c" -o "$o/fake.o"
    "$cc" -O2 -fPIC -I"$shim/include" -c "$model" -o "$o/model.o"
    "$cc" "${flags[@]}" -Wall -Wextra -c "$repo/bench/firstlaunch/cpu.c" -o "$o/cpu.o"
    "$cc" -pie "$o/cpu.o" "$o/model.o" "$o/rt.o" "$o/prof.o" "$o/fake.o" -lm -ldl -lpthread \
      -o "$out/bin/cpu-$name"
  }
  builds=(warm nowarm)
  build_cpu warm "$repo/runtime-shim"
  build_cpu nowarm "$repo/runtime-shim" -DKLARAPTOR_NO_WARMUP
  build_cpu warm-probe "$repo/runtime-shim" -DKLARAPTOR_PROBE
  build_cpu nowarm-probe "$repo/runtime-shim" -DKLARAPTOR_NO_WARMUP -DKLARAPTOR_PROBE
  if [ -n "${BASE:-}" ]; then
    mkdir -p "$out/bin/base-src"
    git -C "$repo" archive "$BASE" runtime-shim | tar -x -C "$out/bin/base-src"
    build_cpu base "$out/bin/base-src/runtime-shim"
    build_cpu base-probe "$out/bin/base-src/runtime-shim" -DKLARAPTOR_PROBE
    builds+=(base)
    git -C "$repo" rev-parse "$BASE" >"$out/base-commit.txt"
  fi
  git -C "$repo" rev-parse HEAD >"$out/commit.txt"
  { uname -srm; grep -m1 "model name" /proc/cpuinfo; "$cc" --version | head -1; } >"$out/machine.txt"
  python3 - "$out" "${RUNS:-200}" "${PROBE_RUNS:-50}" "${builds[@]}" <<'PY' | tee "$out/summary.txt"
import os, shutil, statistics as st, subprocess, sys
out, runs, probe_runs, builds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
modes = {"shipped": {"KLARAPTOR_CHOICES": f"{out}/cache"},
         "dir": {"KLARAPTOR_CHOICES": f"{out}/cache"},
         "model": {"KLARAPTOR_REFINE": "off", "KLARAPTOR_CHOICES": "off"},
         "own": {"KLARAPTOR_DISABLE": "1"}}
def run(exe, mode):
    shutil.rmtree(f"{out}/cache", ignore_errors=True)
    if mode == "dir": os.mkdir(f"{out}/cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLARAPTOR_")}
    env.update(modes[mode])
    p = subprocess.run([f"{out}/bin/cpu-{exe}", "4"], env=env, capture_output=True, text=True,
                       check=True)
    return p.stdout, p.stderr
# Fresh processes, the builds and modes interleaved; per run: the first key's first launch
# (before it is handed on, and klaraptor_launch_end after it), the median over the later
# keys' first launches, the median memo hit.
cols = ["first_before_us", "first_end_us", "later_before_us", "later_end_us", "hit_us",
        "register_us"]
res = {}
with open(f"{out}/runs.tsv", "w") as raw:
    raw.write("build\tmode\trun\t" + "\t".join(cols) + "\n")
    for r in range(runs):
        for b in builds:
            for m in modes:
                lines = [l.split() for l in run(b, m)[0].splitlines()]
                first = [l for l in lines if l[0] == "first"]
                second = [l for l in lines if l[0] == "second"]
                v = [float(first[0][2]), float(first[0][3]),
                     st.median(float(l[2]) for l in first[1:]),
                     st.median(float(l[3]) for l in first[1:]),
                     st.median(float(l[2]) for l in second),
                     float(next(l[1] for l in lines if l[0] == "register"))]
                res.setdefault((b, m), []).append(v)
                raw.write(f"{b}\t{m}\t{r}\t" + "\t".join(f"{x:.2f}" for x in v) + "\n")
print(f"the fake CUDA runtime on this CPU, {runs} processes per build and mode, medians (us)")
print(f"{'build':8} {'mode':8} {'first key: before':>18} {'after (end)':>12} "
      f"{'later keys: before':>19} {'after':>6} {'memo hit':>9} {'registration':>13}")
med = {}
for (b, m), vs in res.items():
    med[(b, m)] = [st.median(v[i] for v in vs) for i in range(len(cols))]
    a = med[(b, m)]
    print(f"{b:8} {m:8} {a[0]:18.1f} {a[1]:12.1f} {a[2]:19.1f} {a[3]:6.1f} {a[4]:9.2f} "
          f"{a[5]:13.1f}")
for ref in [b for b in builds if b != "warm"]:
    for m in modes:
        print(f"{m}: the first key before its launch {med[(ref, m)][0]:.1f} us ({ref}) -> "
              f"{med[('warm', m)][0]:.1f} us (warm)")
# The first key's first launch step by step (klaraptor_rt.c's PROBE), shipped, medians.
for b in builds:
    steps, order = {}, []
    for r in range(probe_runs):
        for line in run(f"{b}-probe", "shipped")[1].splitlines():
            w = line.split()
            if len(w) != 3 or w[0] != "probe": continue
            if w[1] == "entry": break
            steps.setdefault(w[1], []).append(float(w[2]))
            if w[1] not in order: order.append(w[1])
    print(f"probe, {b}, shipped, the first key's first launch ({probe_runs} runs; us since the "
          "step before): " + ", ".join(f"{s} {st.median(steps[s]):.1f}" for s in order))
PY
  ;;
*) echo "usage: bench/firstlaunch/run.sh build [klaraptor-cc] | device <out dir> | cpu <out dir>" >&2; exit 2 ;;
esac

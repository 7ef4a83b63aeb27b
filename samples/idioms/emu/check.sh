#!/usr/bin/env bash
# Builds each idioms sample against the fiber-based CPU emulation (cuda_emu.h) and runs it at
# small sizes, with the program's own block and with others (KL_BLOCK, which every program
# reads), so the kernels' index logic, barriers and CPU references can be checked without a
# GPU. Not a substitute for running the programs on a GPU.
# Usage: samples/idioms/emu/check.sh [program...]   (default: every program)
# Needs clang++-19 (or $CXX) and perl. Builds into ${EMU_BUILD:-/tmp/kl-idioms-emu}.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
CXX=${CXX:-clang++-19}
build=${EMU_BUILD:-/tmp/kl-idioms-emu}
mkdir -p "$build"
progs=("$@")
[ ${#progs[@]} -eq 0 ] && progs=($(sed -n 's/^PROGRAMS *:= *//p' "$root/Makefile"))
fail=0
# k<<<...>>> and k<T, 3><<<...>>> (a template instantiation) become a call of the emulator;
# `extern __shared__ T name[];` (dynamic shared memory) a pointer to the emulator's region.
rewrite() {
  perl -pe 's/\b(\w+(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>/kl_emu::launch($1, $2)/g;
            s/\bextern\s+__shared__\s+([^;\[\]=]*?)\s*\b(\w+)\s*\[\s*\]\s*;/$1 *const $2 = kl_emu::DynamicShared{};/g' "$1"
}
for p in "${progs[@]}"; do
  dir="$root/$p"
  args_file="$dir/emu.args"
  [ -f "$args_file" ] || { echo "FAIL $p: no $args_file"; fail=1; continue; }
  src="$build/$p.cpp"
  : > "$src"
  for f in "$dir"/*.cu; do
    echo "#line 1 \"$f\"" >> "$src"
    rewrite "$f" >> "$src"
  done
  # The program's own headers (a kernel template, say), rewritten the same way, found first.
  inc="$build/$p.include"
  rm -rf "$inc" && mkdir -p "$inc"
  for f in "$dir"/*.cuh "$dir"/*.h; do
    [ -f "$f" ] || continue
    { echo "#line 1 \"$f\""; rewrite "$f"; } > "$inc/$(basename "$f")"
  done
  if ! $CXX -std=c++17 -O2 -Wall -Wextra -Wno-unknown-pragmas -DKL_CPU_EMULATION \
      -include "$here/cuda_emu.h" -I"$inc" -I"$dir" -I"$root/../polybench/common" -I"$root/common" "$src" \
      -o "$build/$p" 2> "$build/$p.log"; then
    echo "FAIL $p: emulation build (see $build/$p.log)"; fail=1; continue
  fi
  [ -s "$build/$p.log" ] && { echo "WARN $p: compiler warnings:"; cat "$build/$p.log"; }
  while read -r blk args; do
    [ -z "$blk" ] && continue
    case "$blk" in \#*) continue ;; esac
    if [ "$blk" = "-" ]; then envs=(); else envs=(KL_BLOCK="$blk"); fi
    out=$(env "${envs[@]}" "$build/$p" $args 2>&1); rc=$?
    last=$(printf '%s\n' "$out" | tail -1)
    if [ $rc -eq 0 ] && [ "$last" = PASS ]; then
      echo "ok   $p $args (block ${blk})"
    else
      echo "FAIL $p $args (block ${blk}), exit $rc:"; printf '%s\n' "$out" | sed 's/^/    /'; fail=1
    fi
    printf '%s\n' "$out" | grep -v '^PASS$' | sed 's/^/     /'
  done < "$args_file"
done
exit $fail

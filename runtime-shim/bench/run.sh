#!/bin/sh
# Builds and runs the memo-hit benchmark of the runtime shim (no GPU, no CUDA headers needed).
#   runtime-shim/bench/run.sh [calls-per-thread]
# CC (default cc) and CFLAGS (default -O2) are honoured.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
shim=$(dirname "$here")
out=${TMPDIR:-/tmp}/klaraptor-bench-rt.$$
trap 'rm -f "$out"' EXIT
${CC:-cc} -std=c11 ${CFLAGS:--O2} -Wall -Wextra -DKLARAPTOR_NO_CUDART \
  -I"$shim/include" -I"$shim/src" \
  "$shim/src/klaraptor_rt.c" "$here/bench_rt.c" -lpthread -o "$out"
"$out" "$@"

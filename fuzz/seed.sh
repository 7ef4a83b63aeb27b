#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ (not tracked) with seed inputs from the project's own files:
# the samples' CUDA sources and klaraptor.toml files for `pragma`, the formulas of
# fuzz/seeds/expr/ for `expr`, and entries of the committed profile database for
# `profile_entry`. Run it from fuzz/ before `cargo fuzz run`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
mkdir -p corpus/pragma corpus/expr corpus/profile_entry corpus/entry_strings
for f in ../samples/polybench/*/*.cu ../samples/matmul/*.cu ../samples/reduce/*.cu; do
  cp "$f" "corpus/pragma/$(basename "$(dirname "$f")")-$(basename "$f")"
done
for f in ../samples/polybench/*/klaraptor.toml; do
  cp "$f" "corpus/pragma/$(basename "$(dirname "$f")")-klaraptor.toml"
done
cp seeds/expr/* corpus/expr/
# Two small entries: a 1-D kernel with a constraint (saxpy) and a 1-D matrix-vector kernel.
for k in _Z5saxpyfPKfPfi _Z6mvt_x1PKfS0_Pfi; do
  for f in ../samples/klaraptor-profiles/v1/*/"$k"-*.toml; do
    cp "$f" "corpus/profile_entry/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
done
# entry_strings: a field index, then text that would leave a C comment or literal or a path.
i=0
for t in '*/ int pwned = 1; /*' $'\n#error injected\n' '"; int pwned; "' '\\' '/../../tmp/x' '??/'; do
  printf '%b%s' "\\$(printf '%03o' $((i * 37 % 256)))" "$t" >"corpus/entry_strings/seed-$i"
  i=$((i + 1))
done
echo "seeded: $(ls corpus/pragma | wc -l) pragma, $(ls corpus/expr | wc -l) expr, $(ls corpus/profile_entry | wc -l) profile_entry, $(ls corpus/entry_strings | wc -l) entry_strings inputs"

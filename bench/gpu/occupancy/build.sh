#!/usr/bin/env bash
# Builds, on the build machine, everything run.sh uses on the GPU machine, into .dev/model/
# (git-ignored; carry it): the two CUDA programs (sm_90) and the release builds of the
# klaraptor-model examples device_toml and occupancy_replay. Run from the repository root.
set -euo pipefail
root=$(pwd)
[ -f bench/gpu/occupancy/sweep.cu ] || { echo "build.sh: run from the repository root" >&2; exit 1; }
nvcc=${NVCC:-$root/.toolchain/cuda/bin/nvcc}
dest=$root/.dev/model
mkdir -p "$dest"
"$nvcc" -O2 -arch=sm_90 bench/gpu/occupancy/device_query.cu -o "$dest/device_query"
"$nvcc" -O2 -arch=sm_90 bench/gpu/occupancy/sweep.cu -o "$dest/occupancy_sweep"
target=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -p klaraptor-model --example device_toml --example occupancy_replay
cp "$target/release/examples/device_toml" "$target/release/examples/occupancy_replay" "$dest/"
ls -l "$dest"

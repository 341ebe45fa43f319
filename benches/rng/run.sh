#!/usr/bin/env bash
# RNG benchmark (issue 13), on the GPU machine, from the repository root:
#   bash benches/rng/run.sh     (needs .gpu/libsluice.so, include/sluice.h, nvcc, cuRAND)
# Prints the table of benches/rng/rng_bench.cu; exit 1 when the build or run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-/tmp/sluice-rng-build}
mkdir -p "$BUILD"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
nvcc -O3 -std=c++17 -arch="sm_${cap:-90}" benches/rng/rng_bench.cu -I include -L .gpu -lsluice \
  -lcurand -Xlinker -rpath="$PWD/.gpu" -o "$BUILD/rng_bench" || exit 1
SLUICE_BACKEND=cuda "$BUILD/rng_bench"

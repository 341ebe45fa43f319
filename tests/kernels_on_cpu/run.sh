#!/usr/bin/env bash
# Builds and runs the CPU checks of kernels/rng.cu (see rng_quad.cpp).
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-../../target/kernels_on_cpu}
mkdir -p "$out"
g++ -std=c++17 -O1 -Wall -Wno-unknown-pragmas -include cuda_stub.h -I ../../include -x c++ \
  rng_quad.cpp -o "$out/rng_quad"
"$out/rng_quad"

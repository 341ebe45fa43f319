#!/usr/bin/env bash
# Measures sluice's own per-call cost on this machine against the stand-in driver
# in tools/mockcuda (no GPU needed). Extra arguments go to examples/opcost.rs
# (a row filter), or with EXAMPLE=prefetch_cost to that example (producers).
# PROFILE=1 records the run with perf. MOCKCUDA_* variables: tools/mockcuda.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=target/mockcuda
mkdir -p "$lib"
cc -O2 -shared -fPIC -Wall -o "$lib/libcuda.so.1" tools/mockcuda/mockcuda.c
ln -sf libcuda.so.1 "$lib/libcuda.so"
if [[ -n "${PROFILE:-}" ]]; then export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only; fi
example=${EXAMPLE:-opcost}
cargo build --release --example "$example" -q
bin=target/release/examples/$example
export LD_LIBRARY_PATH="$PWD/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SLUICE_BACKEND=cuda
if [[ -n "${PROFILE:-}" ]]; then
  perf record -g -o "target/$example.perf" "$bin" "$@"
  perf report -i "target/$example.perf" --no-children --percent-limit 1.5 --stdio | head -120
else
  "$bin" "$@"
fi

#!/usr/bin/env bash
# Miri over the unit tests of the core's unsafe and lock-free pieces: the epoch and
# the handle tables, the inline vectors, the op lock, the prefetcher's signal and
# streaming stores, the trace buffers, the download pool and the sync object layout.
# Miri checks every access against Rust's aliasing and memory model and explores
# thread interleavings (its scheduler preempts at random: several seeds). Then the op
# path through the C ABI (four small integration tests); the rest of the crate calls
# the driver, or runs the host backend at a scale Miri cannot. Needs nightly with the
# miri component:
#   rustup toolchain install nightly --component miri,rust-src
#   bash scripts/miri.sh                 # MIRI_SEEDS (default 2) seeds
set -euo pipefail
cd "$(dirname "$0")/.."
toolchain=${MIRI_TOOLCHAIN:-nightly}
modules=(epoch:: handle:: inline:: objlock:: prefetch::signal prefetch::stream_store
  trace::buf rng::download::pool sync::layout)
for seed in $(seq 1 "${MIRI_SEEDS:-2}"); do
  echo "== seed $seed: the units"
  MIRIFLAGS="-Zmiri-seed=$seed ${MIRIFLAGS:-}" cargo "+$toolchain" miri test -q --lib -- "${modules[@]}"
done
# The op path through the C ABI on the host backend (its stream workers are threads
# Miri runs): foreign op pairs, op handle reuse across threads, the reader slots,
# objects and streams destroyed under open ops, the review's gaps (captures, frees).
# Handles carry pointers as integers, hence permissive provenance.
echo "== the op path: tests/op_allocs.rs, slot_path.rs, op_lifetime.rs, gaps.rs"
SLUICE_BACKEND=host MIRIFLAGS="-Zmiri-env-forward=SLUICE_BACKEND -Zmiri-permissive-provenance ${MIRIFLAGS:-}" \
  cargo "+$toolchain" miri test -q --test op_allocs --test slot_path --test op_lifetime --test gaps
echo "miri: no undefined behaviour found"

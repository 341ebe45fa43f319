#!/usr/bin/env bash
# Measures sluice's own per-call cost on this machine against the stand-in driver
# in tools/mockcuda (no GPU needed). Extra arguments go to examples/opcost.rs
# (a row filter), or with EXAMPLE=prefetch_cost to that example (producers).
# PROFILE=1 records the run with perf. CALLGRIND=1 counts the instructions of one
# opcost loop (OPCOST_LOOP, default pair: the 1-read foreign op pair; pair4: 4 reads;
# copy, memset: 256 bytes on one stream; event: an event record and its destroy; ping:
# the ping-pong chain's launches, 1 read, 1 write, 1 wait) per call of
# sluice_op_begin and sluice_op_end, or of each exported sluice function it calls.
# CACHESIM=1 counts the same loop's L1 data misses per iteration in callgrind's cache
# model, each driver call of the stand-in touching MOCKCUDA_TOUCH_KB (default 64) KiB
# as a real driver call evicts its caller's lines, and lists the instructions that
# miss most (tools/cachemiss.py).
# MOCKCUDA_* variables: tools/mockcuda.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=target/mockcuda
mkdir -p "$lib"
cc -O2 -shared -fPIC -Wall -o "$lib/libcuda.so.1" tools/mockcuda/mockcuda.c
ln -sf libcuda.so.1 "$lib/libcuda.so"
if [[ -n "${PROFILE:-}${CACHESIM:-}" ]]; then export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only; fi
example=${EXAMPLE:-opcost}
cargo build --release --example "$example" -q
bin=target/release/examples/$example
export LD_LIBRARY_PATH="$PWD/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SLUICE_BACKEND=cuda
if [[ -n "${CALLGRIND:-}" ]]; then
  n=${OPCOST_N:-100000}
  OPCOST_LOOP=${OPCOST_LOOP:-pair} OPCOST_N=$n valgrind --tool=callgrind \
    --callgrind-out-file="target/$example.callgrind" "$bin" > /dev/null 2> "target/$example.callgrind.log"
  # Inclusive instructions of each exported sluice_* function, per loop iteration.
  callgrind_annotate --inclusive=yes "target/$example.callgrind" 2> /dev/null |
    awk -v n="$n" '/:sluice_[a-z_]+ \[/ { v = $1; gsub(",", "", v); sub(/.*:/, "", $0); sub(/ .*/, "", $0)
      printf "%-28s %8.0f instructions per iteration\n", $0, v / n }'
elif [[ -n "${CACHESIM:-}" ]]; then
  n=${OPCOST_N:-20000}
  MOCKCUDA_TOUCH_KB=${MOCKCUDA_TOUCH_KB:-64} OPCOST_LOOP=${OPCOST_LOOP:-pair} OPCOST_N=$n \
    valgrind --tool=callgrind --cache-sim=yes --dump-instr=yes --compress-pos=no \
    --compress-strings=no --callgrind-out-file="target/$example.cachesim" "$bin" \
    > /dev/null 2> "target/$example.cachesim.log"
  python3 tools/cachemiss.py "target/$example.cachesim" "$bin" "$n"
elif [[ -n "${PROFILE:-}" ]]; then
  perf record -g -o "target/$example.perf" "$bin" "$@"
  perf report -i "target/$example.perf" --no-children --percent-limit 1.5 --stdio | head -120
else
  "$bin" "$@"
fi

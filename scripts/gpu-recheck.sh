#!/usr/bin/env bash
# A short GPU re-check of run 65's failures (docs/gpu-runs.md), carry .gpu built by
# `SLUICE_GPU_PARTS="rust c go" scripts/gpu-suite.sh build` plus .gpu/diag/:
#   - the Rust suites that failed or changed (graphs, gaps, fuzz_abi, rng_ops, engine);
#   - the C suite; the Go binding's allocation, launch and DLPack tests;
#   - the interop tests with 16 threads, built with line tables (.gpu/diag/interop_*),
#     for the probing build and the cuFuncGetParamCount build: a run still going
#     after 10 s is called hung and its threads' stacks are dumped (gdb, when there).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu-suite.sh unpack
out=${OUT:-/tmp/sluice-recheck}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.gpu" SLUICE_BACKEND=cuda
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"

interop() { # interop BINARY NAME
  "$1" --test-threads=16 > "$out/interop-$2.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    note "interop $2 (16 threads): HUNG after 10 s; $(grep -c ' \.\.\. ok' "$out/interop-$2.log") tests done"
    command -v gdb > /dev/null \
      && timeout 20 gdb -p "$pid" -batch -ex "thread apply all bt 16" > "$out/stacks-$2.txt" 2>&1
    kill -9 "$pid"
  else
    wait "$pid"
    note "interop $2 (16 threads): rc=$? $(grep -E '^test result' "$out/interop-$2.log")"
  fi
}

for t in graphs gaps fuzz_abi rng_ops engine; do
  timeout 60 ".gpu/rust/$t" > "$out/rust-$t.log" 2>&1
  note "rust $t (cuda): rc=$? $(grep -E '^test result' "$out/rust-$t.log")"
done
for b in .gpu/diag/interop_*; do interop "$b" "$(basename "$b")-1"; done
[ -x .gpu/diag/interop_probe ] && interop .gpu/diag/interop_probe interop_probe-2
timeout 90 .gpu/c/sluice_c_tests > "$out/c.log" 2>&1
note "c sluice_c_tests (cuda): rc=$? $(grep -E 'passed, [0-9]+ failed' "$out/c.log")"
if [ -x .gpu/go/sluice-go.test ]; then
  (cd .gpu/go && timeout 60 ./sluice-go.test -test.run 'Alloc|Launch|DLPack|Wrap' -test.v \
    -test.count=1 > "$out/go.log" 2>&1)
  note "go alloc/launch/dlpack tests (cuda): rc=$? $(grep -c -- '--- PASS' "$out/go.log") PASS," \
    "$(grep -c -- '--- FAIL' "$out/go.log") FAIL"
fi
echo "==== summary"
cat "$summary"

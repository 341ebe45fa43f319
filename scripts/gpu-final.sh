#!/usr/bin/env bash
# A short GPU call after scripts/gpu-suite.sh (same .gpu carry): the trace test's
# output, the prefetch benchmark (C and PyTorch), the Go prefetch benchmark twice,
# compute-sanitizer on the engine and prefetcher tests, libtorch interop, then
# ping-pong A/B runs against .gpu/base. Lines go to stdout and $OUT/final.txt.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu
OUT=${OUT:-/tmp}
say() { echo "$*" | tee -a "$OUT/final.txt"; }
SLUICE_BACKEND=cuda timeout 60 .gpu/rust/trace --test-threads=1 > "$OUT/trace-test.log" 2>&1
say "rust trace: rc=$? $(grep 'test result' "$OUT/trace-test.log")"
OUT=$OUT timeout 200 bash benches/prefetch/run.sh > "$OUT/prefetch.md" 2>&1
say "prefetch bench rc=$? $(grep -c PASS "$OUT/prefetch.md") PASS $(grep -c FAIL "$OUT/prefetch.md") FAIL"
for i in 1 2; do
  (cd .gpu/go && SLUICE_BACKEND=cuda timeout 60 ./prefetchbench -ptx ../kernels/test_kernels.ptx) > "$OUT/gopf-$i.txt" 2>&1
  say "go prefetch $i: $(grep -oE 'go_eff_[0-9.x]+=[0-9.]+' "$OUT/gopf-$i.txt" | tr '\n' ' ')"
done
for run in "racecheck engine" "synccheck engine" "racecheck prefetch"; do
  set -- $run
  SLUICE_TEST_QUICK=1 SLUICE_BACKEND=cuda timeout 80 compute-sanitizer --tool "$1" --error-exitcode 99 \
    ".gpu/rust/$2" --test-threads=1 > /tmp/san.log 2>&1
  say "compute-sanitizer $1 $2: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | tail -1) $(grep 'test result' /tmp/san.log)"
done
timeout 150 bash scripts/gpu-torch.sh > "$OUT/torch.log" 2>&1
say "torch interop: rc=$? $(tail -1 "$OUT/torch.log")"
for i in 1 2 3; do
  for v in cur base; do
    b=.gpu/overhead; [ $v = base ] && b=.gpu/base/overhead
    SLUICE_BENCH_ONLY=ping-pong timeout 60 $b > /tmp/pp.md 2>&1
    say "ping-pong $v $i: $(grep -E '^\| \((a|b)\)' /tmp/pp.md | awk -F'|' '{printf "%s ", $3}') (a)/(b) $(grep -E '^\| \(a\)' /tmp/pp.md | awk -F'|' '{print $5}')"
  done
done

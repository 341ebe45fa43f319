#!/usr/bin/env bash
# ThreadSanitizer over the host backend: every Rust test binary but the soak (whose
# RSS check cannot hold under TSan's shadow memory), then the C suite and the C stress
# test linked against a TSan build of libsluice.a, each run failing on any report. Needs the
# nightly toolchain with rust-src (std is rebuilt instrumented, -Zbuild-std):
#   rustup toolchain install nightly --component rust-src
#   bash scripts/tsan.sh                 # STRESS_RUNS (default 30) stress runs
# Output under target/tsan/ (the logs in target/tsan/logs/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
triple=x86_64-unknown-linux-gnu
toolchain=${TSAN_TOOLCHAIN:-nightly}
export CARGO_TARGET_DIR=$root/target/tsan RUSTFLAGS="-Zsanitizer=thread"
export SLUICE_BACKEND=host
logs=$CARGO_TARGET_DIR/logs
mkdir -p "$logs"
fail=0

# checked NAME TSAN_OPTIONS TIMEOUT CMD...: runs CMD into logs/NAME.log, prints its
# status, report count and result line (or last line), and marks the run failed on either.
checked() {
  local name=$1 opts=$2 limit=$3 rc=0 start
  shift 3
  start=$(date +%s)
  TSAN_OPTIONS=$opts timeout "$limit" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  local reports summary
  reports=$(grep -c 'WARNING: ThreadSanitizer' "$logs/$name.log" || true)
  summary=$(grep 'test result' "$logs/$name.log" | tail -1 || true)
  [ -n "$summary" ] || summary=$(tail -1 "$logs/$name.log")
  printf '%-20s rc=%-3s reports=%-3s %4ss %s\n' "$name" "$rc" "$reports" "$(($(date +%s) - start))" "$summary"
  if [ "$rc" != 0 ] || [ "$reports" != 0 ]; then fail=1; fi
}

echo "== Rust tests (debug, std instrumented)"
# allocator_may_return_null: the ABI fuzzer asks for absurd sizes and wants the error.
export TSAN_OPTIONS="allocator_may_return_null=1 second_deadlock_stack=1"
# One build: diagnostics to stderr, the test executables' paths from its JSON.
cargo "+$toolchain" test -q -Zbuild-std --target "$triple" --no-run \
  --message-format=json-render-diagnostics > "$logs/build.json"
mapfile -t bins < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' "$logs/build.json")
[ "${#bins[@]}" -gt 0 ] || { echo "tsan: no test executables were built" >&2; exit 1; }
for entry in "${bins[@]}"; do
  name=${entry%% *} bin=${entry#* }
  [ "$name" = soak ] && continue
  opts=$TSAN_OPTIONS
  # The fuzzer's VM aliases memory on purpose (fuzz/tsan.supp says how).
  [ "$name" = fuzz_abi ] && opts="$opts suppressions=$root/fuzz/tsan.supp"
  checked "$name" "$opts" 1200 "$bin"
done

echo "== a TSan build of libsluice.a"
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  cargo "+$toolchain" build -q -Zbuild-std --target "$triple" -p sluice-cdylib --release
rt=$(rustc "+$toolchain" --print sysroot)/lib/rustlib/$triple/lib/librustc-nightly_rt.tsan.a
out=$CARGO_TARGET_DIR/stress
mkdir -p "$out"
# The C side is instrumented by gcc; the runtime is Rust's (LLVM's), which also has the
# entry points Rust's instrumentation calls (gcc's libtsan lacks __tsan_memcpy).
tsan_cc() { cc -g -O1 -fsanitize=thread -Wall -Wextra -Werror -pthread -I include "$@"; }
tsan_link() {
  local exe=$1
  shift
  cc -o "$exe" "$@" "$CARGO_TARGET_DIR/$triple/release/libsluice.a" \
    -Wl,--whole-archive "$rt" -Wl,--no-whole-archive -lpthread -ldl -lm -lrt -lstdc++
}
tsan_cc -std=gnu11 -c tests/stress/stress.c -o "$out/stress.o"
tsan_link "$out/stress" "$out/stress.o"
cp kernels/test_kernels.ptx "$out/"
c_objs=()
for src in tests/c/main.c tests/c/test_*.c; do
  obj=$out/c-$(basename "${src%.c}").o
  tsan_cc -std=c11 -I tests/c -c "$src" -o "$obj"
  c_objs+=("$obj")
done
tsan_link "$out/sluice_c_tests" "${c_objs[@]}"

echo "== the C suite against the same library"
# A test that runs a child re-executes the binary; allocator_may_return_null: the
# tests ask for absurd sizes and want the error; report_thread_leaks=0: a child that
# exits with a trace open leaves the flush thread unjoined (the exit hook closes the
# file and does not wait for the thread).
SLUICE_TEST_SELF=$out/sluice_c_tests checked c-tests \
  "allocator_may_return_null=1 second_deadlock_stack=1 report_thread_leaks=0" 1200 "$out/sluice_c_tests"

echo "== the stress test"
checked stress "suppressions=$root/tests/stress/tsan.supp second_deadlock_stack=1" 1800 \
  "$out/stress" ops="${STRESS_OPS:-4000}" runs="${STRESS_RUNS:-30}"

if [ "$fail" != 0 ]; then
  echo "tsan: FAILED (reports or failures above; logs in $logs)" >&2
  exit 1
fi
echo "tsan: no reports"

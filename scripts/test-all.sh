#!/usr/bin/env bash
# Every test on a fresh machine: Rust (fmt, clippy, tests on the host backend), the
# header drift check, C under ASan/UBSan and under valgrind, Python (pytest with NumPy), C++ (GoogleTest,
# install, consumers, Python ctypes), Go (vet, gofmt, race). Installs what it needs (cbindgen, graphviz).
set -euo pipefail
cd "$(dirname "$0")/.."
export SLUICE_BACKEND=${SLUICE_BACKEND:-host}
export CARGO_TERM_COLOR=never
step() { printf '\n==== %s\n' "$*"; stages=$((stages + 1)); }
stages=0
t0=$(date +%s)

step "tools"
if ! command -v dot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) || echo "graphviz not installed; DOT files are checked structurally only"
fi

step "header drift (cbindgen 0.29.4)"
scripts/gen-header.sh --verify

step "rust: fmt, clippy"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

step "rust: tests (host backend)"
cargo test

step "library: SONAME libsluice.so.0 (as the CMake install's), the link beside it, its exports"
cargo build --release --quiet --lib
soname=$(readelf -d target/release/libsluice.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME: $soname"
[ "$soname" = libsluice.so.0 ] || { echo "want SONAME libsluice.so.0" >&2; exit 1; }
[ "$(readlink target/release/libsluice.so.0)" = libsluice.so ] \
  || { echo "target/release/libsluice.so.0 is not a link to libsluice.so (cdylib/build.rs makes it)" >&2; exit 1; }
# The .so (cdylib/ links the rlib) exports exactly the header's functions.
exports=$(nm -D --defined-only target/release/libsluice.so | awk '{print $3}' | sort -u)
if ! diff <(grep -oE '\bsluice_[a-z0-9_]+\(' include/sluice.h | tr -d '(' | sort -u) <(echo "$exports"); then
  echo "libsluice.so's exported symbols differ from include/sluice.h's functions (< header, > library)" >&2
  exit 1
fi
echo "exports: $(wc -l <<<"$exports") symbols, the header's functions"

step "kernels on the CPU: the RNG's four-states-per-thread kernels against its per-state ones"
bash tests/kernels_on_cpu/run.sh

step "rust: demo"
cargo run --release --quiet --example pipeline 16 4

step "c: tests under AddressSanitizer + UBSan"
bash tests/c/run.sh

echo "benches/prefetch/fill_bench.c: builds, and its runs check their last batch"
cc -O2 -std=c11 -Wall -Wextra -Werror benches/prefetch/fill_bench.c -I include -L target/release \
  -lsluice -lpthread -Wl,-rpath,"$PWD/target/release" -o target/fill_bench
SLUICE_FILL_N=100 SLUICE_FILL_REPS=1 SLUICE_FILL_PRODUCERS="1 2" target/fill_bench | tail -3
echo "examples/slot_fill.rs: its streamed copies and gathers check their bytes"
SLOT_FILL_RING_MB=128 SLOT_FILL_REPS=1 cargo run --release --quiet --example slot_fill | tail -4

step "c: tests under valgrind memcheck (0 errors; about 20 s here)"
timeout 300 bash scripts/valgrind-c.sh > target/valgrind-c.log 2>&1 \
  || { tail -60 target/valgrind-c.log; exit 1; }
tail -1 target/valgrind-c.log

step "stress: every feature across threads, checked against a serial model"
bash tests/stress/build.sh target/stress/stress
SLUICE_BACKEND=host target/stress/stress ops=2000 runs=3
# The negative control (eager kernels declare no reads) must be caught.
if SLUICE_BACKEND=host target/stress/stress ops=2000 break=1 seed=3 > /dev/null; then
  echo "stress break=1 passed: the model check cannot see a missing read set" >&2
  exit 1
fi

step "python: the package's pytest suite on the host backend, with NumPy"
# A venv under target/ (reused between runs) so that nothing is installed system-wide;
# numpy and pytest come from pip only when the venv lacks them.
PYVENV=target/pyvenv
[ -x "$PYVENV/bin/python" ] || python3 -m venv "$PYVENV"
"$PYVENV/bin/python" -c 'import numpy, pytest' 2>/dev/null \
  || "$PYVENV/bin/pip" install -q --disable-pip-version-check numpy pytest
"$PYVENV/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall ./bindings/python
cargo build --release --quiet --lib
SLUICE_LIBRARY="$PWD/target/release/libsluice.so" "$PYVENV/bin/python" -m pytest -q -p no:cacheprovider \
  bindings/python/tests

if [ -x bindings/cpp/test.sh ]; then
  step "c++: GoogleTest, install, find_package and pkg-config consumers, python ctypes"
  bash bindings/cpp/test.sh
fi

if [ -x bindings/go/test.sh ]; then
  step "go: gofmt, vet, test -race, debug GC tag, trainer example"
  bash bindings/go/test.sh
fi

printf '\n==== done in %s s\n' "$(( $(date +%s) - t0 ))"
# Every stage above exits on failure (set -e), so reaching here means all passed.
echo "stages: $stages passed, 0 failed"

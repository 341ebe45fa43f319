#!/usr/bin/env bash
# CI for the C++ bindings and the packaging, in one go, on the host backend:
#   1. configure + build (cargo via CMake) + ctest
#   2. the same tests under AddressSanitizer + UBSan (SLUICE_TEST_SANITIZE=0 skips)
#   3. cmake --install into a temporary prefix; check its layout and the SONAME
#   4. the consumer against the installed prefix: find_package, CMake +
#      pkg_check_modules, and a plain Makefile with pkg-config
#   5. the consumer with sluice as a subproject: add_subdirectory and FetchContent
#   6. the Python ctypes example against the installed libsluice.so
# Exits non-zero on any failure. Last line: "test.sh: N passed, M failed".
#
# Environment: SLUICE_TEST_BUILD_DIR (default <repo>/build/cpp-ci, kept for
# incremental reruns), SLUICE_TEST_SANITIZE=0|1 (default 1), JOBS (default nproc).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${SLUICE_TEST_BUILD_DIR:-$ROOT/build/cpp-ci}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
SANITIZE="${SLUICE_TEST_SANITIZE:-1}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-cpp-ci.XXXXXX")"
PREFIX="$WORK/prefix"
LOG="$WORK/logs"
mkdir -p "$LOG" "$BUILD"
trap 'rm -rf "$WORK"' EXIT
export SLUICE_BACKEND=host
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"

passed=0
failed=0
# step NAME CMD...: runs CMD in a subshell (so `set -e` inside the step functions
# takes effect) with its output in a log; prints the log's tail on failure.
step() {
  local name="$1"
  shift
  local log
  log="$LOG/$(printf '%s' "$name" | tr -c 'A-Za-z0-9_-' '_').log"
  local t0=$SECONDS rc
  ("$@") >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "ok   - $name ($((SECONDS - t0))s)"
  else
    failed=$((failed + 1))
    echo "FAIL - $name (exit $rc, $((SECONDS - t0))s); last lines of its log:"
    tail -n 60 "$log" | sed 's/^/    /'
  fi
}

# --- tools -----------------------------------------------------------------------------
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v c++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "# installing ${need_apt[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") \
      >"$LOG/apt.log" 2>&1 || { tail -20 "$LOG/apt.log"; echo "test.sh: 0 passed, 1 failed"; exit 1; }
  else
    echo "missing tools: ${need_apt[*]}"
    echo "test.sh: 0 passed, 1 failed"
    exit 1
  fi
fi
GEN=()
if command -v ninja >/dev/null; then GEN=(-G Ninja); fi
command -v cargo >/dev/null || export PATH="$HOME/.cargo/bin:$PATH"
PY="$(command -v python3 || true)"

echo "# sluice C++ CI: build $BUILD, prefix $PREFIX, $JOBS jobs, $(cmake --version | head -1)"

# --- 1. build + ctest ------------------------------------------------------------------
step "configure" cmake -S "$ROOT" -B "$BUILD/main" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSLUICE_BUILD_TESTS=ON -DSLUICE_REQUIRE_GTEST=ON -DSLUICE_BUILD_EXAMPLES=ON
step "build (cargo + C++ tests, -Wall -Wextra -Werror -pedantic)" cmake --build "$BUILD/main"
step "ctest (host backend)" ctest --test-dir "$BUILD/main" --output-on-failure -j "$JOBS"
grep -E "tests passed|tests failed" "$LOG/ctest__host_backend_.log" 2>/dev/null | sed 's/^/#   /'

# --- 2. sanitizers ---------------------------------------------------------------------------
if [ "$SANITIZE" = 1 ]; then
  step "configure (ASan + UBSan)" cmake -S "$ROOT" -B "$BUILD/asan" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=address,undefined -DSLUICE_REQUIRE_GTEST=ON \
    -DSLUICE_BUILD_EXAMPLES=OFF \
    "-DSLUICE_CARGO_TARGET_DIR=$BUILD/main/cargo"
  step "build (ASan + UBSan)" cmake --build "$BUILD/asan"
  step "ctest (ASan + UBSan, leak checks on)" ctest --test-dir "$BUILD/asan" --output-on-failure -j "$JOBS"
fi

# --- 3. install ------------------------------------------------------------------------------
check_install() {
  set -e
  cmake --install "$BUILD/main" --prefix "$PREFIX"
  local lib="$PREFIX/lib"
  for f in include/sluice.h include/sluice/sluice.hpp include/sluice/detail/handle.hpp \
           include/sluice/rng.hpp include/sluice/rng.cuh \
           lib/libsluice.so.0.1.1 lib/libsluice.a lib/pkgconfig/sluice.pc \
           lib/cmake/sluice/sluiceConfig.cmake lib/cmake/sluice/sluiceConfigVersion.cmake; do
    [ -e "$PREFIX/$f" ] || { echo "missing $f"; return 1; }
  done
  [ "$(readlink "$lib/libsluice.so")" = libsluice.so.0 ] || { echo "bad libsluice.so link"; return 1; }
  [ "$(readlink "$lib/libsluice.so.0")" = libsluice.so.0.1.1 ] || { echo "bad .so.0 link"; return 1; }
  local soname
  if command -v readelf >/dev/null; then
    soname="$(readelf -d "$lib/libsluice.so.0.1.1" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')"
  else
    soname="$(objdump -p "$lib/libsluice.so.0.1.1" | awk '/SONAME/{print $2}')"
  fi
  echo "SONAME: $soname"
  [ "$soname" = libsluice.so.0 ]
  cmp "$ROOT/include/sluice/rng.cuh" "$PREFIX/include/sluice/rng.cuh"
  ls -l "$lib"
}
step "install: layout, symlink chain, SONAME libsluice.so.0" check_install

# --- 4. consumer against the installed prefix ---------------------------------------
run_consumer() {  # run_consumer BINARY
  set -e
  local out
  out="$("$1")"
  echo "$out"
  echo "$out" | grep -q "round trip ok"
  if command -v readelf >/dev/null; then readelf -d "$1" | grep -q 'NEEDED.*libsluice.so.0\]'; fi
}
consumer_find_package() {
  set -e
  cmake -S "$ROOT/examples/cpp/consumer" -B "$WORK/c-find" "${GEN[@]}" -DCMAKE_PREFIX_PATH="$PREFIX"
  cmake --build "$WORK/c-find"
  run_consumer "$WORK/c-find/consumer"
}
consumer_cmake_pkgconfig() {
  set -e
  PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" cmake -S "$ROOT/examples/cpp/consumer" \
    -B "$WORK/c-pc" "${GEN[@]}" -DSLUICE_CONSUMER_PKGCONFIG=ON
  cmake --build "$WORK/c-pc"
  run_consumer "$WORK/c-pc/consumer"
}
consumer_make_pkgconfig() {
  set -e
  mkdir -p "$WORK/c-make"
  cd "$WORK/c-make"
  PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" make -f "$ROOT/examples/cpp/consumer/Makefile"
  run_consumer "$WORK/c-make/consumer"
}
step "consumer: find_package(sluice) against the install" consumer_find_package
step "consumer: CMake pkg_check_modules against the install" consumer_cmake_pkgconfig
step "consumer: Makefile + pkg-config against the install" consumer_make_pkgconfig

# --- 5. consumer with sluice as a subproject ------------------------------------------
consumer_subproject() {  # consumer_subproject DIR EXTRA-CMAKE-ARGS...
  set -e
  local dir="$1"
  shift
  cmake -S "$ROOT/examples/cpp/consumer" -B "$dir" "${GEN[@]}" -DSLUICE_SOURCE_DIR="$ROOT" \
    "-DSLUICE_CARGO_TARGET_DIR=$BUILD/main/cargo" "$@"
  cmake --build "$dir"
  run_consumer "$dir/consumer"
}
step "consumer: add_subdirectory(sluice)" consumer_subproject "$WORK/c-sub"
step "consumer: FetchContent(sluice)" consumer_subproject "$WORK/c-fetch" -DSLUICE_CONSUMER_FETCHCONTENT=ON

# --- 6. Python ctypes ----------------------------------------------------------------------
python_ctypes() {
  set -e
  local out
  out="$("$PY" "$ROOT/bindings/python/examples/sluice_ctypes.py" "$PREFIX/lib/libsluice.so")"
  echo "$out"
  echo "$out" | tail -1 | grep -Eq '^[0-9]+ passed, 0 failed$'
}
if [ -n "$PY" ]; then
  step "python ctypes example against the installed libsluice.so" python_ctypes
else
  failed=$((failed + 1))
  echo "FAIL - python3 not found"
fi

echo "test.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

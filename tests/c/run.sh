#!/usr/bin/env bash
# The C test suite of sluice.
#
#   bash tests/c/run.sh
#       Builds the library (cargo build --release), checks that include/sluice.h
#       compiles alone as C11 and as C++17, builds the tests with ASan + UBSan
#       (into target/c-tests/, or $SLUICE_C_BUILD_DIR) and runs them on the host
#       backend with leak detection. Exits non-zero on any failure. Extra arguments
#       are passed to the test binary as name filters (substrings of test names).
#
#   bash tests/c/run.sh --build-only OUTDIR
#       Builds the test executable WITHOUT sanitizers, with -O2 and rpath $ORIGIN,
#       into OUTDIR, next to a copy of libsluice.so (and its SONAME link
#       libsluice.so.0, the name the binary asks for). Nothing is run. For a GPU
#       machine (which has no Rust): build here into a git-ignored folder and carry
#       it, e.g. with the device tool's carry [".gpu"]:
#
#           bash tests/c/run.sh --build-only .gpu/c-tests            # here
#           SLUICE_BACKEND=cuda .gpu/c-tests/sluice_c_tests          # there
#
#       On the GPU machine every test runs against cuda:0 (the default device comes
#       from SLUICE_BACKEND); the missing-driver test detects the driver and skips,
#       and host-only tests say "skipped". Optionally run it under
#       `compute-sanitizer --tool racecheck` / `--tool synccheck` too. Record the run
#       in docs/gpu-runs.md.
#
# The test binary prints one line per test and ends with "N passed, M failed".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/c"
CC=${CC:-gcc}
CXX=${CXX:-g++}

build_only=""
if [[ ${1:-} == "--build-only" ]]; then
    [[ -n ${2:-} ]] || { echo "usage: $0 --build-only OUTDIR" >&2; exit 2; }
    build_only=$2
    shift 2
fi

echo "== cargo build --release"
(cd "$ROOT" && cargo build --release --quiet)
LIB="$ROOT/target/release/libsluice.so"
[[ -f $LIB ]] || { echo "missing $LIB" >&2; exit 1; }
# The library's SONAME is libsluice.so.0 (cdylib/build.rs): binaries linked against it ask
# for that name. cdylib/build.rs makes the link beside it; make sure, and check the name.
ln -sf libsluice.so "$ROOT/target/release/libsluice.so.0"
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == libsluice.so.0 ]] || { echo "SONAME of $LIB is '$soname', want libsluice.so.0" >&2; exit 1; }

SOURCES=("$HERE"/main.c "$HERE"/test_*.c)

if [[ -n $build_only ]]; then
    mkdir -p "$build_only"
    out=$(cd "$build_only" && pwd)
    cp "$LIB" "$out/libsluice.so"
    ln -sf libsluice.so "$out/libsluice.so.0"
    echo "== building $out/sluice_c_tests (-O2, no sanitizers, rpath \$ORIGIN)"
    "$CC" -std=c11 -Wall -Wextra -Werror -O2 -g -pthread -I"$ROOT/include" -I"$HERE" \
        "${SOURCES[@]}" -o "$out/sluice_c_tests" \
        -L"$out" -lsluice -Wl,-rpath,'$ORIGIN'
    echo "built: $out/sluice_c_tests and $out/libsluice.so"
    exit 0
fi

BUILD=${SLUICE_C_BUILD_DIR:-"$ROOT/target/c-tests"}
mkdir -p "$BUILD"

echo "== header check: include/sluice.h alone as C11 and C++17"
"$CC" -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c "$ROOT/include/sluice.h"
"$CXX" -std=c++17 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++ "$ROOT/include/sluice.h"
# included twice, and used, from both languages
cat > "$BUILD/header_check.c" <<'EOF'
#include "sluice.h"
#include "sluice.h"
int header_check(void);
int header_check(void) {
    sluice_stream_t s = {0};
    sluice_error_t *e = sluice_stream_synchronize(s);
    int code = (int)sluice_error_code(e);
    sluice_error_free(e);
    return code + (int)sizeof(sluice_device_props_t);
}
EOF
"$CC" -std=c11 -pedantic -Wall -Wextra -Werror -I"$ROOT/include" -c "$BUILD/header_check.c" \
    -o "$BUILD/header_check_c.o"
cp "$BUILD/header_check.c" "$BUILD/header_check.cpp"
"$CXX" -std=c++17 -pedantic -Wall -Wextra -Werror -I"$ROOT/include" -c "$BUILD/header_check.cpp" \
    -o "$BUILD/header_check_cpp.o"

echo "== building the tests with ASan + UBSan"
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
objs=()
for src in "${SOURCES[@]}"; do
    obj="$BUILD/$(basename "${src%.c}").o"
    "$CC" -std=c11 -Wall -Wextra -Werror -g "${SAN[@]}" -pthread \
        -I"$ROOT/include" -I"$HERE" -c "$src" -o "$obj"
    objs+=("$obj")
done
"$CC" -g "${SAN[@]}" -pthread "${objs[@]}" -o "$BUILD/sluice_c_tests" \
    -L"$ROOT/target/release" -lsluice -Wl,-rpath,"$ROOT/target/release"
readelf -d "$BUILD/sluice_c_tests" | grep -q 'NEEDED.*\[libsluice.so.0\]' \
    || { echo "sluice_c_tests does not ask for libsluice.so.0" >&2; exit 1; }

echo "== running (SLUICE_BACKEND=host)"
# - detect_leaks: any leak fails the run (LSan exits non-zero); lsan.supp holds the
#   narrowly scoped exceptions, each with its reason.
# - allocator_may_return_null: the tests ask for absurd sizes and expect a clean
#   OUT_OF_MEMORY/OUT_OF_RANGE error instead of an ASan abort.
export SLUICE_BACKEND=host
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_invalid_pointer_pairs=0:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$HERE/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
status=0
"$BUILD/sluice_c_tests" "$@" || status=$?
if [[ $status -ne 0 ]]; then
    echo "C tests FAILED (exit $status)"
    exit "$status"
fi
echo "C tests passed"

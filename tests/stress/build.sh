#!/bin/sh
# Builds the stress test against the release library (cargo build --release --lib):
#   tests/stress/build.sh [OUT]          (default OUT: target/stress/stress)
# libsluice.so (with its SONAME link libsluice.so.0, the name OUT asks for) and
# kernels/test_kernels.ptx are copied next to OUT, which finds both there. Extra compiler flags come from $CFLAGS, e.g. a sanitizer build:
#   CFLAGS="-g -O1 -fsanitize=address,undefined" tests/stress/build.sh target/stress-asan/stress
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/target/stress/stress}
case $out in /*) ;; *) out=$PWD/$out ;; esac
lib=$root/target/release/libsluice.so
if [ ! -f "$lib" ]; then
    echo "build.sh: $lib is missing; run: cargo build --release --lib" >&2
    exit 1
fi
dir=$(dirname "$out")
mkdir -p "$dir"
# shellcheck disable=SC2086 # CFLAGS is a list of flags
${CC:-cc} -O2 -std=gnu11 -Wall -Wextra -Werror -pthread -I "$root/include" ${CFLAGS:-} \
    -o "$out" "$root/tests/stress/stress.c" -L "$root/target/release" -lsluice -Wl,-rpath,'$ORIGIN'
cp "$lib" "$root/kernels/test_kernels.ptx" "$dir/"
ln -sf libsluice.so "$dir/libsluice.so.0"
echo "built $out"

#!/usr/bin/env bash
# Builds libktrace.so (ktrace.c) against the CUPTI of the CUDA toolkit on this
# machine, beside this script, and prints the folder of libcupti (for
# LD_LIBRARY_PATH). Needs nvcc on PATH, gcc and CUPTI; prints why not to stderr.
#
#   lib=$(tools/ktrace/build.sh) && LD_LIBRARY_PATH=$lib KTRACE_OUT=k.csv \
#     CUDA_INJECTION64_PATH=$PWD/tools/ktrace/libktrace.so ./program
#   python3 tools/ktrace/gaps.py k.csv FIRST COUNT
set -uo pipefail
cd "$(dirname "$0")"
nvcc=$(command -v nvcc) || { echo "ktrace: no nvcc on PATH" >&2; exit 1; }
cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
header=$(find "$cuda" -name cupti_activity.h 2>/dev/null | head -1)
lib=$(find "$cuda" -name 'libcupti.so*' 2>/dev/null | head -1)
[ -n "$header" ] && [ -n "$lib" ] || { echo "ktrace: no CUPTI under $cuda" >&2; exit 1; }
# The newest kernel record of this CUPTI (CUpti_ActivityKernel10 in CUDA 13.0).
record=$(grep -o 'CUpti_ActivityKernel[0-9]*;' "$header" | tr -d ';' | sort -V | tail -1)
gcc -O2 -shared -fPIC -DKREC="$record" -I"$(dirname "$header")" -I"$cuda/include" ktrace.c \
	-L"$(dirname "$lib")" -lcupti -o libktrace.so >&2 || exit 1
dirname "$lib"

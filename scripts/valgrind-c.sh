#!/usr/bin/env bash
# The C test suite under valgrind memcheck (issue 16): builds it without sanitizers
# (tests/c/run.sh --build-only, -O2 -g) and runs it on the host backend with
# --error-exitcode, so any memcheck error fails the run. Leaks of definitely and
# indirectly lost blocks count as errors; tests/c/valgrind.supp holds only
# third-party noise, each entry with its reason.
#
#   bash scripts/valgrind-c.sh [test-name filters...]
#
# Tests that run a child process (test_child.c, test_trace.c) run the child natively:
# valgrind cannot start the re-executed test binary inside itself.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${SLUICE_VALGRIND_BUILD_DIR:-"$ROOT/target/c-valgrind"}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
bash "$ROOT/tests/c/run.sh" --build-only "$OUT" >/dev/null
export SLUICE_BACKEND=host SLUICE_TEST_SELF="$OUT/sluice_c_tests"
t0=$(date +%s)
valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    --trace-children=no --num-callers=30 \
    --suppressions="$ROOT/tests/c/valgrind.supp" \
    "$OUT/sluice_c_tests" "$@"
echo "valgrind memcheck: 0 errors in $(( $(date +%s) - t0 )) s"

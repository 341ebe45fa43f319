#!/usr/bin/env bash
# The benchmark alone, repeated, for the device tool (a smaller carry than the full
# suite; see scripts/gpu-suite.sh for everything):
#   scripts/gpu-bench.sh build        # here: release builds into .gpub/
#   scripts/gpu-bench.sh run [N]      # there (carry [".gpub"]): N benchmark runs
#                                     # (default 2), then sluice's own cost per call
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    rm -rf .gpub && mkdir -p .gpub
    export CARGO_PROFILE_RELEASE_DEBUG=0
    cargo build --release --bench overhead --example opcost -q
    bench=$(ls -t target/release/deps/overhead-* | grep -v '\.d$' | head -1)
    cp "$bench" .gpub/overhead
    cp target/release/examples/opcost .gpub/opcost
    cp -r kernels .gpub/kernels
    du -sh .gpub
    ;;
  run)
    out=${OUT:-/tmp/sluice-gpub-out}; mkdir -p "$out"
    for i in $(seq 1 "${2:-2}"); do
      timeout 300 .gpub/overhead > "$out/bench-$i.md" 2>&1 || echo "bench $i: rc=$?"
      grep -E '^\| \((a|b|c|d)\)|^\*\*Goals' "$out/bench-$i.md"
    done
    SLUICE_BACKEND=cuda OPCOST_REAL_DRIVER=1 timeout 120 .gpub/opcost > "$out/opcost.md" 2>&1 || true
    cat "$out/opcost.md"
    ;;
  *) echo "usage: $0 build|run [N]" >&2; exit 2 ;;
esac

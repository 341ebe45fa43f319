#!/usr/bin/env bash
# Regenerates include/sluice.h with the pinned cbindgen; --verify fails on drift.
set -euo pipefail
cd "$(dirname "$0")/.."
want=0.29.4
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version | awk '{print $2}')" != "$want" ]; then
  cargo install cbindgen --version "$want" --locked --quiet
fi
if [ "${1:-}" = "--verify" ]; then
  tmp=$(mktemp)
  cbindgen --quiet --config cbindgen.toml --crate sluice --output "$tmp"
  if ! cmp -s "$tmp" include/sluice.h; then
    diff -u include/sluice.h "$tmp" | head -50
    echo "include/sluice.h is stale: run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  echo "header up to date"
else
  cbindgen --quiet --config cbindgen.toml --crate sluice --output include/sluice.h
fi

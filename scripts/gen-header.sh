#!/usr/bin/env bash
# Regenerates include/sluice.h with the pinned cbindgen; --verify fails on drift, and
# on any #define or typedef whose name lacks the SLUICE_/sluice_ prefix.
# First it writes src/ffi/c_constants.rs, the constants of the C-visible enums, from
# their one list in Rust (src/c_enum.rs, through examples/c_constants.rs): cbindgen
# cannot see through a macro, but it reads that file like any other.
set -euo pipefail
cd "$(dirname "$0")/.."
want=0.29.4
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version | awk '{print $2}')" != "$want" ]; then
  cargo install cbindgen --version "$want" --locked --quiet
fi

# Names defined by #define or typedef without the library's prefix.
unprefixed() {
  {
    grep -oE '^#define [A-Za-z_][A-Za-z0-9_]*' "$1" | awk '{print $2}'
    grep -oE '^\} [A-Za-z_][A-Za-z0-9_]*;' "$1" | tr -d '};' | tr -d ' '
    grep -oE '^typedef [^(]*[ *]([A-Za-z_][A-Za-z0-9_]*);' "$1" | grep -oE '[A-Za-z_][A-Za-z0-9_]*;$' | tr -d ';'
    grep -oE '^typedef .*\(\*[A-Za-z_][A-Za-z0-9_]*\)' "$1" | grep -oE '\(\*[A-Za-z_][A-Za-z0-9_]*\)' | tr -d '(*)'
  } | grep -vE '^(SLUICE_|sluice_)' || true
}

if [ "${1:-}" = "--verify" ]; then
  consts=$(mktemp)
  cargo run --quiet --example c_constants > "$consts"
  if ! cmp -s "$consts" src/ffi/c_constants.rs; then
    diff -u src/ffi/c_constants.rs "$consts" | head -30
    echo "src/ffi/c_constants.rs is stale: run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  tmp=$(mktemp)
  cbindgen --quiet --config cbindgen.toml --crate sluice --output "$tmp"
  if ! cmp -s "$tmp" include/sluice.h; then
    diff -u include/sluice.h "$tmp" | head -50
    echo "include/sluice.h is stale: run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  rm -f "$tmp" "$consts"
  bad=$(unprefixed include/sluice.h)
  if [ -n "$bad" ]; then
    echo "include/sluice.h defines names without the SLUICE_/sluice_ prefix:" $bad >&2
    exit 1
  fi
  echo "header up to date; every define and typedef is prefixed"
else
  consts=$(mktemp)
  cargo run --quiet --example c_constants > "$consts"
  cat "$consts" > src/ffi/c_constants.rs
  rm -f "$consts"
  cbindgen --quiet --config cbindgen.toml --crate sluice --output include/sluice.h
fi

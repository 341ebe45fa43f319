#!/usr/bin/env bash
# Regenerates include/sluice.h with the pinned cbindgen; --verify fails on drift, and
# on any #define or typedef whose name lacks the SLUICE_/sluice_ prefix.
# cbindgen writes everything but the constants of the C-visible enums, which come
# from their one list in Rust (src/c_enum.rs) through examples/c_constants.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
want=0.29.4
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version | awk '{print $2}')" != "$want" ]; then
  cargo install cbindgen --version "$want" --locked --quiet
fi

generate() {
  local raw enums
  raw=$(mktemp)
  enums=$(mktemp)
  cbindgen --quiet --config cbindgen.toml --crate sluice --output "$raw"
  cargo run --quiet --example c_constants > "$enums"
  awk -v f="$enums" '/@SLUICE_C_ENUMS@/ { while ((getline l < f) > 0) print l; next } { print }' \
    "$raw" > "$1"
  rm -f "$raw" "$enums"
}

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
  tmp=$(mktemp)
  generate "$tmp"
  if ! cmp -s "$tmp" include/sluice.h; then
    diff -u include/sluice.h "$tmp" | head -50
    echo "include/sluice.h is stale: run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  rm -f "$tmp"
  bad=$(unprefixed include/sluice.h)
  if [ -n "$bad" ]; then
    echo "include/sluice.h defines names without the SLUICE_/sluice_ prefix:" $bad >&2
    exit 1
  fi
  echo "header up to date; every define and typedef is prefixed"
else
  generate include/sluice.h
fi

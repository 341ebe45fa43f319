#!/usr/bin/env bash
# The main demo: a copy stream feeds a compute stream through sync objects.
# Uses the GPU when a CUDA driver and device exist, else the host backend.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --quiet --example pipeline "$@"

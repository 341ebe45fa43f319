#!/usr/bin/env bash
# On the GPU machine: builds examples/cpp/torch_interop against the sluice prefix
# carried in .gpu/sluice and PyTorch's libtorch, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
cmake -S examples/cpp/torch_interop -B /tmp/build-torch -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PWD/.gpu/sluice;$TORCH_PREFIX" > /tmp/torch-cmake.log 2>&1 \
  || { tail -40 /tmp/torch-cmake.log; exit 1; }
cmake --build /tmp/build-torch -j 16 > /tmp/torch-build.log 2>&1 || { tail -40 /tmp/torch-build.log; exit 1; }
echo "== without Op scopes (may race; informational)"
SLUICE_BACKEND=cuda /tmp/build-torch/torch_interop --no-deps || true
echo "== with Op scopes, on streams sluice did not create (torch pool, cudaStreamCreate)"
SLUICE_BACKEND=cuda /tmp/build-torch/torch_interop --wrap
echo "== with Op scopes"
SLUICE_BACKEND=cuda /tmp/build-torch/torch_interop

#!/usr/bin/env bash
# On the GPU machine: builds examples/cpp/torch_interop and examples/cpp/torch_trainer
# against the sluice prefix carried in .gpu/sluice and PyTorch's libtorch, then runs
# them. The trainer reads the MNIST files carried in .gpu/go/mnist or .gpu/mnist
# (scripts/gpu-suite.sh build copies them there) and prints RESULT torch_* lines.
# Exits non-zero if a build or a checked run fails; every run is tried.
set -uo pipefail
cd "$(dirname "$0")/.."
TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') || exit 1
rc=0

# build NAME: configures and builds examples/cpp/NAME into /tmp/build-NAME.
build() {
  cmake -S "examples/cpp/$1" -B "/tmp/build-$1" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$PWD/.gpu/sluice;$TORCH_PREFIX" > "/tmp/$1-cmake.log" 2>&1 \
    || { echo "FAIL: cmake $1"; tail -40 "/tmp/$1-cmake.log"; return 1; }
  cmake --build "/tmp/build-$1" -j 16 > "/tmp/$1-build.log" 2>&1 \
    || { echo "FAIL: build $1"; tail -40 "/tmp/$1-build.log"; return 1; }
}

if build torch_interop; then
  echo "== without Op scopes (may race; informational)"
  SLUICE_BACKEND=cuda /tmp/build-torch_interop/torch_interop --no-deps || true
  echo "== with Op scopes, on streams sluice did not create (torch pool, cudaStreamCreate)"
  SLUICE_BACKEND=cuda /tmp/build-torch_interop/torch_interop --wrap || rc=1
  echo "== with Op scopes"
  SLUICE_BACKEND=cuda /tmp/build-torch_interop/torch_interop || rc=1
else
  rc=1
fi

mnist=""
for d in .gpu/go/mnist .gpu/mnist; do
  [ -f "$d/train-images-idx3-ubyte.gz" ] && { mnist=$d; break; }
done
if [ -z "$mnist" ]; then
  echo "FAIL: torch_trainer: no MNIST files in .gpu/go/mnist or .gpu/mnist"
  rc=1
elif build torch_trainer; then
  if grep -q 'torch_trainer: no zlib' /tmp/torch_trainer-cmake.log; then
    echo "no zlib headers here: the trainer reads copies decompressed by python3 in /tmp/mnist-idx"
    mkdir -p /tmp/mnist-idx
    python3 -c 'import gzip,os,shutil,sys
for f in os.listdir(sys.argv[1]):
    if f.endswith(".gz"):
        with gzip.open(os.path.join(sys.argv[1], f)) as i, open(os.path.join(sys.argv[2], f[:-3]), "wb") as o:
            shutil.copyfileobj(i, o)' "$mnist" /tmp/mnist-idx
    mnist=/tmp/mnist-idx
  fi
  out=$(mktemp -d)
  echo "== torch_trainer: 5 epochs, batch 256, batches from the prefetcher (goal: accuracy >= 0.97)"
  SLUICE_BACKEND=cuda timeout 300 /tmp/build-torch_trainer/torch_trainer --data "$mnist" --epochs 5 \
    | tee "$out/prefetch.out"
  r=${PIPESTATUS[0]}; [ "$r" = 0 ] || { echo "FAIL: torch_trainer (prefetcher): rc=$r"; rc=1; }
  echo "== torch_trainer: 2 epochs, batch 256, blocking copies (steps/s of the second epoch)"
  SLUICE_BACKEND=cuda timeout 300 /tmp/build-torch_trainer/torch_trainer --data "$mnist" --epochs 2 --blocking \
    | tee "$out/blocking.out"
  r=${PIPESTATUS[0]}; [ "$r" = 0 ] || { echo "FAIL: torch_trainer (blocking): rc=$r"; rc=1; }
  p=$(sed -n 's/^RESULT torch_steps_per_s_prefetch=\([0-9.]*\).*/\1/p' "$out/prefetch.out")
  b=$(sed -n 's/^RESULT torch_steps_per_s_blocking=\([0-9.]*\).*/\1/p' "$out/blocking.out")
  echo "RESULT torch_steps_per_s_ratio=$(awk -v a="${p:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "nan" }') (prefetch / blocking)"
  rm -rf "$out"
else
  rc=1
fi
exit $rc

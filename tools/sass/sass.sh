#!/usr/bin/env bash
# The SASS of the Go trainer's kernels, on a machine without a GPU or a CUDA
# toolkit: the trainer writes its kernel source (-dump-kernels, with the same
# macro definitions a run would use), NVRTC compiles it to PTX for sm_90 as
# the trainer does, and ptxas, cuobjdump and nvdisasm turn that into SASS.
# The tools come from NVIDIA's wheels on PyPI (pip download, into
# $SASS_CACHE, ~/.cache/sluice-sass by default). Prints each kernel's
# instruction count and registers, and writes the SASS to OUT.sass.
#
#   tools/sass/sass.sh OUT [trainer flags: -cluster 4 -kdefine NSTAGE_H=4 ...]
#   python3 tools/sass/sass.py OUT.sass gemm_tn_sgd_bf16    # one kernel's listing
#
# Needs the library built (cargo build --release), go, pip and python3. The
# SASS matches what the driver builds from the same PTX on an H100 or H200
# where the two ptxas versions agree (2,480 instructions for
# gemm_nn_bias_relu_drop_bf16 here and under Nsight Compute, run 184).
set -euo pipefail
out=$(realpath -m "${1:?usage: sass.sh OUT [trainer flags]}")
mkdir -p "$(dirname "$out")"
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SASS_CACHE:-$HOME/.cache/sluice-sass}
mkdir -p "$cache"
for pkg in nvidia-cuda-nvrtc nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
	if ! ls "$cache"/wheels/"${pkg//-/_}"-*.whl >/dev/null 2>&1; then
		pip download -q --no-deps -d "$cache/wheels" "$pkg" >&2
	fi
done
if [ ! -d "$cache/x" ]; then
	for w in "$cache"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cache/x"; done
fi
bin=$(dirname "$(find "$cache/x" -name ptxas -type f | head -1)")
nvrtc=$(find "$cache/x" -name 'libnvrtc.so*' -type f | head -1)
chmod +x "$bin"/* 2>/dev/null || true
export CGO_CFLAGS="-I$root/include" CGO_LDFLAGS="-L$root/target/release -lsluice -Wl,-rpath,$root/target/release"
(cd "$root/examples/go/trainer" && go run . -dump-kernels "$out.cu" "$@")
python3 - "$nvrtc" "$out.cu" "$out.ptx" "$root/include" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
prog = ctypes.c_void_p()
src = open(sys.argv[2], "rb").read()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"trainer.cu", 0, None, None) == 0
opts = [b"--gpu-architecture=compute_90", b"-I" + sys.argv[4].encode()]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, log)
if rc:
    sys.exit("NVRTC failed:\n" + log.value.decode())
lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
ptx = ctypes.create_string_buffer(n.value)
lib.nvrtcGetPTX(prog, ptx)
open(sys.argv[3], "w").write(ptx.value.decode())
PY
"$bin/ptxas" -arch=sm_90 -v "$out.ptx" -o "$out.cubin" 2>"$out.ptxas"
PATH="$bin:$PATH" "$bin/cuobjdump" -sass "$out.cubin" >"$out.sass"
python3 "$(dirname "$0")/sass.py" "$out.sass" --ptxas "$out.ptxas"

#!/usr/bin/env python3
"""torch <-> sluice <-> torch on a GPU, exact, with no host sync in between.

    SLUICE_BACKEND=cuda PYTHONPATH=bindings/python SLUICE_LIBRARY=.../libsluice.so \
        python3 bindings/python/tests/gpu_torch_test.py

Two ways in, both ending in torch reading on its own stream:
  dlpack: a torch tensor, written by torch on stream T1 behind a long sleep, is
          imported with Buffer.from_dlpack (torch orders T1 before sluice's stream);
          sluice copies it out on a second sluice stream, then a sluice kernel
          (sluice_spin_fill, which spins first) overwrites it on the first; torch
          reads it through torch.from_dlpack on stream T2 (sluice orders T2 after the
          kernel on the device).
  wrap:   the same with Buffer.wrap_device(tensor.data_ptr(), ...): torch's T1 work is
          published to the buffer by a foreign op on T1 wrapped as a sluice stream, and
          the release callback must run once, after the buffer is closed.
Each direction is checked exactly: the copy sluice made must hold torch's values, and
torch must read the kernel's. Prints PASS or FAIL lines; exits 1 on any failure and 0
with "SKIP" when torch or a GPU is missing.
"""

import ctypes
import os
import pathlib
import sys
import threading

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(0)

import sluice  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
PTX = (ROOT / "kernels" / "test_kernels.ptx").read_bytes()
N = 1 << 20
SLEEP_CYCLES = 200_000_000  # ~0.1 s: long enough that a missing wait shows
SPIN_NS = 50_000_000
failures = 0


def report(name, ok, detail=""):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures += 1


def fill(s, fn, buf, value):
    blocks = min((N + 255) // 256, 1024)
    s.launch(
        fn,
        grid=blocks,
        block=256,
        args=[buf, ctypes.c_uint64(N), ctypes.c_uint32(value), ctypes.c_uint64(SPIN_NS)],
        writes=[buf],
    )


def check(name, got, want):
    bad = (got != want).sum().item()
    report(name, bad == 0, f"{bad} of {got.numel()} elements differ" if bad else "")


def main():
    dev_index = torch.cuda.current_device()
    torch.cuda.init()
    dev = sluice.Device(backend=sluice.BACKEND_CUDA, ordinal=dev_index)
    mod = sluice.Module(dev, PTX)
    spin_fill = mod.function("sluice_spin_fill")
    t1 = torch.cuda.Stream()
    t2 = torch.cuda.Stream()
    s = sluice.Stream(dev)
    s2 = sluice.Stream(dev)

    # ---- dlpack: torch -> sluice -> torch
    with torch.cuda.stream(t1):
        x = torch.empty(N, dtype=torch.int32, device="cuda")
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(7)
        bx = sluice.Buffer.from_dlpack(dev, x, stream=s)  # torch: s waits for t1
    report("dlpack import: shape and dtype", bx.tensor == (0, 32, 1, (N,)), str(bx.tensor))
    copy = sluice.Buffer.alloc(s2, 4 * N)
    s2.copy(copy, bx)  # first use on s2: waits for s (ready_on), which waits for t1
    fill(s, spin_fill, bx, 0xC0FFEE)  # waits for the copy's read on s2
    with torch.cuda.stream(t2):
        y = torch.from_dlpack(bx)  # sluice: t2 waits for the kernel, on the device
        got = y.view(torch.int32).clone()
    t2.synchronize()
    check("dlpack: torch on its own stream reads the sluice kernel's values", got,
          torch.full((N,), 0xC0FFEE, dtype=torch.int32, device="cuda"))
    host = sluice.Buffer.alloc_pinned(dev, 4 * N)
    s2.copy(host, copy)
    s2.synchronize()
    seen = torch.frombuffer(bytearray(ctypes.string_at(host.host_ptr, 4 * N)), dtype=torch.int32)
    check("dlpack: sluice's copy (another stream) holds torch's values", seen,
          torch.full((N,), 7, dtype=torch.int32))
    del y, got
    bx.close()

    # ---- wrap_device: torch -> sluice -> torch
    released = []
    done = threading.Event()
    with torch.cuda.stream(t1):
        z = torch.empty(N, dtype=torch.int32, device="cuda")
        torch.cuda._sleep(SLEEP_CYCLES)
        z.fill_(11)
    bz = sluice.Buffer.wrap_device(dev, z.data_ptr(), 4 * N,
                                   release=lambda: (released.append(1), done.set()))
    w1 = sluice.Stream.wrap_external(dev, t1.cuda_stream)
    with w1.op(writes=[bz]):
        pass  # torch's work on t1 so far becomes the buffer's writer
    s2.copy(copy, bz)
    fill(s, spin_fill, bz, 0xBEEF)
    with torch.cuda.stream(t2):
        got = torch.from_dlpack(bz.view("int32", (N,))).clone()
    t2.synchronize()
    check("wrap: torch on its own stream reads the sluice kernel's values", got,
          torch.full((N,), 0xBEEF, dtype=torch.int32, device="cuda"))
    s2.copy(host, copy)
    s2.synchronize()
    seen = torch.frombuffer(bytearray(ctypes.string_at(host.host_ptr, 4 * N)), dtype=torch.int32)
    check("wrap: sluice's copy holds torch's values", seen, torch.full((N,), 11, dtype=torch.int32))
    report("wrap: not released while open", released == [])
    bz.close()
    done.wait(30)
    report("wrap: released exactly once after close", released == [1], str(released))
    w1.close()
    for o in (host, copy, s, s2, spin_fill, mod, dev):
        o.close()
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

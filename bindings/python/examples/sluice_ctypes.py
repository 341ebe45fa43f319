#!/usr/bin/env python3
"""sluice from Python with ctypes alone: no bindings, no compiler.

    python3 bindings/python/examples/sluice_ctypes.py [path/to/libsluice.so]

The library comes from argv[1], else $SLUICE_LIB, else target/release/libsluice.so
of this repository. It opens the host backend, or cuda with SLUICE_BACKEND=cuda
(the GPU suite runs it so). It runs a small pipeline (two streams, a
copy, a foreign op ordered by a sync object, a buffer-to-buffer copy, a read back),
checks the bytes, and shows that stale, forged and wrong-type handles passed from
Python come back as SLUICE_ERROR_INVALID_HANDLE (4) with a message, not a crash.
It also shows how to call sluice_module_compile (CUDA C compiled with NVRTC, as
CuPy's RawKernel does): on host that is SLUICE_ERROR_UNSUPPORTED (6); on a GPU a
compile error is SLUICE_ERROR_COMPILE (22) with the compile log in the message.
The last line is "N passed, M failed"; the exit status is non-zero on a failure.
"""

import ctypes
import os
import sys

SLUICE_BACKEND_HOST = 1
SLUICE_BACKEND_CUDA = 2
SLUICE_ERROR_INVALID_HANDLE = 4
SLUICE_ERROR_OUT_OF_RANGE = 5
SLUICE_ERROR_UNSUPPORTED = 6
SLUICE_ERROR_COMPILE = 22


# Handles are typed one-field structs passed by value, as in sluice.h. One class
# per handle type lets ctypes refuse a Stream where a Buffer is expected, as a C
# compiler would.
class Handle(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_uint64)]


class Device(Handle):
    pass


class Stream(Handle):
    pass


class Buffer(Handle):
    pass


class Sync(Handle):
    pass


class Op(Handle):
    pass


class Module(Handle):
    pass


class StreamStats(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("waits", ctypes.c_uint64),
        ("records", ctypes.c_uint64),
        ("events_created", ctypes.c_uint64),
        ("engine_syncs", ctypes.c_uint64),
    ]


class SyncInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("reader_count", ctypes.c_uint32),
        ("has_writer", ctypes.c_uint32),
    ]


class _Error(ctypes.Structure):  # opaque sluice_error_t
    pass


ErrorPtr = ctypes.POINTER(_Error)  # NULL (falsy) on success


def load(path):
    lib = ctypes.CDLL(path)
    P = ctypes.POINTER
    sig = {
        "sluice_version": ([], ctypes.c_char_p),
        "sluice_abi_version": ([], ctypes.c_uint32),
        "sluice_live_handles": ([], ctypes.c_uint64),
        "sluice_error_code": ([ErrorPtr], ctypes.c_uint32),
        "sluice_error_message": ([ErrorPtr], ctypes.c_char_p),
        "sluice_error_code_name": ([ctypes.c_uint32], ctypes.c_char_p),
        "sluice_error_free": ([ErrorPtr], None),
        "sluice_device_open": ([ctypes.c_uint32, ctypes.c_uint32, P(Device)], ErrorPtr),
        "sluice_device_close": ([Device], ErrorPtr),
        "sluice_stream_create": ([Device, ctypes.c_uint32, ctypes.c_int32, P(Stream)], ErrorPtr),
        "sluice_stream_destroy": ([Stream], ErrorPtr),
        "sluice_stream_synchronize": ([Stream], ErrorPtr),
        "sluice_stream_stats": ([Stream, P(StreamStats)], ErrorPtr),
        "sluice_buffer_alloc": ([Stream, ctypes.c_size_t, P(Buffer)], ErrorPtr),
        "sluice_buffer_free": ([Buffer], ErrorPtr),
        "sluice_buffer_sync": ([Buffer, P(Sync)], ErrorPtr),
        "sluice_stream_copy": ([Stream, Buffer, ctypes.c_size_t, Buffer, ctypes.c_size_t,
                         ctypes.c_size_t], ErrorPtr),
        "sluice_stream_copy_from_host": ([Stream, Buffer, ctypes.c_size_t, ctypes.c_void_p,
                                   ctypes.c_size_t], ErrorPtr),
        "sluice_stream_copy_to_host": ([Stream, ctypes.c_void_p, Buffer, ctypes.c_size_t,
                                 ctypes.c_size_t], ErrorPtr),
        "sluice_sync_create": ([P(Sync)], ErrorPtr),
        "sluice_sync_destroy": ([Sync], ErrorPtr),
        "sluice_sync_info": ([Sync, P(SyncInfo)], ErrorPtr),
        "sluice_sync_wait_write": ([Sync], ErrorPtr),
        "sluice_op_begin": ([Stream, P(Sync), ctypes.c_size_t, P(Sync), ctypes.c_size_t,
                             P(Op)], ErrorPtr),
        "sluice_op_end": ([Op], ErrorPtr),
        "sluice_module_compile": ([Device, ctypes.c_char_p, ctypes.c_char_p,
                                   P(ctypes.c_char_p), ctypes.c_size_t, P(Module)], ErrorPtr),
        "sluice_module_unload": ([Module], ErrorPtr),
    }
    for name, (argtypes, restype) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


class SluiceError(Exception):
    def __init__(self, code, name, message):
        super().__init__(f"{name}: {message}")
        self.code = code
        self.name = name
        self.message = message


def take_error(lib, err):
    """Converts a returned sluice_error_t* to None or a SluiceError, freeing it."""
    if not err:
        return None
    code = lib.sluice_error_code(err)
    e = SluiceError(code, lib.sluice_error_code_name(code).decode(),
                    lib.sluice_error_message(err).decode())
    lib.sluice_error_free(err)
    return e


def check(lib, err):
    e = take_error(lib, err)
    if e is not None:
        raise e


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print(f"ok   - {name}")
        else:
            self.failed += 1
            print(f"FAIL - {name} {detail}")


def compile_module(lib, dev, source, name="kernel.cu", options=()):
    """CUDA C to a Module with sluice_module_compile. Options are a char** array;
    kernels need extern "C" to be found by name. Raises SluiceError on failure
    (SLUICE_ERROR_COMPILE with the log, or SLUICE_ERROR_UNSUPPORTED on host)."""
    opts = (ctypes.c_char_p * max(len(options), 1))(*[o.encode() for o in options])
    m = Module()
    check(lib, lib.sluice_module_compile(dev, source.encode(), name.encode(), opts,
                                         len(options), ctypes.byref(m)))
    return m


def syncs(*objs):
    arr = (Sync * len(objs))(*objs)
    return arr, len(objs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "target", "release", "libsluice.so")
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SLUICE_LIB", default)
    lib = load(path)
    t = Checks()
    print(f"# sluice {lib.sluice_version().decode()} (ABI {lib.sluice_abi_version()}) from {path}")
    live0 = lib.sluice_live_handles()

    dev = Device()
    cuda = os.environ.get("SLUICE_BACKEND") == "cuda"
    backend = SLUICE_BACKEND_CUDA if cuda else SLUICE_BACKEND_HOST
    check(lib, lib.sluice_device_open(backend, 0, ctypes.byref(dev)))
    s1, s2 = Stream(), Stream()
    check(lib, lib.sluice_stream_create(dev, 0, 0, ctypes.byref(s1)))
    check(lib, lib.sluice_stream_create(dev, 0, 0, ctypes.byref(s2)))
    t("streams are distinct handles", s1.bits != s2.bits and s1.bits != 0)

    n = 4096
    src = bytes((i * 37 + 11) & 0xFF for i in range(n))
    a, b = Buffer(), Buffer()
    check(lib, lib.sluice_buffer_alloc(s1, n, ctypes.byref(a)))
    check(lib, lib.sluice_buffer_alloc(s2, n, ctypes.byref(b)))

    # s1: host -> a. The library op publishes a as written on s1.
    check(lib, lib.sluice_stream_copy_from_host(s1, a, 0, src, n))

    # s2: a foreign op that reads a (through its sync object) and writes a
    # standalone sync object standing for memory sluice does not own. Beginning it
    # makes s2 wait for s1's copy on the device; the host does not block.
    a_sync, x = Sync(), Sync()
    check(lib, lib.sluice_buffer_sync(a, ctypes.byref(a_sync)))
    check(lib, lib.sluice_sync_create(ctypes.byref(x)))
    before, after = StreamStats(), StreamStats()
    check(lib, lib.sluice_stream_stats(s2, ctypes.byref(before)))
    reads, nr = syncs(a_sync)
    writes, nw = syncs(x)
    op = Op()
    check(lib, lib.sluice_op_begin(s2, reads, nr, writes, nw, ctypes.byref(op)))
    check(lib, lib.sluice_op_end(op))
    check(lib, lib.sluice_stream_stats(s2, ctypes.byref(after)))
    t("s2 waited on s1 once (device-side)", after.waits == before.waits + 1,
      f"waits {before.waits} -> {after.waits}")
    info = SyncInfo()
    check(lib, lib.sluice_sync_info(x, ctypes.byref(info)))
    t("the op published a writer on x", info.has_writer == 1)
    check(lib, lib.sluice_sync_wait_write(x))

    # s2: a -> b at an offset, then b -> host.
    check(lib, lib.sluice_stream_copy(s2, b, 0, a, 0, n))
    check(lib, lib.sluice_stream_copy(s2, b, 100, a, 0, 50))
    out = ctypes.create_string_buffer(n)
    check(lib, lib.sluice_stream_copy_to_host(s2, out, b, 0, n))
    want = src[:100] + src[:50] + src[150:]
    t("bytes round-tripped exactly", out.raw == want)

    # Errors: out of range.
    e = take_error(lib, lib.sluice_stream_copy_to_host(s2, out, b, n - 1, 2))
    t("out-of-range copy is refused", e is not None and e.code == SLUICE_ERROR_OUT_OF_RANGE,
      str(e))

    # Stale handles from Python: a destroyed stream is reported, not undefined.
    check(lib, lib.sluice_stream_synchronize(s1))
    stale = Stream(s1.bits)
    check(lib, lib.sluice_stream_destroy(s1))
    e = take_error(lib, lib.sluice_stream_synchronize(stale))
    t("destroyed stream -> SLUICE_ERROR_INVALID_HANDLE",
      e is not None and e.code == SLUICE_ERROR_INVALID_HANDLE, str(e))
    if e is not None:
        print(f"#   message: {e.message}")
    t("the message says what happened", e is not None and "stale" in e.message, str(e))
    e = take_error(lib, lib.sluice_stream_destroy(stale))
    t("double destroy -> INVALID_HANDLE", e is not None and e.code == SLUICE_ERROR_INVALID_HANDLE)
    e = take_error(lib, lib.sluice_stream_copy_from_host(stale, b, 0, src, 16))
    t("copy on a destroyed stream -> INVALID_HANDLE",
      e is not None and e.code == SLUICE_ERROR_INVALID_HANDLE)
    e = take_error(lib, lib.sluice_stream_synchronize(Stream(0x1234_5678_9ABC)))
    t("forged integer handle -> INVALID_HANDLE",
      e is not None and e.code == SLUICE_ERROR_INVALID_HANDLE, str(e))
    e = take_error(lib, lib.sluice_stream_synchronize(Stream(b.bits)))  # a buffer's bits
    t("buffer bits passed as a stream -> INVALID_HANDLE",
      e is not None and e.code == SLUICE_ERROR_INVALID_HANDLE, str(e))
    try:
        lib.sluice_stream_synchronize(b)  # ctypes itself refuses a Buffer here
        t("ctypes refuses a Buffer where a Stream is declared", False)
    except ctypes.ArgumentError:
        t("ctypes refuses a Buffer where a Stream is declared", True)

    # Runtime compilation: NVRTC on cuda; the host backend has no kernels, and says so.
    kernel = 'extern "C" __global__ void k(float* y) { y[0] = N; }'
    if cuda:
        m = compile_module(lib, dev, kernel, "k.cu", ["-DN=1.0f"])
        check(lib, lib.sluice_module_unload(m))
        t("compile on cuda -> a module", True)
        try:
            compile_module(lib, dev, kernel.replace("N;", ";"), "bad.cu")
            t("a compile error -> SLUICE_ERROR_COMPILE", False, "it compiled")
        except SluiceError as e:
            t("a compile error -> SLUICE_ERROR_COMPILE, with the log",
              e.code == SLUICE_ERROR_COMPILE and "bad.cu" in e.message, str(e))
    else:
        try:
            m = compile_module(lib, dev, kernel, "k.cu", ["-DN=1.0f"])
            check(lib, lib.sluice_module_unload(m))
            t("compile on host -> SLUICE_ERROR_UNSUPPORTED", False, "it compiled")
        except SluiceError as e:
            t("compile on host -> SLUICE_ERROR_UNSUPPORTED",
              e.code == SLUICE_ERROR_UNSUPPORTED and "host" in e.message, str(e))

    for err in (lib.sluice_sync_destroy(a_sync), lib.sluice_sync_destroy(x),
                lib.sluice_buffer_free(a), lib.sluice_buffer_free(b),
                lib.sluice_stream_destroy(s2), lib.sluice_device_close(dev)):
        check(lib, err)
    t("every handle was released", lib.sluice_live_handles() == live0)

    print(f"{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())

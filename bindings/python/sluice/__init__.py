"""sluice for Python: explicit streams, buffers with automatic cross-stream
ordering, and DLPack exchange, over libsluice's C ABI (ctypes, no compiler).

    import numpy as np, sluice
    with sluice.Device() as dev, sluice.Stream(dev) as s, sluice.Buffer.alloc(s, 16) as b:
        s.memset(b, 7)
        print(np.from_dlpack(b))          # 16 x uint8 7 (host backend: CPU memory)

Every object has close() and is a context manager; errors are SluiceError with the
library's code (``err.code``, ``err.name``) and message.
"""

import ctypes
import operator

from . import _dlpack
from ._lib import (
    RELEASE_FN,
    BufferH,
    BufferInfo,
    DeviceH,
    DeviceProps,
    FunctionH,
    LaunchDims,
    ModuleH,
    OpH,
    StreamH,
    SyncH,
    TensorDesc,
    c_vp,
    lib,
)

__all__ = [
    "SluiceError",
    "Device",
    "Stream",
    "Buffer",
    "Module",
    "Function",
    "version",
    "live_handles",
    "BACKEND_HOST",
    "BACKEND_CUDA",
]

BACKEND_HOST = 1
BACKEND_CUDA = 2
BUFFER_DEVICE, BUFFER_PINNED, BUFFER_REGISTERED, BUFFER_FOREIGN = 1, 2, 3, 4
DLPACK_VERSIONED, DLPACK_UNVERSIONED = 1, 2

# SLUICE_ERROR_* codes (stable, never renumbered).
(
    ERROR_PANIC,
    ERROR_NULL_ARGUMENT,
    ERROR_INVALID_ARGUMENT,
    ERROR_INVALID_HANDLE,
    ERROR_OUT_OF_RANGE,
    ERROR_UNSUPPORTED,
    ERROR_NO_DRIVER,
    ERROR_NO_DEVICE,
    ERROR_DRIVER,
    ERROR_OUT_OF_MEMORY,
    ERROR_CAPTURE_UNSUPPORTED,
    ERROR_CAPTURE_FAILED,
    ERROR_DEVICE_FAULT,
    ERROR_CALLBACK_FAILED,
    ERROR_MODULE_LOAD,
    ERROR_NOT_FOUND,
    ERROR_WRONG_DEVICE,
    ERROR_INVALID_STATE,
    ERROR_END_OF_DATA,
    ERROR_TIMEOUT,
    ERROR_CORRUPT_DATA,
) = range(1, 22)


class SluiceError(Exception):
    """An error from libsluice: ``code`` (a ``SLUICE_ERROR_*`` value), ``name`` (its
    C name) and the library's message."""

    def __init__(self, code, message):
        self.code = code
        self.name = (lib.sluice_error_code_name(code) or b"?").decode()
        self.message = message
        super().__init__(f"{self.name} ({code}): {message}")


def _check(err):
    if err:
        code = lib.sluice_error_code(err)
        msg = (lib.sluice_error_message(err) or b"").decode(errors="replace")
        lib.sluice_error_free(err)
        raise SluiceError(code, msg)


def version():
    return lib.sluice_version().decode()


def live_handles():
    """Live handles of every type in the process (for leak checks)."""
    return lib.sluice_live_handles()


class _Owned:
    """A handle this object owns; close() releases it once."""

    _h = None
    _release = None

    def _own(self, h, release):
        self._h = h
        self._release = release

    @property
    def handle(self):
        if self._h is None:
            raise SluiceError(ERROR_INVALID_HANDLE, f"{type(self).__name__} is closed")
        return self._h

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            _check(self._release(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Device(_Owned):
    """A device: ``Device()`` opens the default one (``SLUICE_BACKEND=host|cuda|auto``);
    ``Device(backend=BACKEND_CUDA, ordinal=0)`` a given one."""

    def __init__(self, backend=None, ordinal=0):
        h = DeviceH()
        if backend is None:
            _check(lib.sluice_device_open_default(ctypes.byref(h)))
        else:
            _check(lib.sluice_device_open(backend, ordinal, ctypes.byref(h)))
        self._own(h, lib.sluice_device_close)
        p = DeviceProps()
        _check(lib.sluice_device_props(h, ctypes.byref(p)))
        self.name = p.name.decode(errors="replace")
        self.backend = p.backend
        self.ordinal = p.ordinal

    def wait_all(self):
        """Blocks until every stream of the device is idle."""
        _check(lib.sluice_device_wait_all(self.handle))

    def __repr__(self):
        kind = {BACKEND_HOST: "host", BACKEND_CUDA: "cuda"}.get(self.backend, "?")
        return f"<sluice.Device {kind}:{self.ordinal} {self.name!r}>"


def _syncs(buffers):
    arr = (SyncH * len(buffers))(*[b.sync for b in buffers])
    return arr, len(buffers)


class Stream(_Owned):
    """A stream: every operation names one. ``Stream.wrap_external(dev, raw)`` adopts
    a foreign ``CUstream`` (e.g. ``torch.cuda.Stream().cuda_stream``) without owning it."""

    def __init__(self, device, flags=0, priority=0, _handle=None):
        self.device = device
        h = _handle
        if h is None:
            h = StreamH()
            _check(lib.sluice_stream_create(device.handle, flags, priority, ctypes.byref(h)))
        self._own(h, lib.sluice_stream_destroy)

    @classmethod
    def wrap_external(cls, device, raw):
        h = StreamH()
        _check(lib.sluice_stream_wrap_external(device.handle, c_vp(raw), ctypes.byref(h)))
        return cls(device, _handle=h)

    @property
    def raw(self):
        """The underlying ``CUstream`` as an int (an opaque pointer on host)."""
        p = c_vp()
        _check(lib.sluice_stream_raw(self.handle, ctypes.byref(p)))
        return p.value or 0

    def synchronize(self):
        _check(lib.sluice_stream_synchronize(self.handle))

    def copy(self, dst, src, length=None, dst_offset=0, src_offset=0):
        if length is None:
            length = min(dst.size - dst_offset, src.size - src_offset)
        _check(
            lib.sluice_stream_copy(
                self.handle, dst.handle, dst_offset, src.handle, src_offset, length
            )
        )

    def copy_from_host(self, dst, data, dst_offset=0):
        """Copies a bytes-like object (bytes, bytearray, a contiguous NumPy array)
        into ``dst``; returns once ``data`` may be reused."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        if mv.readonly:
            src = ctypes.create_string_buffer(bytes(mv), n)
        else:
            src = (ctypes.c_char * n).from_buffer(mv)
        _check(lib.sluice_stream_copy_from_host(self.handle, dst.handle, dst_offset, src, n))

    def copy_to_host(self, src, length=None, src_offset=0, out=None):
        """Reads ``length`` bytes of ``src`` (blocking) into ``out`` (a writable
        bytes-like object) or a new bytearray, which it returns."""
        if length is None:
            length = src.size - src_offset
        if out is None:
            out = bytearray(length)
        dst = (ctypes.c_char * length).from_buffer(memoryview(out).cast("B"))
        _check(lib.sluice_stream_copy_to_host(self.handle, dst, src.handle, src_offset, length))
        return out

    def memset(self, buffer, value, offset=0, length=None):
        value = operator.index(value)
        if not 0 <= value <= 255:
            raise SluiceError(ERROR_INVALID_ARGUMENT, f"memset value {value} is not a byte (0 to 255)")
        if length is None:
            length = buffer.size - offset
        _check(lib.sluice_stream_memset(self.handle, buffer.handle, offset, value, length))

    def launch(self, function, grid, block, args, reads=(), writes=(), shared_mem_bytes=0):
        """Launches a kernel as one tracked op. ``args``: one per kernel parameter,
        each a ctypes value (``ctypes.c_uint64(n)``) or a Buffer (its device address).
        ``reads``/``writes``: the Buffers it reads and writes."""
        def dim3(v):
            v = (v,) if isinstance(v, int) else tuple(v)
            return (ctypes.c_uint32 * 3)(*(v + (1,) * (3 - len(v))))

        vals = [ctypes.c_uint64(a.device_ptr) if isinstance(a, Buffer) else a for a in args]
        argv = (c_vp * max(len(vals), 1))(*[ctypes.cast(ctypes.byref(v), c_vp) for v in vals])
        dims = LaunchDims(dim3(grid), dim3(block), shared_mem_bytes)
        r, nr = _syncs(list(reads))
        w, nw = _syncs(list(writes))
        _check(
            lib.sluice_stream_launch(
                self.handle, function.handle, ctypes.byref(dims), argv, len(vals), r, nr, w, nw
            )
        )

    def op(self, reads=(), writes=()):
        """A foreign op on this stream (a context manager): on entry the stream waits,
        on the device, for conflicting work on the buffers; on exit the work enqueued
        on ``raw`` in between is published as a use of them."""
        return _ForeignOp(self, list(reads), list(writes))


class _ForeignOp:
    def __init__(self, stream, reads, writes):
        self.stream, self.reads, self.writes = stream, reads, writes
        self.h = None

    def __enter__(self):
        r, nr = _syncs(self.reads)
        w, nw = _syncs(self.writes)
        h = OpH()
        _check(lib.sluice_op_begin(self.stream.handle, r, nr, w, nw, ctypes.byref(h)))
        self.h = h
        return self

    def __exit__(self, *exc):
        h, self.h = self.h, None
        _check(lib.sluice_op_end(h))


# Release callbacks of wrapped memory, by key (the C user_data). One thunk for the
# process: a callback may run after its Buffer is gone, on a library thread.
import threading

_releases = {}
_releases_lock = threading.Lock()
_release_key = 0


@RELEASE_FN
def _release_thunk(user_data):
    with _releases_lock:
        f = _releases.pop(user_data or 0, None)
    if f is not None:
        f()


_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class Buffer(_Owned):
    """Memory a device can reach, with its own sync object: made by ``alloc``,
    ``alloc_pinned``, ``wrap_device`` or ``from_dlpack``. Supports the DLPack
    protocol (``numpy.from_dlpack(buf)``, ``torch.from_dlpack(buf)``)."""

    def __init__(self, handle, device):
        self.device = device
        # The C function itself, not a bound method: a Buffer that held one would
        # be a cycle, freed only when the cycle collector happens to run.
        self._own(handle, lib.sluice_buffer_free)
        self._sync = None
        self._sync_lock = threading.Lock()
        info = BufferInfo()
        _check(lib.sluice_buffer_info(handle, ctypes.byref(info)))
        self.kind, self.size, self.device_ptr = info.kind, info.size, info.device_ptr
        self.host_ptr = info.host_ptr

    def close(self):
        with self._sync_lock:
            s, self._sync = self._sync, None
        try:
            if s is not None:
                _check(lib.sluice_sync_destroy(s))
        finally:
            super().close()

    @classmethod
    def alloc(cls, stream, size):
        h = BufferH()
        _check(lib.sluice_buffer_alloc(stream.handle, size, ctypes.byref(h)))
        return cls(h, stream.device)

    @classmethod
    def alloc_pinned(cls, device, size):
        h = BufferH()
        _check(lib.sluice_buffer_alloc_pinned(device.handle, size, ctypes.byref(h)))
        return cls(h, device)

    @classmethod
    def wrap_device(cls, device, ptr, size, release=None):
        """Wraps device memory someone else owns (``tensor.data_ptr()``). ``release()``
        is called once, after close() and after the buffer's last use completed on
        the device, possibly on a library thread."""
        key = None
        if release is not None:
            with _releases_lock:
                global _release_key
                _release_key += 1
                key = _release_key
                _releases[key] = release
        h = BufferH()
        try:
            _check(
                lib.sluice_buffer_wrap_device(
                    device.handle,
                    ptr,
                    size,
                    _release_thunk if key is not None else RELEASE_FN(),
                    key,
                    ctypes.byref(h),
                )
            )
        except SluiceError:
            if key is not None:
                with _releases_lock:
                    _releases.pop(key, None)
            raise
        return cls(h, device)

    @classmethod
    def from_dlpack(cls, device, obj, stream=None):
        """Imports ``obj`` (anything with ``__dlpack__``, or a DLPack capsule). With
        ``stream``, the producer orders its work before that sluice stream (the DLPack
        stream exchange) and the buffer's first use on any other stream waits for it."""
        cap = obj
        if hasattr(obj, "__dlpack__"):
            raw = None
            if stream is not None and device.backend == BACKEND_CUDA:
                raw = stream.raw
            try:
                cap = obj.__dlpack__(stream=raw, max_version=(1, 1))
            except TypeError:
                cap = obj.__dlpack__(stream=raw)
        ptr, versioned = _dlpack.open_capsule(cap)
        h = BufferH()
        ready_on = stream.handle if stream is not None else StreamH()
        fmt = DLPACK_VERSIONED if versioned else DLPACK_UNVERSIONED
        _check(lib.sluice_buffer_from_dlpack(device.handle, ptr, fmt, ready_on, ctypes.byref(h)))
        _dlpack.mark_used(cap, versioned)
        buf = cls(h, device)
        d = TensorDesc()
        _check(lib.sluice_buffer_tensor(h, ctypes.byref(d)))
        if d.read_only:
            # The library does not enforce the flag, and every write goes through it.
            buf.close()
            raise BufferError("the tensor is read-only; sluice buffers are written in place (copy it first)")
        return buf

    @property
    def sync(self):
        """The buffer's sync object: one handle per Buffer, destroyed by close()."""
        with self._sync_lock:  # one handle, whichever thread asks first
            if self._sync is None:
                s = SyncH()
                _check(lib.sluice_buffer_sync(self.handle, ctypes.byref(s)))
                self._sync = s
            return self._sync

    def wait_read(self):
        """Blocks until the last write to the buffer completed."""
        _check(lib.sluice_sync_wait_read(self.sync))

    def wait_write(self):
        """Blocks until every write and read of the buffer completed."""
        _check(lib.sluice_sync_wait_write(self.sync))

    @property
    def tensor(self):
        """(dtype code, bits, lanes, shape) of a DLPack import, else None."""
        d = TensorDesc()
        try:
            _check(lib.sluice_buffer_tensor(self.handle, ctypes.byref(d)))
        except SluiceError as e:
            if e.code == ERROR_NOT_FOUND:  # not from DLPack
                return None
            raise
        return (d.dtype_code, d.dtype_bits, d.dtype_lanes, tuple(d.shape[i] for i in range(d.ndim)))

    def view(self, dtype, shape):
        """An object that exports this buffer through DLPack with ``dtype`` (a NumPy
        dtype or its name, e.g. ``"float32"``) and ``shape`` instead of 1-D uint8:
        ``numpy.from_dlpack(buf.view("float32", (4, 4)))``."""
        try:
            import numpy as np

            dt = np.dtype(dtype)
            if not dt.isnative:
                raise ValueError(f"{dt} is not in native byte order, which DLPack cannot express")
            kind, bits = dt.kind, dt.itemsize * 8
        except ImportError:
            s = str(dtype)
            kind = {"int": "i", "uint": "u", "float": "f"}[s.rstrip("0123456789")]
            bits = int(s[len(s.rstrip("0123456789")):])
        if kind not in _DTYPE_CODES:
            raise ValueError(f"dtype {dtype!r}: DLPack has no code for kind {kind!r}")
        shape = tuple(int(x) for x in shape)
        return _View(self, (_DTYPE_CODES[kind], bits, shape))

    @staticmethod
    def _desc(view):
        if view is None:
            return None, None
        code, bits, shape = view
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        d = TensorDesc(code, bits, 1, len(shape), ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64)), 0)
        return d, arr

    def __dlpack_device__(self):
        if self.device.backend == BACKEND_HOST:
            return (_dlpack.KDL_CPU, 0)
        if self.kind in (BUFFER_PINNED, BUFFER_REGISTERED):
            return (_dlpack.KDL_CUDA_HOST, 0)
        return (_dlpack.KDL_CUDA, self.device.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None, _view=None):
        """The DLPack protocol. On CUDA, ``stream`` is the consumer's ``CUstream`` as an
        int: it waits on the device for the buffer's pending work (no host sync). The
        legacy (1) and per-thread (2) default streams cannot be adopted, so for them,
        for -1, for None, and on CPU, the call blocks until that work completed."""
        if copy:
            raise BufferError("sluice exports without copying (copy=True asked)")
        dev = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != dev:
            raise BufferError(f"buffer is on DLPack device {dev}, not {tuple(dl_device)}")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        consumer = None
        if isinstance(stream, Stream):
            consumer = stream
        elif dev[0] == _dlpack.KDL_CUDA and isinstance(stream, int) and stream not in (-1, 0, 1, 2):
            consumer = Stream.wrap_external(self.device, stream)
        desc, _shape = self._desc(_view)
        out = c_vp()
        try:
            _check(
                lib.sluice_buffer_to_dlpack(
                    self.handle,
                    consumer.handle if consumer is not None else StreamH(),
                    DLPACK_VERSIONED if versioned else DLPACK_UNVERSIONED,
                    ctypes.byref(desc) if desc is not None else None,
                    ctypes.byref(out),
                )
            )
        finally:
            if consumer is not None and consumer is not stream:
                consumer.close()  # the tensor keeps its own reference
        return _dlpack.capsule(out.value, versioned)

    def __repr__(self):
        kind = {1: "device", 2: "pinned", 3: "registered", 4: "foreign"}.get(self.kind, "?")
        return f"<sluice.Buffer {kind} {self.size} bytes at 0x{self.device_ptr:x}>"


class _View:
    """A buffer seen through DLPack as a given dtype and shape (``Buffer.view``)."""

    def __init__(self, buffer, view):
        self.buffer, self._view = buffer, view

    def __dlpack_device__(self):
        return self.buffer.__dlpack_device__()

    def __dlpack__(self, **kw):
        return self.buffer.__dlpack__(_view=self._view, **kw)


class Module(_Owned):
    """A loaded PTX, cubin or fatbin image (cuda only)."""

    def __init__(self, device, image):
        self.device = device
        data = bytes(image)
        if data and not data.endswith(b"\0") and data.lstrip()[:1] in (b".", b"/"):
            data += b"\0"  # PTX text is NUL-terminated
        h = ModuleH()
        _check(lib.sluice_module_load(device.handle, data, len(data), ctypes.byref(h)))
        self._own(h, lib.sluice_module_unload)

    def function(self, name):
        h = FunctionH()
        _check(lib.sluice_module_get_function(self.handle, name.encode(), ctypes.byref(h)))
        return Function(h, name)


class Function(_Owned):
    def __init__(self, handle, name):
        self.name = name
        self._own(handle, lib.sluice_function_destroy)

    def set_programmatic_launch(self, enabled):
        """Programmatic dependent launch (compute capability 9.0+): later launches may
        start before the kernel ahead of them on their stream completes; the kernel
        waits for it itself with griddepcontrol.wait before touching its data."""
        _check(lib.sluice_function_set_programmatic_launch(self.handle, bool(enabled)))

    def set_max_dynamic_shared_memory(self, nbytes):
        """Lets later launches ask for up to ``nbytes`` of dynamic shared memory per
        block (needed above 48 KiB). More than the device allows with the kernel's
        static shared memory, or ``nbytes`` outside uint32, raises SluiceError
        (ERROR_INVALID_ARGUMENT)."""
        nbytes = operator.index(nbytes)
        if not 0 <= nbytes <= 0xFFFF_FFFF:
            raise SluiceError(ERROR_INVALID_ARGUMENT, f"{nbytes} bytes out of range")
        _check(lib.sluice_function_set_max_dynamic_shared_memory(self.handle, nbytes))

    def set_non_portable_cluster_size_allowed(self, allowed=True):
        """Lets later launches use a thread block cluster larger than the portable 8
        blocks (the kernel's ``__cluster_dims__``), up to what the device supports;
        such a launch may fail on other devices. Enabling it below compute
        capability 9.0 raises SluiceError (ERROR_UNSUPPORTED)."""
        _check(lib.sluice_function_set_non_portable_cluster_size_allowed(self.handle, bool(allowed)))

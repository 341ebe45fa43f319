"""Loading libsluice and declaring the C functions the package calls (ctypes)."""

import ctypes
import ctypes.util
import os

c_u32, c_u64, c_i32, c_sz, c_vp = (
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_int32,
    ctypes.c_size_t,
    ctypes.c_void_p,
)


class Handle(ctypes.Structure):
    """A typed `{ uint64_t bits; }` handle, passed by value as in sluice.h."""

    _fields_ = [("bits", c_u64)]


# One class per handle type, so that ctypes refuses a stream where a buffer is
# expected, as a C compiler would.
class DeviceH(Handle): pass
class StreamH(Handle): pass
class BufferH(Handle): pass
class SyncH(Handle): pass
class OpH(Handle): pass
class ModuleH(Handle): pass
class FunctionH(Handle): pass


class DeviceProps(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("total_memory", c_u64),
        ("compute_capability_major", c_i32),
        ("compute_capability_minor", c_i32),
        ("multiprocessor_count", c_i32),
        ("backend", c_u32),
        ("ordinal", c_u32),
    ]


class BufferInfo(ctypes.Structure):
    _fields_ = [("kind", c_u32), ("size", c_u64), ("device_ptr", c_u64), ("host_ptr", c_vp)]


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("dtype_code", ctypes.c_uint8),
        ("dtype_bits", ctypes.c_uint8),
        ("dtype_lanes", ctypes.c_uint16),
        ("ndim", c_i32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("read_only", c_u32),
    ]


class LaunchDims(ctypes.Structure):
    _fields_ = [("grid", c_u32 * 3), ("block", c_u32 * 3), ("shared_mem_bytes", c_u32)]


RELEASE_FN = ctypes.CFUNCTYPE(None, c_vp)

ERR = c_vp  # sluice_error_t*, NULL on success

_SIGNATURES = {
    "sluice_version": (ctypes.c_char_p, []),
    "sluice_error_code": (c_u32, [c_vp]),
    "sluice_error_message": (ctypes.c_char_p, [c_vp]),
    "sluice_error_code_name": (ctypes.c_char_p, [c_u32]),
    "sluice_error_free": (None, [c_vp]),
    "sluice_live_handles": (c_u64, []),
    "sluice_device_open": (ERR, [c_u32, c_u32, ctypes.POINTER(DeviceH)]),
    "sluice_device_open_default": (ERR, [ctypes.POINTER(DeviceH)]),
    "sluice_device_close": (ERR, [DeviceH]),
    "sluice_device_props": (ERR, [DeviceH, ctypes.POINTER(DeviceProps)]),
    "sluice_device_wait_all": (ERR, [DeviceH]),
    "sluice_stream_create": (ERR, [DeviceH, c_u32, c_i32, ctypes.POINTER(StreamH)]),
    "sluice_stream_wrap_external": (ERR, [DeviceH, c_vp, ctypes.POINTER(StreamH)]),
    "sluice_stream_raw": (ERR, [StreamH, ctypes.POINTER(c_vp)]),
    "sluice_stream_destroy": (ERR, [StreamH]),
    "sluice_stream_synchronize": (ERR, [StreamH]),
    "sluice_buffer_alloc": (ERR, [StreamH, c_sz, ctypes.POINTER(BufferH)]),
    "sluice_buffer_alloc_pinned": (ERR, [DeviceH, c_sz, ctypes.POINTER(BufferH)]),
    "sluice_buffer_wrap_device": (
        ERR,
        [DeviceH, c_u64, c_sz, RELEASE_FN, c_vp, ctypes.POINTER(BufferH)],
    ),
    "sluice_buffer_free": (ERR, [BufferH]),
    "sluice_buffer_info": (ERR, [BufferH, ctypes.POINTER(BufferInfo)]),
    "sluice_buffer_sync": (ERR, [BufferH, ctypes.POINTER(SyncH)]),
    "sluice_buffer_tensor": (ERR, [BufferH, ctypes.POINTER(TensorDesc)]),
    "sluice_buffer_from_dlpack": (ERR, [DeviceH, c_vp, c_u32, StreamH, ctypes.POINTER(BufferH)]),
    "sluice_buffer_to_dlpack": (
        ERR,
        [BufferH, StreamH, c_u32, ctypes.POINTER(TensorDesc), ctypes.POINTER(c_vp)],
    ),
    "sluice_dlpack_capsule_destructor": (None, [c_vp]),
    "sluice_sync_destroy": (ERR, [SyncH]),
    "sluice_sync_wait_read": (ERR, [SyncH]),
    "sluice_sync_wait_write": (ERR, [SyncH]),
    "sluice_op_begin": (
        ERR,
        [StreamH, ctypes.POINTER(SyncH), c_sz, ctypes.POINTER(SyncH), c_sz, ctypes.POINTER(OpH)],
    ),
    "sluice_op_end": (ERR, [OpH]),
    "sluice_stream_copy": (ERR, [StreamH, BufferH, c_sz, BufferH, c_sz, c_sz]),
    "sluice_stream_copy_from_host": (ERR, [StreamH, BufferH, c_sz, c_vp, c_sz]),
    "sluice_stream_copy_to_host": (ERR, [StreamH, c_vp, BufferH, c_sz, c_sz]),
    "sluice_stream_memset": (ERR, [StreamH, BufferH, c_sz, ctypes.c_uint8, c_sz]),
    "sluice_module_load": (ERR, [DeviceH, c_vp, c_sz, ctypes.POINTER(ModuleH)]),
    "sluice_module_unload": (ERR, [ModuleH]),
    "sluice_module_get_function": (ERR, [ModuleH, ctypes.c_char_p, ctypes.POINTER(FunctionH)]),
    "sluice_function_destroy": (ERR, [FunctionH]),
    "sluice_function_set_programmatic_launch": (ERR, [FunctionH, ctypes.c_bool]),
    "sluice_function_set_max_dynamic_shared_memory": (ERR, [FunctionH, ctypes.c_uint32]),
    "sluice_function_set_non_portable_cluster_size_allowed": (ERR, [FunctionH, ctypes.c_bool]),
    "sluice_stream_launch": (
        ERR,
        [
            StreamH,
            FunctionH,
            ctypes.POINTER(LaunchDims),
            ctypes.POINTER(c_vp),
            c_sz,
            ctypes.POINTER(SyncH),
            c_sz,
            ctypes.POINTER(SyncH),
            c_sz,
        ],
    ),
}


def _candidates():
    env = os.environ.get("SLUICE_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libsluice.so", "libsluice.so.0", "libsluice.dylib"):
        yield os.path.join(here, name)
    found = ctypes.util.find_library("sluice")
    if found:
        yield found


def load():
    """Opens libsluice: $SLUICE_LIBRARY, else a copy next to this package, else the
    system's (ld.so's search path)."""
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (res, args) in _SIGNATURES.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        return lib
    raise ImportError(
        "sluice: libsluice.so not found; set SLUICE_LIBRARY to its path (tried: "
        + ", ".join(tried or ["nothing"])
        + ")"
    )


lib = load()

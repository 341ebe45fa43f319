"""PyCapsules for DLPack, through the CPython C API (ctypes.pythonapi)."""

import ctypes

from ._lib import c_vp, lib

# The capsule names of the DLPack protocol. Kept alive for the process: a capsule
# keeps a pointer to its name, not a copy.
VERSIONED = ctypes.c_char_p(b"dltensor_versioned")
UNVERSIONED = ctypes.c_char_p(b"dltensor")
USED_VERSIONED = ctypes.c_char_p(b"used_dltensor_versioned")
USED_UNVERSIONED = ctypes.c_char_p(b"used_dltensor")

# DLDeviceType values.
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13

_api = ctypes.pythonapi
_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_vp)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_vp, ctypes.c_char_p, _DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [c_vp, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = c_vp
_api.PyCapsule_GetPointer.argtypes = [c_vp, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [c_vp, ctypes.c_char_p]

_DELETER = ctypes.CFUNCTYPE(None, c_vp)


# The deleter's offset: DLManagedTensorVersioned {version(8), manager_ctx(8),
# deleter, ...}; DLManagedTensor {DLTensor(48), manager_ctx(8), deleter}.
_DELETER_OFFSET = {True: 16, False: 56}


def call_deleter(ptr, versioned):
    """Calls a managed tensor's deleter (if any)."""
    fp = ctypes.c_void_p.from_address(ptr + _DELETER_OFFSET[versioned]).value
    if fp:
        _DELETER(fp)(ptr)


# The destructor is the library's, in native code: CPython may destroy a capsule
# while an exception is pending, when a ctypes callback cannot run (it clears the
# exception, and the interpreter then fails or crashes).
_destroy = _DESTRUCTOR(ctypes.cast(lib.sluice_dlpack_capsule_destructor, c_vp).value)


def capsule(ptr, versioned):
    """Wraps a managed tensor in a DLPack capsule that deletes it if unconsumed."""
    return _api.PyCapsule_New(ptr, VERSIONED if versioned else UNVERSIONED, _destroy)


def _addr(obj):
    return id(obj)  # CPython: the object's address


def open_capsule(cap):
    """(pointer, versioned) of an unconsumed DLPack capsule."""
    if type(cap).__name__ != "PyCapsule":
        raise TypeError(f"expected a DLPack capsule or an object with __dlpack__, got {type(cap)!r}")
    a = _addr(cap)
    for name, versioned in ((VERSIONED, True), (UNVERSIONED, False)):
        if _api.PyCapsule_IsValid(a, name):
            return _api.PyCapsule_GetPointer(a, name), versioned
    raise ValueError("not an unconsumed DLPack capsule (already used, or another kind)")


def mark_used(cap, versioned):
    """Renames a consumed capsule, so that its destructor leaves the tensor alone."""
    _api.PyCapsule_SetName(_addr(cap), USED_VERSIONED if versioned else USED_UNVERSIONED)

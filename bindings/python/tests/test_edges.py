"""Edges of the Python package found by the thirty-sixth session's review: a
buffer's sync handle made once under concurrent first use, memset's byte range,
read-only DLPack imports, byte order in views, the library's error messages."""

import sys
import threading

import numpy as np
import pytest

import sluice




def test_lazy_sync_handle_is_not_leaked_by_concurrent_first_use(stream):
    """Threads that touch a new buffer's sync at once make one handle: each made its
    own before, all but the last never destroyed."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        leaked = 0
        for _ in range(100):
            live = sluice.live_handles()
            b = sluice.Buffer.alloc(stream, 16)
            bar = threading.Barrier(8)

            def work():
                bar.wait()
                with stream.op(reads=[b]):
                    pass

            ts = [threading.Thread(target=work) for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            b.close()
            leaked += sluice.live_handles() - live
    finally:
        sys.setswitchinterval(old)
    assert leaked == 0, f"{leaked} sync handles leaked over 100 buffers"


def test_memset_value_out_of_byte_range_is_rejected(stream):
    """memset's value is a byte: 300 wrote 44 (a c_uint8 masks), -1 wrote 255."""
    with sluice.Buffer.alloc(stream, 4) as b:
        stream.memset(b, 0)
        with pytest.raises((ValueError, OverflowError, sluice.SluiceError)):
            stream.memset(b, 300)
        assert bytes(stream.copy_to_host(b)) == b"\0\0\0\0", bytes(stream.copy_to_host(b))


def test_read_only_dlpack_import_is_refused(dev, stream):
    """A read-only tensor (NumPy exports one only through the versioned protocol)
    is refused: the library does not enforce the flag and every sluice write goes
    through a buffer in place. It rewrote an immutable bytes object before."""
    data = bytes(range(97, 105))  # made at run time (not a shared constant)
    ro = np.frombuffer(data, dtype=np.uint8)
    assert not ro.flags.writeable
    live = sluice.live_handles()
    with pytest.raises(BufferError, match="read-only"):
        sluice.Buffer.from_dlpack(dev, ro)
    assert sluice.live_handles() == live
    assert data == b"abcdefgh"
    rw = np.arange(8, dtype=np.uint8)
    with sluice.Buffer.from_dlpack(dev, rw) as b:  # writable arrays still import
        assert b.size == 8


def test_view_with_non_native_byte_order_is_refused(stream):
    """DLPack cannot express byte order: a big-endian view would read wrong values."""
    with sluice.Buffer.alloc(stream, 4) as b:
        with pytest.raises(ValueError, match="byte order"):
            b.view(">u4", (1,))
        with pytest.raises(ValueError, match="no code"):
            b.view("U1", (1,))
        assert b.view("<u4" if sys.byteorder == "little" else ">u4", (1,)) is not None


def test_tensor_error_keeps_the_library_message(dev, stream):
    """Buffer.tensor raises with the library's message, which it dropped before."""
    b = sluice.Buffer.alloc(stream, 8)
    stale = sluice.Buffer.__new__(sluice.Buffer)
    stale.device, stale._sync = dev, None
    stale._h = sluice.BufferH(b.handle.bits)
    b.close()
    with pytest.raises(sluice.SluiceError) as ei:
        stale.tensor
    stale._h = None  # not ours to free
    assert ei.value.code == sluice.ERROR_INVALID_HANDLE
    assert ei.value.message != "sluice_buffer_tensor", ei.value.message

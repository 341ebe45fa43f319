"""The Python package on the host backend, with NumPy: buffers, streams, errors,
wrapped memory, and DLPack both ways."""

import ctypes
import gc
import threading
import time

import numpy as np
import pytest

import sluice




def wait_for(pred, what):
    end = time.monotonic() + 10
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_device_is_host(dev):
    assert dev.backend == sluice.BACKEND_HOST
    assert sluice.version().count(".") == 2


def test_copies_memset_and_read_back(stream):
    data = bytes(range(256)) * 4
    with sluice.Buffer.alloc(stream, len(data)) as a, sluice.Buffer.alloc(stream, len(data)) as b:
        stream.copy_from_host(a, data)
        stream.memset(a, 0xFF, offset=10, length=6)
        stream.copy(b, a)
        out = stream.copy_to_host(b)
    want = bytearray(data)
    want[10:16] = b"\xff" * 6
    assert out == want


def test_errors_carry_code_and_message(dev, stream):
    with sluice.Buffer.alloc(stream, 16) as b:
        with pytest.raises(sluice.SluiceError) as ei:
            stream.copy_to_host(b, length=32)
        e = ei.value
        assert e.code == sluice.ERROR_OUT_OF_RANGE
        assert e.name == "SLUICE_ERROR_OUT_OF_RANGE"
        assert "outside" in e.message
    b.close()  # idempotent
    with pytest.raises(sluice.SluiceError) as ei:
        stream.memset(b, 0)
    assert ei.value.code == sluice.ERROR_INVALID_HANDLE
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Module(dev, b"// not PTX\n")
    assert ei.value.code == sluice.ERROR_UNSUPPORTED
    assert "host" in ei.value.message
    # A function handle that names no function: the C call refuses it.
    stale = sluice.Function(sluice._lib.FunctionH(0xDEAD_BEEF_0000_0001), "stale")
    with pytest.raises(sluice.SluiceError) as ei:
        stale.set_programmatic_launch(True)
    assert ei.value.code == sluice.ERROR_INVALID_HANDLE
    with pytest.raises(sluice.SluiceError) as ei:
        stale.set_max_dynamic_shared_memory(64 * 1024)
    assert ei.value.code == sluice.ERROR_INVALID_HANDLE
    with pytest.raises(sluice.SluiceError) as ei:
        stale.set_non_portable_cluster_size_allowed(True)
    assert ei.value.code == sluice.ERROR_INVALID_HANDLE
    for bad in (-1, 1 << 32):  # outside uint32: refused before the C call
        with pytest.raises(sluice.SluiceError) as ei:
            stale.set_max_dynamic_shared_memory(bad)
        assert ei.value.code == sluice.ERROR_INVALID_ARGUMENT
    stale._h = None  # not ours to destroy


def test_numpy_reads_a_buffer_through_dlpack(stream):
    with sluice.Buffer.alloc(stream, 64) as b:
        stream.copy_from_host(b, np.arange(16, dtype=np.uint32))
        stream.memset(b, 0, offset=0, length=4)  # element 0 -> 0
        a = np.from_dlpack(b.view("uint32", (4, 4)))  # host waits for the writes
        assert a.shape == (4, 4) and a.dtype == np.uint32
        want = np.arange(16, dtype=np.uint32).reshape(4, 4)
        want[0, 0] = 0
        np.testing.assert_array_equal(a, want)
        # Default export: 1-D uint8 of the whole buffer; zero copy.
        raw = np.from_dlpack(b)
        assert raw.dtype == np.uint8 and raw.shape == (64,)
        assert raw.ctypes.data == b.device_ptr
        assert b.__dlpack_device__() == (1, 0)
    # The array keeps the memory alive after close().
    np.testing.assert_array_equal(a, want)
    del a, raw
    gc.collect()


def test_buffer_from_numpy_shares_memory_and_releases_the_array(dev, stream):
    arr = np.zeros((8, 2), dtype=np.float32)
    b = sluice.Buffer.from_dlpack(dev, arr)
    assert b.kind == sluice.BUFFER_FOREIGN
    assert b.size == arr.nbytes
    assert b.device_ptr == arr.ctypes.data
    assert b.tensor == (2, 32, 1, (8, 2))
    stream.copy_from_host(b, np.full(16, 2.5, dtype=np.float32))
    b.wait_read()
    np.testing.assert_array_equal(arr, np.full((8, 2), 2.5, dtype=np.float32))
    # numpy -> sluice -> numpy: the same memory all the way.
    back = np.from_dlpack(b)
    assert back.ctypes.data == arr.ctypes.data
    b.close()
    del back
    gc.collect()


def test_an_unconsumed_capsule_deletes_its_tensor(stream):
    live = sluice.live_handles()
    b = sluice.Buffer.alloc(stream, 8)
    cap = b.__dlpack__(max_version=(1, 0))
    b.close()
    del cap  # the capsule's destructor calls the deleter: the memory goes
    gc.collect()
    assert sluice.live_handles() == live


def test_dlpack_rejects_what_it_cannot_share(dev, stream):
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Buffer.from_dlpack(dev, np.zeros((4, 4), dtype=np.int32)[:, 1])
    assert ei.value.code == sluice.ERROR_INVALID_ARGUMENT
    assert "not compact" in ei.value.message
    with sluice.Buffer.alloc(stream, 8) as b:
        with pytest.raises(sluice.SluiceError) as ei:
            b.view("uint32", (3,)).__dlpack__()
        assert ei.value.code == sluice.ERROR_OUT_OF_RANGE
        with pytest.raises(BufferError):
            b.__dlpack__(copy=True)


def test_wrapped_memory_is_released_once_after_its_last_use(dev, stream):
    backing = np.zeros(1024, dtype=np.uint8)
    calls = []
    done = threading.Event()

    def release():
        calls.append(threading.current_thread().name)
        done.set()

    b = sluice.Buffer.wrap_device(dev, backing.ctypes.data, backing.nbytes, release)
    assert b.kind == sluice.BUFFER_FOREIGN
    stream.memset(b, 7)
    stream.synchronize()
    assert calls == []
    b.close()
    assert done.wait(10)
    time.sleep(0.02)
    assert len(calls) == 1
    assert (backing == 7).all()
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Buffer.wrap_device(dev, 0, 16, release)
    assert ei.value.code == sluice.ERROR_NULL_ARGUMENT


def test_one_sync_handle_per_buffer_and_foreign_ops(stream):
    live = sluice.live_handles()
    b = sluice.Buffer.alloc(stream, 16)
    s1, s2 = b.sync, b.sync
    assert s1 is s2
    assert sluice.live_handles() == live + 2  # the buffer and its one sync handle
    with stream.op(writes=[b]):
        pass  # foreign work on stream.raw would go here
    b.close()
    assert sluice.live_handles() == live


def test_streams_from_threads(dev):
    errors = []

    def work(i):
        try:
            with sluice.Stream(dev) as s, sluice.Buffer.alloc(s, 32) as b:
                s.memset(b, i)
                assert s.copy_to_host(b) == bytearray([i] * 32)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []

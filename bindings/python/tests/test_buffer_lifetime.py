"""A dropped Buffer is freed at once by reference counting: it held its own bound
method as its release function, a cycle that only the cycle collector freed (the
thirty-sixth session's review)."""

import gc
import weakref

import sluice


def test_dropped_buffer_is_freed_without_gc(stream):
    gc.collect()
    live = sluice.live_handles()
    b = sluice.Buffer.alloc(stream, 1 << 20)
    b.sync  # the buffer and its sync handle: 2 handles
    ref = weakref.ref(b)
    assert sluice.live_handles() == live + 2
    del b
    # Device, Stream (no self-reference) are freed here by refcounting; a Buffer is not.
    assert ref() is None, "Buffer still alive after its last reference was dropped"
    assert sluice.live_handles() == live, "buffer handles outlive the Buffer object"


def test_repeated_alloc_and_drop_does_not_accumulate(stream):
    gc.collect()
    live = sluice.live_handles()
    for _ in range(16):
        b = sluice.Buffer.alloc(stream, 32 << 20)
        stream.memset(b, 1)
        del b
    stream.synchronize()
    held = sluice.live_handles() - live
    gc.collect()
    assert held == 0, f"{held} dropped 32 MiB buffers still allocated (freed only by gc.collect())"

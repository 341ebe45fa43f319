//! Buffers and copies.

use super::*;
use crate::memory::Buffer;
use std::ffi::c_void;

/// A buffer: device, pinned or registered host memory, with its own sync object.
/// Thread safety: may be used from any thread at once.
/// Under the hood: `Arc<Buffer>`; freeing it while streams still use it is safe.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_buffer_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// What a buffer is and where it lives.
#[repr(C)]
pub struct sluice_buffer_info_t {
    /// `SLUICE_BUFFER_*`.
    pub kind: u32,
    /// Size in bytes.
    pub size: u64,
    /// Device address (`CUdeviceptr`) for device and foreign buffers; the host
    /// address otherwise. On the host backend (`SLUICE_BACKEND_HOST`) every buffer's
    /// memory, "device" memory included, is ordinary host memory, and this address
    /// may be dereferenced on the host (after `sluice_sync_wait_read` or
    /// `sluice_sync_wait_write` on the buffer's sync object, as for pinned memory);
    /// on cuda a device address must not be.
    pub device_ptr: u64,
    /// Host address for pinned and registered buffers; NULL for device and foreign
    /// buffers (on either backend: use `device_ptr` on host, as above).
    pub host_ptr: *mut c_void,
}

/// Allocates `size` bytes of device memory, ordered on `stream` (`cuMemAllocAsync`).
/// The buffer's free is ordered on the same stream, after every use on any stream.
/// Ownership: the caller owns the new handle and frees it with `sluice_buffer_free`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`buffer_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`); `SLUICE_ERROR_CAPTURE_UNSUPPORTED`
/// (`stream` is capturing); `SLUICE_ERROR_OUT_OF_MEMORY` (the device has not `size`
/// bytes left).
#[no_mangle]
pub extern "C" fn sluice_buffer_alloc(
    stream: sluice_stream_t,
    size: usize,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_alloc", || {
        out_new(buffer_out, "buffer_out", || {
            Buffer::alloc(&get(stream)?, size)
        })
    })
}

/// Takes `size` bytes of pinned host memory from the device's bounded caching pool.
/// Ownership: the caller owns the new handle and frees it with `sluice_buffer_free`.
/// Before writing it from the host after a copy read it, call
/// `sluice_sync_wait_write` on its sync object.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`buffer_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`); `SLUICE_ERROR_OUT_OF_MEMORY` (the
/// host has not `size` bytes left).
#[no_mangle]
pub extern "C" fn sluice_buffer_alloc_pinned(
    device: sluice_device_t,
    size: usize,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_alloc_pinned", || {
        out_new(buffer_out, "buffer_out", || {
            Buffer::alloc_pinned(&get(device)?, size)
        })
    })
}

/// Registers caller-owned host memory `[ptr, ptr+len)` so copies to and from it are
/// asynchronous. Ownership: the caller keeps owning the memory and must keep it
/// alive until `sluice_buffer_free` of the new handle, which waits for copies that
/// still use it (freed while a foreign op on its sync object is open: until that
/// op's `sluice_op_end`, which then waits for the op's work and unregisters it).
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`ptr` or `buffer_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_buffer_register_host(
    device: sluice_device_t,
    ptr: *mut c_void,
    len: usize,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_register_host", || {
        out_new(buffer_out, "buffer_out", || {
            let d = get(device)?;
            // SAFETY: the caller promises the range stays valid for the buffer's life.
            unsafe { Buffer::register(&d, ptr as *mut u8, len) }
        })
    })
}

/// The function that releases foreign memory: called once with its `user_data`.
pub type sluice_release_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Wraps device memory that someone else allocated and owns (for example a
/// libtorch tensor's storage) as a buffer: `[device_ptr, device_ptr+len)`, with its
/// own sync object, usable by copies, memsets and launches like any buffer.
///
/// `release_fn(user_data)` (may be NULL) runs exactly once, after
/// `sluice_buffer_free` of the handle (and the destruction of every graph that
/// captured the buffer) AND after every use of the buffer that sluice ordered has
/// completed on the device, including the work of a foreign op open on its sync
/// object at the free (the release then waits for that op's `sluice_op_end`). It
/// never blocks the freeing thread: when uses are still in flight it runs later on
/// a library thread ("sluice-release"), otherwise inside the call that dropped the
/// last reference (or that `sluice_op_end`). It may call sluice and CUDA; it must
/// not wait for work that waits on this buffer. Work the owner enqueued itself,
/// outside sluice, is not tracked: order it with `sluice_op_begin`/`sluice_op_end`
/// on the buffer's sync object, as for any buffer.
///
/// On cuda the range must be memory of `device`'s context, checked with
/// `cuPointerGetAttribute`. On host any non-NULL address is taken: host-backend
/// "device" memory is host memory.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`device_ptr` 0 or `buffer_out` NULL);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`len` 0, or on cuda a pointer the driver does
/// not know); `SLUICE_ERROR_OUT_OF_RANGE` (the range wraps, or runs past the end of
/// its allocation); `SLUICE_ERROR_WRONG_DEVICE` (memory of another device);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale device). On any error `release_fn` is
/// not called: the caller still owns the memory.
///
/// Ownership: the caller owns the new handle and frees it with `sluice_buffer_free`.
#[no_mangle]
pub extern "C" fn sluice_buffer_wrap_device(
    device: sluice_device_t,
    device_ptr: u64,
    len: usize,
    release_fn: sluice_release_fn,
    user_data: *mut c_void,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_wrap_device", || {
        out_new(buffer_out, "buffer_out", || {
            let d = get(device)?;
            let release = release_fn.map(|f| crate::memory::Release::c_fn(f, user_data));
            Buffer::wrap_device(&d, device_ptr, len, release, None, None)
        })
    })
}

/// Frees a buffer handle. Ownership: the handle ends now; the memory is released
/// in stream order after every outstanding use (pinned memory returns to the pool),
/// or when the last graph that captured it is destroyed. While a foreign op on the
/// buffer's sync object is still open (between `sluice_op_begin` and
/// `sluice_op_end`), its work is not known yet: the memory is kept until the last
/// such op ends, and that `sluice_op_end` releases it, ordered after the op's work
/// too (for registered memory, that `sluice_op_end` waits for the work, as this
/// call otherwise does).
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `buffer`, or a second free).
#[no_mangle]
pub extern "C" fn sluice_buffer_free(buffer: sluice_buffer_t) -> *mut sluice_error_t {
    boundary("sluice_buffer_free", || remove(buffer).map(drop))
}

/// Writes what the buffer is and where it lives.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`info_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `buffer`).
#[no_mangle]
pub extern "C" fn sluice_buffer_info(
    buffer: sluice_buffer_t,
    info_out: *mut sluice_buffer_info_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_info", || {
        let out = out_ptr(info_out, "info_out")?;
        let b = get(buffer)?;
        write_out(
            out,
            sluice_buffer_info_t {
                kind: b.kind as u32,
                size: b.size as u64,
                device_ptr: b.addr,
                host_ptr: b
                    .host_ptr()
                    .map_or(std::ptr::null_mut(), |p| p as *mut c_void),
            },
        );
        Ok(())
    })
}

/// Writes a new handle to the buffer's sync object, for `sluice_op_begin` and the
/// host waits.
///
/// Ownership: each call gives a NEW handle, which the caller destroys with
/// `sluice_sync_destroy`; calling it twice gives two handles to the same object and
/// needs two destroys (`sluice_live_handles` counts both). Destroying a handle only
/// ends that handle: the buffer and its other sync handles are unaffected. A sync
/// handle keeps the object alive after `sluice_buffer_free`, but not the memory.
/// Get it once per buffer and keep it beside the buffer handle.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`sync_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `buffer`).
#[no_mangle]
pub extern "C" fn sluice_buffer_sync(
    buffer: sluice_buffer_t,
    sync_out: *mut sluice_sync_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_sync", || {
        out_new(sync_out, "sync_out", || Ok(get(buffer)?.sync.clone()))
    })
}

/// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset` on
/// `stream`: any direction between device, pinned and registered buffers. An
/// out-of-range copy fails with `SLUICE_ERROR_OUT_OF_RANGE` and changes nothing;
/// overlapping ranges of one buffer give `SLUICE_ERROR_INVALID_ARGUMENT`; a zero
/// length is a no-op.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `dst`, `src`);
/// `SLUICE_ERROR_OUT_OF_RANGE` (a range past a buffer's end; nothing changes);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (overlapping ranges of one buffer);
/// `SLUICE_ERROR_WRONG_DEVICE` (a buffer of another device).
#[no_mangle]
pub extern "C" fn sluice_stream_copy(
    stream: sluice_stream_t,
    dst: sluice_buffer_t,
    dst_offset: usize,
    src: sluice_buffer_t,
    src_offset: usize,
    len: usize,
) -> *mut sluice_error_t {
    boundary("sluice_stream_copy", || {
        let pin = crate::epoch::pin();
        let d = pinned(&pin, dst).map_err(|e| e.context("dst"))?;
        let sb = pinned(&pin, src).map_err(|e| e.context("src"))?;
        let s = pinned(&pin, stream)?;
        crate::ops::copy(s, d, dst_offset, sb, src_offset, len)
    })
}

/// Copies `len` bytes from pageable host memory `src` into `dst` at `dst_offset`.
/// Returns once `src` may be reused; the device write is ordered on `stream`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`src` NULL with `len` > 0);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `dst`); `SLUICE_ERROR_OUT_OF_RANGE`
/// (a range past `dst`'s end); `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (`stream` is
/// capturing: pageable copies are not captured); `SLUICE_ERROR_WRONG_DEVICE` (a buffer
/// of another device).
#[no_mangle]
pub extern "C" fn sluice_stream_copy_from_host(
    stream: sluice_stream_t,
    dst: sluice_buffer_t,
    dst_offset: usize,
    src: *const c_void,
    len: usize,
) -> *mut sluice_error_t {
    boundary("sluice_stream_copy_from_host", || {
        let s = get(stream)?;
        let d = get(dst).map_err(|e| e.context("dst"))?;
        let bytes = slice_in(src as *const u8, len, "src")?;
        crate::ops::copy_from_host(&s, &d, dst_offset, bytes)
    })
}

/// Copies `len` bytes of `src` at `src_offset` into pageable host memory `dst`.
/// Blocks until the bytes have arrived.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`dst` NULL with `len` > 0);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `src`); `SLUICE_ERROR_OUT_OF_RANGE`
/// (a range past `src`'s end); `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (`stream` is
/// capturing); `SLUICE_ERROR_WRONG_DEVICE` (a buffer of another device).
#[no_mangle]
pub extern "C" fn sluice_stream_copy_to_host(
    stream: sluice_stream_t,
    dst: *mut c_void,
    src: sluice_buffer_t,
    src_offset: usize,
    len: usize,
) -> *mut sluice_error_t {
    boundary("sluice_stream_copy_to_host", || {
        let s = get(stream)?;
        let sb = get(src).map_err(|e| e.context("src"))?;
        let out = slice_out(dst as *mut u8, len, "dst")?;
        crate::ops::copy_to_host(&s, out, &sb, src_offset)
    })
}

/// Sets `len` bytes of `buffer` at `offset` to `value`, in order on `stream`.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `buffer`);
/// `SLUICE_ERROR_OUT_OF_RANGE` (a range past the buffer's end);
/// `SLUICE_ERROR_WRONG_DEVICE` (a buffer of another device).
#[no_mangle]
pub extern "C" fn sluice_stream_memset(
    stream: sluice_stream_t,
    buffer: sluice_buffer_t,
    offset: usize,
    value: u8,
    len: usize,
) -> *mut sluice_error_t {
    boundary("sluice_stream_memset", || {
        let pin = crate::epoch::pin();
        let b = pinned(&pin, buffer)?;
        let s = pinned(&pin, stream)?;
        crate::ops::memset(s, b, offset, value, len)
    })
}

//! Streams and host callbacks.

use super::*;
use crate::error::{Error, ErrorCode};
use crate::stream::Stream;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

/// Stream flag: do not synchronise with the legacy default stream.
pub const SLUICE_STREAM_NON_BLOCKING: u32 = 1;

/// A stream handle. Every operation names its stream explicitly; there is no
/// current stream. Thread safety: may be used from any thread at once.
/// Under the hood: `Arc<Stream>`; work already enqueued keeps it alive.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_stream_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// Counters of a stream.
#[repr(C)]
pub struct sluice_stream_stats_t {
    /// Process-unique id of the stream (named in error messages as `stream #id`).
    pub id: u64,
    /// Stream waits inserted by the dependency engine and `sluice_stream_wait_event`.
    pub waits: u64,
    /// Events recorded from the stream's pool.
    pub records: u64,
    /// Events created because the pool had none free.
    pub events_created: u64,
    /// Host synchronisations made by the `SLUICE_ENGINE_SYNC` mode.
    pub engine_syncs: u64,
}

/// A host callback. It runs in stream order on a driver thread and must not call
/// sluice or CUDA. Returning non-zero reports `SLUICE_ERROR_CALLBACK_FAILED` at the
/// stream's next synchronisation.
pub type sluice_host_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>;

/// Creates a stream on `device`. `flags` is 0 or `SLUICE_STREAM_NON_BLOCKING`;
/// `priority` is clamped into `sluice_device_priority_range`. Ownership: the caller
/// owns the new handle and destroys it with `sluice_stream_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stream_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`); `SLUICE_ERROR_INVALID_ARGUMENT`
/// (unknown `flags` bits).
#[no_mangle]
pub extern "C" fn sluice_stream_create(
    device: sluice_device_t,
    flags: u32,
    priority: i32,
    stream_out: *mut sluice_stream_t,
) -> *mut sluice_error_t {
    boundary("sluice_stream_create", || {
        out_new(stream_out, "stream_out", || {
            Stream::create(&get(device)?, flags, priority)
        })
    })
}

/// Adopts a foreign `CUstream` (for example libtorch's). Ownership: the caller owns
/// the new handle, and the foreign stream stays its owner's: destroying the sluice
/// handle leaves it alone. The legacy and
/// per-thread default streams are refused. On host, `raw` must come from
/// `sluice_stream_raw` of a live host stream.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stream_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`); `SLUICE_ERROR_INVALID_ARGUMENT`
/// (`raw` NULL or another default stream: the legacy and per-thread default streams
/// are refused; on host, a `raw` that is not a live host stream's);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (`raw` is the raw stream of a sluice stream
/// that is capturing a graph).
#[no_mangle]
pub extern "C" fn sluice_stream_wrap_external(
    device: sluice_device_t,
    raw: *mut c_void,
    stream_out: *mut sluice_stream_t,
) -> *mut sluice_error_t {
    boundary("sluice_stream_wrap_external", || {
        out_new(stream_out, "stream_out", || {
            Stream::wrap_external(&get(device)?, raw as u64)
        })
    })
}

/// Writes the underlying `CUstream` (an opaque pointer on host) so callers can run
/// foreign work on it. It stays valid while the stream handle lives.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`raw_out` NULL); `SLUICE_ERROR_INVALID_HANDLE`
/// (a stale `stream`).
#[no_mangle]
pub extern "C" fn sluice_stream_raw(
    stream: sluice_stream_t,
    raw_out: *mut *mut c_void,
) -> *mut sluice_error_t {
    boundary("sluice_stream_raw", || {
        out_value(raw_out, "raw_out", || Ok(get(stream)?.raw() as *mut c_void))
    })
}

/// Destroys a stream handle. Ownership: the handle ends now; work already enqueued
/// completes, and memory it uses stays valid until then. A second destroy gives `SLUICE_ERROR_INVALID_HANDLE`.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_stream_destroy(stream: sluice_stream_t) -> *mut sluice_error_t {
    boundary("sluice_stream_destroy", || {
        remove(stream).map(|s| crate::capture::abort_on_destroy(&s))
    })
}

/// Writes true to `idle_out` when all work enqueued so far has completed.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`idle_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`); `SLUICE_ERROR_CAPTURE_UNSUPPORTED`
/// (`stream` is capturing); `SLUICE_ERROR_CALLBACK_FAILED` (a host callback on it
/// failed).
#[no_mangle]
pub extern "C" fn sluice_stream_query(
    stream: sluice_stream_t,
    idle_out: *mut bool,
) -> *mut sluice_error_t {
    boundary("sluice_stream_query", || {
        out_value(idle_out, "idle_out", || get(stream)?.query())
    })
}

/// Blocks until all work enqueued so far has completed. Reports a device fault or
/// a failed host callback on this stream, naming the stream and its last label.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (`stream` is capturing);
/// `SLUICE_ERROR_CALLBACK_FAILED` (a host callback on it failed; reported once).
#[no_mangle]
pub extern "C" fn sluice_stream_synchronize(stream: sluice_stream_t) -> *mut sluice_error_t {
    boundary("sluice_stream_synchronize", || get(stream)?.synchronize())
}

/// Sets the label that fault reports on this stream name as its last operation.
/// NULL clears it. The string is copied.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`); a NULL `label` clears it;
/// a label that is not UTF-8 is taken lossily.
#[no_mangle]
pub extern "C" fn sluice_stream_set_label(
    stream: sluice_stream_t,
    label: *const c_char,
) -> *mut sluice_error_t {
    boundary("sluice_stream_set_label", || {
        let s = get(stream)?;
        if label.is_null() {
            s.set_label(None);
        } else {
            // SAFETY: non-NULL; the caller promises a NUL-terminated string.
            let l = unsafe { CStr::from_ptr(label) };
            s.set_label(Some(&l.to_string_lossy()));
        }
        Ok(())
    })
}

/// Writes the stream's counters.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stats_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`).
#[no_mangle]
pub extern "C" fn sluice_stream_stats(
    stream: sluice_stream_t,
    stats_out: *mut sluice_stream_stats_t,
) -> *mut sluice_error_t {
    boundary("sluice_stream_stats", || {
        let out = out_ptr(stats_out, "stats_out")?;
        let s = get(stream)?;
        let st = &s.stats;
        write_out(
            out,
            sluice_stream_stats_t {
                id: s.id,
                waits: s.waits(),
                records: s.last_seq(),
                events_created: st.events_created.load(Ordering::Relaxed),
                engine_syncs: st.engine_syncs.load(Ordering::Relaxed),
            },
        );
        Ok(())
    })
}

/// Releases a callback's `user_data` once the callback can no longer run.
pub type sluice_free_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Owns the caller's `user_data`; calls `free_user_data` exactly once on drop.
struct UserData(*mut c_void, sluice_free_fn);

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(f) = self.1 {
            // SAFETY: the caller asked for this call, once, when the callback is gone.
            unsafe { f(self.0) }
        }
    }
}

impl UserData {
    fn get(&self) -> *mut c_void {
        self.0
    }
}
// SAFETY: the caller hands user_data to the callback thread; that is its contract.
unsafe impl Send for UserData {}
// SAFETY: sluice never dereferences it; only the callback does, one call at a time.
unsafe impl Sync for UserData {}

/// Enqueues `callback(user_data)` on `stream` as one tracked op that reads `reads`
/// and writes `writes` (arrays of sync handles; NULL when the count is 0).
/// `free_user_data` (may be NULL) is called exactly once with `user_data` when the
/// callback can no longer run: after it ran, when the call fails, or, for a
/// callback captured into a graph (host backend), when the last graph holding it is
/// destroyed. A captured callback runs once per launch.
///
/// Keep callbacks short. On cuda the driver runs the context's host functions on one
/// thread, in turn: a callback that blocks holds up every stream's callbacks, and a
/// driver call that waits for the whole device (unloading a module, freeing
/// page-locked memory) waits for it too. A callback that waits for something the
/// host has yet to do can therefore deadlock.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`callback` NULL, or `reads`/`writes` NULL with
/// a non-zero count); `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, or a stale sync
/// object, named by its index); `SLUICE_ERROR_OUT_OF_RANGE` (a count whose byte size
/// overflows); `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (cuda: `stream` is capturing).
#[no_mangle]
pub extern "C" fn sluice_stream_launch_host_func(
    stream: sluice_stream_t,
    callback: sluice_host_fn,
    user_data: *mut c_void,
    free_user_data: sluice_free_fn,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
) -> *mut sluice_error_t {
    boundary("sluice_stream_launch_host_func", || {
        let ud = UserData(user_data, free_user_data);
        let cb = callback.ok_or_else(|| Error::new(ErrorCode::NullArgument, "callback is NULL"))?;
        let pin = crate::epoch::pin();
        let s = pinned(&pin, stream)?;
        with_access_set(&pin, reads, num_reads, writes, num_writes, |set| {
            crate::ops::host_callback_set(
                s,
                move || {
                    // SAFETY: the caller provided a valid callback for this user_data.
                    unsafe { cb(ud.get()) }
                },
                set,
            )
        })
    })
}

/// Sets the byte bound (default 64 MiB, at most 16 blocks) of the stream's cache of
/// freed device blocks, and returns what is cached beyond it to the driver's pool.
/// A device buffer freed with this stream as its home is kept for reuse by an
/// allocation of exactly the same size on this stream; 0 disables the cache. While
/// the stream captures a graph nothing is returned (a free would become part of the
/// graph): the blocks go back at the next call or when the stream is destroyed.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`).
#[no_mangle]
pub extern "C" fn sluice_stream_set_block_cache_limit(
    stream: sluice_stream_t,
    bytes: u64,
) -> *mut sluice_error_t {
    boundary("sluice_stream_set_block_cache_limit", || {
        get(stream)?.set_block_cache_limit(usize::try_from(bytes).unwrap_or(usize::MAX))
    })
}

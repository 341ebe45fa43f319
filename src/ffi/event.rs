//! Pooled events.

use super::*;
use crate::error::Error;

/// Event flag: record a timing event usable with `sluice_event_elapsed_ms`.
pub const SLUICE_EVENT_TIMING: u32 = 1;

/// One recording of a pooled event: a point in a stream. Each recording has a
/// per-stream sequence number that only increases. The underlying event returns
/// to its stream's pool only when nothing references the recording any more.
/// Thread safety: may be used from any thread at once.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_event_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// Records an event at the current end of `stream`. `flags` is 0 or
/// `SLUICE_EVENT_TIMING`. Ownership: the caller owns the new handle and destroys it
/// with `sluice_event_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`event_out` NULL);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`flags` other than `SLUICE_EVENT_TIMING`);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`).
#[no_mangle]
pub extern "C" fn sluice_event_record(
    stream: sluice_stream_t,
    flags: u32,
    event_out: *mut sluice_event_t,
) -> *mut sluice_error_t {
    boundary("sluice_event_record", || {
        let out = out_ptr(event_out, "event_out")?;
        if flags & !SLUICE_EVENT_TIMING != 0 {
            return Err(Error::invalid_argument(format!(
                "unknown event flags 0x{flags:x}"
            )));
        }
        let rec = with(stream, |s| s.record(flags & SLUICE_EVENT_TIMING != 0))?;
        write_new(out, rec);
        Ok(())
    })
}

/// Makes `stream` wait on `event` on the device; the host does not block. An event
/// recorded in a capture forks `stream` into that capture (or joins it back) while
/// the capture runs; after it has ended the event stands for no work, and a wait on
/// it is refused, as is a wait that would join two captures (the refusal poisons
/// `stream`'s capture).
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `event`);
/// `SLUICE_ERROR_WRONG_DEVICE` (an event of another device);
/// `SLUICE_ERROR_INVALID_STATE` (an event recorded in a capture that has ended, or in
/// another capture than the one `stream` takes part in).
#[no_mangle]
pub extern "C" fn sluice_stream_wait_event(
    stream: sluice_stream_t,
    event: sluice_event_t,
) -> *mut sluice_error_t {
    boundary("sluice_stream_wait_event", || {
        with(stream, |s| with(event, |e| s.wait_event(e)))
    })
}

/// Writes true to `done_out` when the work before the event has completed.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`done_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `event`); `SLUICE_ERROR_CAPTURE_UNSUPPORTED`
/// (the event was recorded inside a capture; the capture is aborted);
/// `SLUICE_ERROR_CALLBACK_FAILED` (a host callback before it failed).
#[no_mangle]
pub extern "C" fn sluice_event_query(
    event: sluice_event_t,
    done_out: *mut bool,
) -> *mut sluice_error_t {
    boundary("sluice_event_query", || {
        out_value(done_out, "done_out", || get(event)?.query())
    })
}

/// Blocks until the work before the event has completed.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `event`);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (the event was recorded inside a capture; the
/// capture is aborted); `SLUICE_ERROR_CALLBACK_FAILED` (a host callback before it
/// failed).
#[no_mangle]
pub extern "C" fn sluice_event_synchronize(event: sluice_event_t) -> *mut sluice_error_t {
    boundary("sluice_event_synchronize", || get(event)?.synchronize())
}

/// Writes the milliseconds between two completed timing events.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`ms_out` NULL); `SLUICE_ERROR_INVALID_HANDLE`
/// (a stale `start` or `end`); `SLUICE_ERROR_INVALID_ARGUMENT` (either event recorded
/// without `SLUICE_EVENT_TIMING`); `SLUICE_ERROR_INVALID_STATE` (either event has not
/// completed yet).
#[no_mangle]
pub extern "C" fn sluice_event_elapsed_ms(
    start: sluice_event_t,
    end: sluice_event_t,
    ms_out: *mut f32,
) -> *mut sluice_error_t {
    boundary("sluice_event_elapsed_ms", || {
        out_value(ms_out, "ms_out", || get(start)?.elapsed_ms(&*get(end)?))
    })
}

/// Writes the event's stream id and its sequence number within that stream.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stream_id_out` or `seq_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `event`).
#[no_mangle]
pub extern "C" fn sluice_event_sequence(
    event: sluice_event_t,
    stream_id_out: *mut u64,
    seq_out: *mut u64,
) -> *mut sluice_error_t {
    boundary("sluice_event_sequence", || {
        let (a, b) = (
            out_ptr(stream_id_out, "stream_id_out")?,
            out_ptr(seq_out, "seq_out")?,
        );
        let e = get(event)?;
        write_out(a, e.stream_id());
        write_out(b, e.seq);
        Ok(())
    })
}

/// Destroys an event handle. Ownership: only the handle ends; the pooled event is
/// recycled once nothing (a sync object, a pending wait) refers to it.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `event`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_event_destroy(event: sluice_event_t) -> *mut sluice_error_t {
    boundary("sluice_event_destroy", || remove(event).map(drop))
}

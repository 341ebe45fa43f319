//! Traces: start, stop, flush.

use super::*;
use crate::trace::TraceOptions;
use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Starts writing a trace to `path` (created or truncated): Chrome trace-event
/// JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open. It holds a
/// track per stream named with its label, a span per op's enqueue, an arrow from
/// each op to the op whose wait the engine inserted for it, captures, graph
/// instantiate, update and launch, allocations and frees, prefetcher batches and
/// log messages. `SLUICE_TRACE_DEVICE=1` adds device spans of every Nth op
/// (`SLUICE_TRACE_SAMPLE=N`, default 1), read at this call. `SLUICE_TRACE=path`
/// starts one at the first traced call instead. The file stays valid if the
/// process ends without `sluice_trace_stop` (the trace is closed at exit) or
/// crashes (it is then a prefix that the viewers open). Fails with
/// `SLUICE_ERROR_INVALID_STATE` while a trace is written.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`path` NULL); `SLUICE_ERROR_INVALID_ARGUMENT`
/// (an empty `path`, or a file that cannot be created); `SLUICE_ERROR_INVALID_STATE` (a
/// trace is already being written: starting twice).
#[no_mangle]
pub extern "C" fn sluice_trace_start(path: *const c_char) -> *mut sluice_error_t {
    boundary("sluice_trace_start", || {
        if path.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "path is NULL"));
        }
        // SAFETY: non-NULL; the caller promises a NUL-terminated string.
        let p = unsafe { CStr::from_ptr(path) }.to_bytes();
        if p.is_empty() {
            return Err(Error::invalid_argument("path is empty"));
        }
        crate::trace::start(Path::new(OsStr::from_bytes(p)), TraceOptions::from_env())
    })
}

/// Stops the trace: waits for pending device spans, closes the JSON array and the
/// file. Does nothing when no trace is written.
///
/// Errors: `SLUICE_ERROR_INVALID_ARGUMENT` (writing the end of the trace failed);
/// stopping when no trace runs is not an error.
#[no_mangle]
pub extern "C" fn sluice_trace_stop() -> *mut sluice_error_t {
    boundary("sluice_trace_stop", crate::trace::stop)
}

/// Writes what the trace has buffered to its file (it is also written every
/// 100 ms). Does nothing when no trace is written.
///
/// Errors: `SLUICE_ERROR_INVALID_ARGUMENT` (writing the trace failed); with no trace
/// running it does nothing.
#[no_mangle]
pub extern "C" fn sluice_trace_flush() -> *mut sluice_error_t {
    boundary("sluice_trace_flush", crate::trace::flush)
}

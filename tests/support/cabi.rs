//! Helpers for tests that drive the C ABI (most on the host backend): a checked
//! call, a device, a stream, a standalone sync object, foreign op pairs, teardown.
#![allow(dead_code)] // each test binary uses its own part

use sluice::ffi::*;

/// Asserts that a call succeeded, with its message when it did not.
pub fn ok(e: *mut sluice_error_t) {
    assert!(e.is_null(), "{}", unsafe {
        std::ffi::CStr::from_ptr(sluice_error_message(e)).to_string_lossy()
    });
}

/// True when a call failed (its error is freed).
pub fn failed(e: *mut sluice_error_t) -> bool {
    if e.is_null() {
        return false;
    }
    sluice_error_free(e);
    true
}

/// The default device (`SLUICE_BACKEND` picks its backend).
pub fn default_device() -> sluice_device_t {
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open_default(&mut d));
    d
}

/// Destroys the streams, then closes the device.
pub fn close(d: sluice_device_t, streams: &[sluice_stream_t]) {
    for &s in streams {
        ok(sluice_stream_destroy(s));
    }
    ok(sluice_device_close(d));
}

pub fn host_device() -> sluice_device_t {
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open(SLUICE_BACKEND_HOST, 0, &mut d));
    d
}

pub fn stream(d: sluice_device_t) -> sluice_stream_t {
    let mut s = sluice_stream_t { bits: 0 };
    ok(sluice_stream_create(
        d,
        SLUICE_STREAM_NON_BLOCKING,
        0,
        &mut s,
    ));
    s
}

pub fn sync_object() -> sluice_sync_t {
    let mut o = sluice_sync_t { bits: 0 };
    ok(sluice_sync_create(&mut o));
    o
}

pub fn begin(s: sluice_stream_t, reads: &[sluice_sync_t], writes: &[sluice_sync_t]) -> sluice_op_t {
    let mut op = sluice_op_t { bits: 0 };
    ok(sluice_op_begin(
        s,
        reads.as_ptr(),
        reads.len(),
        writes.as_ptr(),
        writes.len(),
        &mut op,
    ));
    op
}

/// One foreign op, begun and ended at once.
pub fn pair(s: sluice_stream_t, reads: &[sluice_sync_t], writes: &[sluice_sync_t]) {
    ok(sluice_op_end(begin(s, reads, writes)));
}

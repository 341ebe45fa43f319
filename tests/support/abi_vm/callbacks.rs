//! The ABI VM's callbacks handed to sluice (host functions, graph cache bodies,
//! logs, releases, fills, DLPack deleters): none may panic, and each counts what
//! the teardown balances.

use super::*;

/// `check_err`'s check, for callbacks, which must not panic: a bad error object is
/// counted in `BAD` for `step` and the teardown to report.
pub(super) fn check_quiet(e: *mut sluice_error_t) {
    if e.is_null() {
        return;
    }
    let code = sluice_error_code(e);
    // SAFETY: as in check_err.
    let empty = unsafe { *sluice_error_message(e) } == 0;
    if !(2..=22).contains(&code) || empty {
        BAD.fetch_add(1, SeqCst);
    }
    sluice_error_free(e);
}

pub(super) unsafe extern "C" fn host_cb(ud: *mut c_void) -> i32 {
    // SAFETY: ud is the i32 box made in op_host_func.
    unsafe { *(ud as *const i32) }
}

pub(super) unsafe extern "C" fn host_free(ud: *mut c_void) {
    // SAFETY: made by Box::into_raw in op_host_func, freed once by contract.
    drop(unsafe { Box::from_raw(ud as *mut i32) });
    CB_FREED.fetch_add(1, SeqCst);
}

pub(super) unsafe extern "C" fn host_cb_static(_ud: *mut c_void) -> i32 {
    0
}

pub(super) unsafe extern "C" fn body_fn(ud: *mut c_void, stream: sluice_stream_t) -> i32 {
    // SAFETY: ud is the Body on run's stack, live during the call.
    let b = unsafe { &*(ud as *const Body) };
    if b.ops & 1 != 0 {
        check_quiet(sluice_stream_memset(
            stream,
            bu(b.buffer),
            b.offset,
            7,
            b.len,
        ));
    }
    if b.ops & 2 != 0 {
        let rd = [sy(b.buffer)];
        check_quiet(sluice_stream_launch_host_func(
            stream,
            Some(host_cb_static),
            std::ptr::null_mut(),
            None,
            rd.as_ptr(),
            1,
            std::ptr::null(),
            0,
        ));
    }
    if b.ops & 4 != 0 {
        let mut e = sluice_event_t { bits: 0 };
        if sluice_event_record(stream, 0, &mut e).is_null() {
            check_quiet(sluice_event_destroy(e));
        }
    }
    b.rc
}

pub(super) unsafe extern "C" fn log_cb(_level: u32, msg: *const c_char, _ud: *mut c_void) {
    if msg.is_null() {
        BAD.fetch_add(1, SeqCst);
    }
    LOGS.fetch_add(1, SeqCst);
}

pub(super) unsafe extern "C" fn release_fn(ud: *mut c_void) {
    // SAFETY: a Vec<u8> box made in op_wrap_device, released once by contract.
    drop(unsafe { Box::from_raw(ud as *mut Vec<u8>) });
    REL_DONE.fetch_add(1, SeqCst);
}

pub(super) unsafe extern "C" fn fill_fn(ud: *mut c_void, fill: *mut sluice_prefetch_fill_t) -> i32 {
    // SAFETY: ud is the FillCfg the VM keeps until the prefetcher is destroyed.
    let c = unsafe { &*(ud as *const FillCfg) };
    // SAFETY: the prefetcher passes a valid fill for this call.
    let f = unsafe { &mut *fill };
    let n = c.n.fetch_add(1, SeqCst);
    if n >= c.end_after {
        return SLUICE_PREFETCH_END;
    }
    if n == c.fail_at {
        return 5;
    }
    for i in 0..(f.segments as usize).min(8) {
        let len = (f.capacity[i]).min(64);
        // SAFETY: host[i] holds capacity[i] bytes.
        unsafe { std::ptr::write_bytes(f.host[i] as *mut u8, n as u8, len) };
        f.len[i] = if c.over { f.capacity[i] + 1 } else { len };
    }
    0
}

pub(super) unsafe extern "C" fn own_deleter_v(t: *mut DLManagedTensorVersioned) {
    // SAFETY: manager_ctx is the OwnTensor box; the deleter runs once.
    drop(unsafe { Box::from_raw((*t).manager_ctx as *mut OwnTensor) });
    DL_DONE.fetch_add(1, SeqCst);
}

pub(super) unsafe extern "C" fn own_deleter_u(t: *mut DLManagedTensor) {
    // SAFETY: as above.
    drop(unsafe { Box::from_raw((*t).manager_ctx as *mut OwnTensor) });
    DL_DONE.fetch_add(1, SeqCst);
}

/// Frees a tensor of ours that sluice did not take.
pub(super) unsafe fn free_own(t: *mut OwnTensor) {
    // SAFETY: the caller passes a box of ours, freed once.
    drop(unsafe { Box::from_raw(t) });
    DL_DONE.fetch_add(1, SeqCst);
}

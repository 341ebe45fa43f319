//! Logs: level and receiver.

use super::*;
use crate::log::LogLevel;
use std::ffi::{c_char, c_void, CString};

/// A log receiver: `level` is one of `SLUICE_LOG_*`, `message` is NUL-terminated
/// and valid during the call only. It is called on the thread that logs, possibly
/// while sluice holds locks: it must not call sluice.
pub type sluice_log_fn =
    Option<unsafe extern "C" fn(level: u32, message: *const c_char, user_data: *mut c_void)>;

/// Sets the log level, one of `SLUICE_LOG_*` (overrides `SLUICE_LOG`; logging is
/// off by default).
///
/// Errors: `SLUICE_ERROR_INVALID_ARGUMENT` (`level` not a `SLUICE_LOG_*`).
#[no_mangle]
pub extern "C" fn sluice_log_set_level(level: u32) -> *mut sluice_error_t {
    boundary("sluice_log_set_level", || {
        let l = LogLevel::from_u32(level)
            .ok_or_else(|| Error::invalid_argument(format!("unknown log level {level}")))?;
        crate::log::set_level(l);
        Ok(())
    })
}

/// Sends log messages to `callback(level, message, user_data)` instead of stderr;
/// NULL goes back to stderr. The level is unchanged (see `sluice_log_set_level`).
/// `user_data` must stay valid until the callback is replaced: when this call
/// returns, no call of the previous callback is running and none will start. The
/// callback runs inside the sluice call that logs, on that call's thread (any
/// thread, including library threads); it must be quick, and must not call sluice
/// (calling this function from it deadlocks).
///
/// Errors: none: it always succeeds.
#[no_mangle]
pub extern "C" fn sluice_log_set_callback(
    callback: sluice_log_fn,
    user_data: *mut c_void,
) -> *mut sluice_error_t {
    boundary("sluice_log_set_callback", || {
        let ud = user_data as usize;
        crate::log::set_callback(callback.map(|cb| -> crate::log::LogFn {
            Box::new(move |level: LogLevel, msg: &str| {
                let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
                // SAFETY: the caller gave a valid callback for this user_data.
                unsafe { cb(level as u32, c.as_ptr(), ud as *mut c_void) }
            })
        }));
        Ok(())
    })
}

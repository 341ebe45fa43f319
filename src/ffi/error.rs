//! Error objects and codes.

use crate::error::{Error, ErrorCode};
use std::ffi::{c_char, CString};

/// An error: a stable code, a message naming the operation and the handle, and the
/// driver's `CUresult` where the driver failed. Free it with `sluice_error_free`.
/// Thread safety: immutable; may be read from any thread.
pub struct sluice_error_t {
    code: u32,
    driver_code: u32,
    message: CString,
}

pub(crate) fn into_raw(e: Error) -> *mut sluice_error_t {
    let message = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
    Box::into_raw(Box::new(sluice_error_t {
        code: e.code as u32,
        driver_code: e.driver_code.unwrap_or(0),
        message,
    }))
}

/// The error's code, one of `SLUICE_ERROR_*`. Returns 0 for NULL.
#[no_mangle]
pub extern "C" fn sluice_error_code(err: *const sluice_error_t) -> u32 {
    // SAFETY: err is NULL or a live error made by sluice.
    unsafe { err.as_ref() }.map_or(0, |e| e.code)
}

/// The driver's `CUresult` behind the error, or 0 when the driver was not involved.
#[no_mangle]
pub extern "C" fn sluice_error_driver_code(err: *const sluice_error_t) -> u32 {
    // SAFETY: err is NULL or a live error made by sluice.
    unsafe { err.as_ref() }.map_or(0, |e| e.driver_code)
}

/// The NUL-terminated message, valid until `sluice_error_free`. Returns "" for NULL.
#[no_mangle]
pub extern "C" fn sluice_error_message(err: *const sluice_error_t) -> *const c_char {
    // SAFETY: err is NULL or a live error made by sluice.
    match unsafe { err.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Frees an error. Ownership: every error returned by sluice belongs to the caller
/// and is freed exactly once with this. NULL is ignored.
#[no_mangle]
pub extern "C" fn sluice_error_free(err: *mut sluice_error_t) {
    if !err.is_null() {
        // SAFETY: err came from Box::into_raw in into_raw and is freed once.
        drop(unsafe { Box::from_raw(err) });
    }
}

/// The constant name of a code, for example "SLUICE_ERROR_INVALID_HANDLE"; "SLUICE_OK"
/// for 0 and "SLUICE_ERROR_UNKNOWN" for any other value that is not a code. The
/// string is static.
#[no_mangle]
pub extern "C" fn sluice_error_code_name(code: u32) -> *const c_char {
    match ErrorCode::from_u32(code) {
        Some(c) => c.c_name().as_ptr(),
        None if code == 0 => c"SLUICE_OK".as_ptr(),
        None => c"SLUICE_ERROR_UNKNOWN".as_ptr(),
    }
}

/// The library version as "MAJOR.MINOR.PATCH". The string is static.
#[no_mangle]
pub extern "C" fn sluice_version() -> *const c_char {
    const V: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
    ) {
        Ok(c) => c,
        Err(_) => c"",
    };
    V.as_ptr()
}

/// The ABI version this library implements; compare with `SLUICE_ABI_VERSION`.
#[no_mangle]
pub extern "C" fn sluice_abi_version() -> u32 {
    super::SLUICE_ABI_VERSION
}

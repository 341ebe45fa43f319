//! The C ABI. Only argument checking, handle tables, the panic boundary and error
//! objects live here; every semantic lives in the core.
//!
//! Conventions: a fallible function returns `sluice_error_t*` (NULL on success);
//! outputs go through trailing `*_out` pointers, written only on success; every
//! handle is a typed `{ uint64_t bits; }` value; a stale or forged handle gives
//! `SLUICE_ERROR_INVALID_HANDLE`. Nothing is kept per thread between calls: no
//! current stream and no last error (the only thread-local is a cache that lives
//! for one call, see `crate::tls`).
#![allow(non_camel_case_types)]
// C callers cannot mark calls `unsafe`; every pointer is checked before use instead.
#![allow(clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]
#![deny(missing_docs)]

mod device;
mod error;
mod event;
mod graph;
pub use graph::*;
mod c_constants;
pub use c_constants::*;
mod counters;
pub use counters::*;
mod deprecated;
mod dlpack;
pub use dlpack::*;
mod gather;
pub use gather::*;
mod handles;
mod log;
pub(crate) use handles::{
    get, get_pinned, pinned, remove, stale, with, write_bits, write_new, Castable,
};
pub use log::*;
mod memory;
mod module;
mod prefetch;
mod rng;
mod stream;
mod sync;
mod trace;
pub use deprecated::*;
pub use trace::*;

pub use device::*;
pub use error::*;
pub use event::*;
pub use memory::*;
pub use module::*;
pub use prefetch::*;
pub use rng::*;
pub use stream::*;
pub use sync::*;

use crate::error::{Error, ErrorCode, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Version of the C ABI. Bumped on any incompatible change.
pub const SLUICE_ABI_VERSION: u32 = 1;
/// Major version of the library.
pub const SLUICE_VERSION_MAJOR: u32 = 0;
/// Minor version of the library.
pub const SLUICE_VERSION_MINOR: u32 = 1;
/// Patch version of the library.
pub const SLUICE_VERSION_PATCH: u32 = 1;

/// Runs an export body: catches panics and turns `Err` into an error object whose
/// message starts with the operation's name.
#[inline(always)]
pub(crate) fn boundary(op: &'static str, f: impl FnOnce() -> Result<()>) -> *mut sluice_error_t {
    crate::backend::enter_call();
    let r = catch_unwind(AssertUnwindSafe(f));
    crate::backend::leave_call();
    match r {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => error::into_raw(e.context(op)),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            error::into_raw(Error::new(
                ErrorCode::Panic,
                format!("{op}: internal panic: {what}"),
            ))
        }
    }
}

/// Runs an infallible export body; a panic gives `default`.
pub(crate) fn boundary_or<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// Checks an output pointer before any work is done.
pub(crate) fn out_ptr<T>(p: *mut T, name: &str) -> Result<*mut T> {
    if p.is_null() {
        Err(Error::new(
            ErrorCode::NullArgument,
            format!("{name} is NULL"),
        ))
    } else {
        Ok(p)
    }
}

/// Checks `out`, then runs `make` and writes the new handle of what it made (the
/// output is checked before any work is done).
pub(crate) fn out_new<H: Castable>(
    out: *mut H,
    name: &str,
    make: impl FnOnce() -> Result<H::Target>,
) -> Result<()> {
    let out = out_ptr(out, name)?;
    write_new(out, make()?);
    Ok(())
}

/// Checks `out`, then runs `get` and writes the value it gives.
pub(crate) fn out_value<T>(out: *mut T, name: &str, get: impl FnOnce() -> Result<T>) -> Result<()> {
    let out = out_ptr(out, name)?;
    write_out(out, get()?);
    Ok(())
}

/// Writes an output checked with `out_ptr`.
pub(crate) fn write_out<T>(p: *mut T, v: T) {
    // SAFETY: p was checked non-NULL; the caller promises it points to writable T.
    unsafe { p.write(v) }
}

/// Borrows `n` elements from C. NULL is allowed only when `n == 0`.
#[inline(always)]
pub(crate) fn slice_in<'a, T>(p: *const T, n: usize, name: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(
            ErrorCode::NullArgument,
            format!("{name} is NULL but its length is {n}"),
        ));
    }
    if n.checked_mul(std::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::out_of_range(format!(
            "{name}: length {n} is too large"
        )));
    }
    // SAFETY: non-NULL, length bounded; the caller promises n readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Borrows `n` writable elements from C, checked as in [`slice_in`].
#[inline(always)]
pub(crate) fn slice_out<'a, T>(p: *mut T, n: usize, name: &str) -> Result<&'a mut [T]> {
    if slice_in(p.cast_const(), n, name)?.is_empty() {
        return Ok(&mut []);
    }
    // SAFETY: checked by slice_in; the caller promises n writable elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Number of live handles of every type (for leak checks in tests).
#[no_mangle]
pub extern "C" fn sluice_live_handles() -> u64 {
    boundary_or(0, || handles::live_handles() as u64)
}

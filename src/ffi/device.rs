//! Devices.

use super::*;
use crate::backend::BackendKind;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::PinnedStats;
use std::ffi::c_char;

/// A device handle. Thread safety: may be used from any thread at once.
/// Under the hood: `Arc<Device>`; streams and buffers keep their device alive.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_device_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// Static properties of a device.
#[repr(C)]
pub struct sluice_device_props_t {
    /// NUL-terminated device name.
    pub name: [c_char; 256],
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Compute capability major (0 on host).
    pub compute_capability_major: i32,
    /// Compute capability minor (0 on host).
    pub compute_capability_minor: i32,
    /// Number of multiprocessors (CPU threads on host).
    pub multiprocessor_count: i32,
    /// `SLUICE_BACKEND_*` of the device.
    pub backend: u32,
    /// Index of the device within its backend.
    pub ordinal: u32,
}

/// Statistics of a device's pinned host-memory pool.
#[repr(C)]
pub struct sluice_pinned_stats_t {
    /// Bytes of pinned blocks handed out and not yet freed.
    pub bytes_in_use: u64,
    /// Bytes of pinned blocks cached for reuse.
    pub bytes_cached: u64,
    /// Bound on cached bytes; blocks freed beyond it are released at once.
    pub cache_limit: u64,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that needed a new pinned block.
    pub misses: u64,
}

pub(crate) fn backend_kind(v: u32) -> Result<BackendKind> {
    BackendKind::from_u32(v).ok_or_else(|| {
        Error::invalid_argument(format!(
            "unknown backend {v} (expected SLUICE_BACKEND_HOST or SLUICE_BACKEND_CUDA)"
        ))
    })
}

/// Writes the number of devices of `backend` to `count_out`. For cuda with no
/// usable driver this fails with `SLUICE_ERROR_NO_DRIVER`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`count_out` NULL);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`backend` not a `SLUICE_BACKEND_*`);
/// `SLUICE_ERROR_NO_DRIVER` (cuda: no driver library).
#[no_mangle]
pub extern "C" fn sluice_device_count(backend: u32, count_out: *mut u32) -> *mut sluice_error_t {
    boundary("sluice_device_count", || {
        out_value(count_out, "count_out", || {
            Device::count(backend_kind(backend)?)
        })
    })
}

/// Opens device `ordinal` of `backend`. Ownership: each call gives the caller a new
/// handle to the same device; close each with `sluice_device_close`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`device_out` NULL);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`backend` not a `SLUICE_BACKEND_*`);
/// `SLUICE_ERROR_NO_DEVICE` (`ordinal` is not below the device count);
/// `SLUICE_ERROR_NO_DRIVER` (cuda: no driver library).
#[no_mangle]
pub extern "C" fn sluice_device_open(
    backend: u32,
    ordinal: u32,
    device_out: *mut sluice_device_t,
) -> *mut sluice_error_t {
    boundary("sluice_device_open", || {
        out_new(device_out, "device_out", || {
            Device::open(backend_kind(backend)?, ordinal)
        })
    })
}

/// Opens the default device: `SLUICE_BACKEND=auto|cuda|host` (default auto: cuda
/// device 0 when a usable driver and GPU exist, else host device 0). Ownership: the
/// caller owns the new handle and closes it with `sluice_device_close`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`device_out` NULL);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`SLUICE_BACKEND` is not auto, cuda or host);
/// `SLUICE_ERROR_NO_DEVICE` (no device of the chosen backend); `SLUICE_ERROR_NO_DRIVER`
/// (`SLUICE_BACKEND=cuda` without a driver).
#[no_mangle]
pub extern "C" fn sluice_device_open_default(
    device_out: *mut sluice_device_t,
) -> *mut sluice_error_t {
    boundary("sluice_device_open_default", || {
        out_new(device_out, "device_out", Device::open_default)
    })
}

/// Closes a device handle. Ownership: objects created on the device keep it open
/// and stay valid.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`, or a second close).
#[no_mangle]
pub extern "C" fn sluice_device_close(device: sluice_device_t) -> *mut sluice_error_t {
    boundary("sluice_device_close", || remove(device).map(drop))
}

/// Writes the device's properties to `props_out`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`props_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_device_props(
    device: sluice_device_t,
    props_out: *mut sluice_device_props_t,
) -> *mut sluice_error_t {
    boundary("sluice_device_props", || {
        let out = out_ptr(props_out, "props_out")?;
        let d = get(device)?;
        let p = d.props()?;
        let mut name = [0 as c_char; 256];
        for (dst, src) in name.iter_mut().zip(p.name.bytes().take(255)) {
            *dst = src as c_char;
        }
        write_out(
            out,
            sluice_device_props_t {
                name,
                total_memory: p.total_memory,
                compute_capability_major: p.compute_capability.0,
                compute_capability_minor: p.compute_capability.1,
                multiprocessor_count: p.multiprocessor_count,
                backend: d.kind() as u32,
                ordinal: d.ordinal(),
            },
        );
        Ok(())
    })
}

/// Writes the stream priority range: `least` (lowest priority) and `greatest`
/// (highest; numerically lowest on CUDA). Priorities outside it are clamped.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`least_out` or `greatest_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_device_priority_range(
    device: sluice_device_t,
    least_out: *mut i32,
    greatest_out: *mut i32,
) -> *mut sluice_error_t {
    boundary("sluice_device_priority_range", || {
        let (l, g) = (
            out_ptr(least_out, "least_out")?,
            out_ptr(greatest_out, "greatest_out")?,
        );
        let (least, greatest) = get(device)?.priority_range()?;
        write_out(l, least);
        write_out(g, greatest);
        Ok(())
    })
}

/// Blocks until all work on every stream of the device has completed, then reports
/// the first deferred error, if any. Streams capturing a graph are skipped (their
/// captured work runs only when the graph is launched; a capture another thread is
/// making is left alone), and the work of streams destroyed while busy is included.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`);
/// `SLUICE_ERROR_CALLBACK_FAILED` (a host callback on one of its streams failed).
#[no_mangle]
pub extern "C" fn sluice_device_wait_all(device: sluice_device_t) -> *mut sluice_error_t {
    boundary("sluice_device_wait_all", || get(device)?.wait_all())
}

/// Writes the device's pinned-pool statistics.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stats_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_device_pinned_stats(
    device: sluice_device_t,
    stats_out: *mut sluice_pinned_stats_t,
) -> *mut sluice_error_t {
    boundary("sluice_device_pinned_stats", || {
        let out = out_ptr(stats_out, "stats_out")?;
        let PinnedStats {
            bytes_in_use,
            bytes_cached,
            cache_limit,
            hits,
            misses,
        } = get(device)?.pinned.stats();
        write_out(
            out,
            sluice_pinned_stats_t {
                bytes_in_use,
                bytes_cached,
                cache_limit,
                hits,
                misses,
            },
        );
        Ok(())
    })
}

/// Releases every cached pinned block (waiting for copies that still use them).
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_device_pinned_trim(device: sluice_device_t) -> *mut sluice_error_t {
    boundary("sluice_device_pinned_trim", || {
        let d = get(device)?;
        d.pinned.trim_to(&d, 0);
        Ok(())
    })
}

/// Sets the bound on cached pinned bytes (default 256 MiB) and trims down to it.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_device_pinned_set_limit(
    device: sluice_device_t,
    bytes: u64,
) -> *mut sluice_error_t {
    boundary("sluice_device_pinned_set_limit", || {
        let d = get(device)?;
        d.pinned.set_limit(&d, bytes);
        Ok(())
    })
}

//! Deprecated names of the 0.1.0 exports, kept for one release (removed in 0.2).
//! Each forwards to its new name; `docs/abi.md` lists the renames.
#![allow(deprecated)]

use super::*;
use std::ffi::{c_char, c_void};

/// Deprecated: renamed to [`sluice_stream_copy`] in 0.1.1.
///
/// Errors: as `sluice_stream_copy`.
#[deprecated(note = "renamed to sluice_stream_copy")]
#[no_mangle]
pub extern "C" fn sluice_copy(
    stream: sluice_stream_t,
    dst: sluice_buffer_t,
    dst_offset: usize,
    src: sluice_buffer_t,
    src_offset: usize,
    len: usize,
) -> *mut sluice_error_t {
    sluice_stream_copy(stream, dst, dst_offset, src, src_offset, len)
}

/// Deprecated: renamed to [`sluice_stream_copy_from_host`] in 0.1.1.
///
/// Errors: as `sluice_stream_copy_from_host`.
#[deprecated(note = "renamed to sluice_stream_copy_from_host")]
#[no_mangle]
pub extern "C" fn sluice_copy_from_host(
    stream: sluice_stream_t,
    dst: sluice_buffer_t,
    dst_offset: usize,
    src: *const c_void,
    len: usize,
) -> *mut sluice_error_t {
    sluice_stream_copy_from_host(stream, dst, dst_offset, src, len)
}

/// Deprecated: renamed to [`sluice_stream_copy_to_host`] in 0.1.1.
///
/// Errors: as `sluice_stream_copy_to_host`.
#[deprecated(note = "renamed to sluice_stream_copy_to_host")]
#[no_mangle]
pub extern "C" fn sluice_copy_to_host(
    stream: sluice_stream_t,
    dst: *mut c_void,
    src: sluice_buffer_t,
    src_offset: usize,
    len: usize,
) -> *mut sluice_error_t {
    sluice_stream_copy_to_host(stream, dst, src, src_offset, len)
}

/// Deprecated: renamed to [`sluice_stream_memset`] in 0.1.1.
///
/// Errors: as `sluice_stream_memset`.
#[deprecated(note = "renamed to sluice_stream_memset")]
#[no_mangle]
pub extern "C" fn sluice_memset(
    stream: sluice_stream_t,
    buffer: sluice_buffer_t,
    offset: usize,
    value: u8,
    len: usize,
) -> *mut sluice_error_t {
    sluice_stream_memset(stream, buffer, offset, value, len)
}

/// Deprecated: renamed to [`sluice_stream_launch`] in 0.1.1.
///
/// Errors: as `sluice_stream_launch`.
#[deprecated(note = "renamed to sluice_stream_launch")]
#[no_mangle]
pub extern "C" fn sluice_launch(
    stream: sluice_stream_t,
    function: sluice_function_t,
    dims: *const sluice_launch_dims_t,
    args: *mut *mut c_void,
    num_args: usize,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
) -> *mut sluice_error_t {
    sluice_stream_launch(
        stream, function, dims, args, num_args, reads, num_reads, writes, num_writes,
    )
}

/// Deprecated: renamed to [`sluice_sync_create`] in 0.1.1.
///
/// Errors: as `sluice_sync_create`.
#[deprecated(note = "renamed to sluice_sync_create")]
#[no_mangle]
pub extern "C" fn sluice_sync_new(sync_out: *mut sluice_sync_t) -> *mut sluice_error_t {
    sluice_sync_create(sync_out)
}

/// Deprecated: renamed to [`sluice_graph_cache_create`] in 0.1.1.
///
/// Errors: as `sluice_graph_cache_create`.
#[deprecated(note = "renamed to sluice_graph_cache_create")]
#[no_mangle]
pub extern "C" fn sluice_graph_cache_new(
    device: sluice_device_t,
    cache_out: *mut sluice_graph_cache_t,
) -> *mut sluice_error_t {
    sluice_graph_cache_create(device, cache_out)
}

/// Deprecated: renamed to [`sluice_graph_cache_set_enabled`] in 0.1.1.
///
/// Errors: as `sluice_graph_cache_set_enabled`.
#[deprecated(note = "renamed to sluice_graph_cache_set_enabled")]
#[no_mangle]
pub extern "C" fn sluice_graphs_set_enabled(enabled: bool) -> *mut sluice_error_t {
    sluice_graph_cache_set_enabled(enabled)
}

/// Deprecated: renamed to [`sluice_module_get_function`] in 0.1.1.
///
/// Errors: as `sluice_module_get_function`.
#[deprecated(note = "renamed to sluice_module_get_function")]
#[no_mangle]
pub extern "C" fn sluice_module_function(
    module: sluice_module_t,
    name: *const c_char,
    function_out: *mut sluice_function_t,
) -> *mut sluice_error_t {
    sluice_module_get_function(module, name, function_out)
}

/// Deprecated: renamed to [`sluice_stream_launch_host_func`] in 0.1.1.
///
/// Errors: as `sluice_stream_launch_host_func`.
#[deprecated(note = "renamed to sluice_stream_launch_host_func")]
#[no_mangle]
pub extern "C" fn sluice_stream_host_callback(
    stream: sluice_stream_t,
    callback: sluice_host_fn,
    user_data: *mut c_void,
    free_user_data: sluice_free_fn,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
) -> *mut sluice_error_t {
    sluice_stream_launch_host_func(
        stream,
        callback,
        user_data,
        free_user_data,
        reads,
        num_reads,
        writes,
        num_writes,
    )
}

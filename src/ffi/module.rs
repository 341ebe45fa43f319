//! Kernel modules and launches (cuda only).

use super::*;
use crate::backend::LaunchDims;
use crate::error::{Error, ErrorCode};
use crate::module::Module;
use std::ffi::{c_char, c_void, CStr};

/// A loaded module (PTX, cubin or fatbin). Its functions keep it loaded.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_module_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// A kernel function of a module.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_function_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// Kernel launch geometry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_launch_dims_t {
    /// Grid size in blocks (x, y, z); each at least 1.
    pub grid: [u32; 3],
    /// Block size in threads (x, y, z); each at least 1.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

/// Loads a module from PTX text, a cubin or a fatbin. A failed JIT compile gives
/// `SLUICE_ERROR_MODULE_LOAD` with the JIT log in the message. On host:
/// `SLUICE_ERROR_UNSUPPORTED`. Ownership: the image is only read during the call;
/// the caller owns the new handle and releases it with `sluice_module_unload`.
#[no_mangle]
pub extern "C" fn sluice_module_load(
    device: sluice_device_t,
    image: *const c_void,
    len: usize,
    module_out: *mut sluice_module_t,
) -> *mut sluice_error_t {
    boundary("sluice_module_load", || {
        let out = out_ptr(module_out, "module_out")?;
        let img = slice_in(image as *const u8, len, "image")?;
        let md = Module::load(&get(device)?, img)?;
        write_new(out, md);
        Ok(())
    })
}

/// Compiles CUDA C `source` with NVRTC and loads the result on `device`.
///
/// - `name`: the program's name in diagnostics; NULL or "" gives "sluice_kernel.cu".
/// - `options`: `num_options` NUL-terminated compiler options, passed as they are
///   (NULL when `num_options` is 0). Without `--gpu-architecture` (or `-arch`) the
///   target is the device's own: a cubin for `sm_XY`, or PTX when NVRTC predates
///   the device.
/// - Sources may `#include <sluice/rng.cuh>` with no include path. Kernels looked
///   up with `sluice_module_get_function` need `extern "C"` (NVRTC compiles C++).
/// - Cache: with `SLUICE_KERNEL_CACHE=dir` compiled images are kept in `dir`, keyed
///   by the source, name, options, architecture, NVRTC version and driver version;
///   a damaged entry is ignored and rewritten. Options with include paths, and
///   sources that include a file by path (`#include "..."`), bypass it.
///
/// Errors: a compile error gives `SLUICE_ERROR_COMPILE` with the compile log in the
/// message. No NVRTC library (it is loaded at run time: libnvrtc.so.13/.12 on the
/// library search path, or in `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64`,
/// `/usr/local/cuda/lib64`) or the host backend gives `SLUICE_ERROR_UNSUPPORTED`.
/// Ownership: the strings are only read during the call; the caller owns the new
/// handle and releases it with `sluice_module_unload`.
#[no_mangle]
pub extern "C" fn sluice_module_compile(
    device: sluice_device_t,
    source: *const c_char,
    name: *const c_char,
    options: *const *const c_char,
    num_options: usize,
    module_out: *mut sluice_module_t,
) -> *mut sluice_error_t {
    boundary("sluice_module_compile", || {
        let out = out_ptr(module_out, "module_out")?;
        if source.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "source is NULL"));
        }
        // SAFETY: non-NULL; the caller promises a NUL-terminated string.
        let src = unsafe { CStr::from_ptr(source) };
        // SAFETY: NULL or, as the caller promises, a NUL-terminated string.
        let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) });
        let opts = slice_in(options, num_options, "options")?
            .iter()
            .enumerate()
            .map(|(i, &o)| {
                if o.is_null() {
                    return Err(Error::new(
                        ErrorCode::NullArgument,
                        format!("options[{i}] is NULL"),
                    ));
                }
                // SAFETY: non-NULL; the caller promises a NUL-terminated string.
                let s = unsafe { CStr::from_ptr(o) }.to_str();
                s.map(str::to_owned)
                    .map_err(|_| Error::invalid_argument(format!("options[{i}] is not UTF-8")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let md = Module::compile(&get(device)?, src, name, &opts)?;
        write_new(out, md);
        Ok(())
    })
}

/// Releases a module handle. Ownership: the module unloads once its functions'
/// handles are destroyed too.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `module`, or a second unload).
#[no_mangle]
pub extern "C" fn sluice_module_unload(module: sluice_module_t) -> *mut sluice_error_t {
    boundary("sluice_module_unload", || remove(module).map(drop))
}

/// Looks up kernel `name` in `module`. A missing name gives `SLUICE_ERROR_NOT_FOUND`.
/// Ownership: the caller owns the new function handle (which keeps its module
/// loaded) and destroys it with `sluice_function_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`name` or `function_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `module`); `SLUICE_ERROR_NOT_FOUND` (no
/// kernel of that name).
#[no_mangle]
pub extern "C" fn sluice_module_get_function(
    module: sluice_module_t,
    name: *const c_char,
    function_out: *mut sluice_function_t,
) -> *mut sluice_error_t {
    boundary("sluice_module_get_function", || {
        let out = out_ptr(function_out, "function_out")?;
        if name.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "name is NULL"));
        }
        let md = get(module)?;
        // SAFETY: non-NULL; the caller promises a NUL-terminated string.
        let f = md.function(unsafe { CStr::from_ptr(name) })?;
        write_new(out, f);
        Ok(())
    })
}

/// Releases a function handle. Ownership: launches already enqueued are unaffected.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `function`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_function_destroy(function: sluice_function_t) -> *mut sluice_error_t {
    boundary("sluice_function_destroy", || remove(function).map(drop))
}

/// Lets the launches of `function` start before the kernel ahead of them on their
/// stream completes, so that the kernel's launch and prologue overlap that kernel's
/// tail (programmatic dependent launch, compute capability 9.0 and newer; in a
/// captured graph, a programmatic edge). The kernel must then wait for the kernel
/// ahead itself, with `griddepcontrol.wait` (`cudaGridDependencySynchronize()`),
/// before it reads what that kernel wrote or writes what it reads; it may call
/// `griddepcontrol.launch_dependents` (`cudaTriggerProgrammaticLaunchCompletion()`)
/// to let the kernel after it start sooner. Ordering against other streams and
/// against sync objects' recordings is unchanged. `enabled = false` restores plain
/// launches. Applies to the launches made after the call, from any thread.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `function`);
/// `SLUICE_ERROR_UNSUPPORTED` (`enabled` on a device below compute capability 9.0).
#[no_mangle]
pub extern "C" fn sluice_function_set_programmatic_launch(
    function: sluice_function_t,
    enabled: bool,
) -> *mut sluice_error_t {
    boundary("sluice_function_set_programmatic_launch", || {
        get(function)?.set_programmatic_launch(enabled)
    })
}

/// Lets the launches of `function` ask for up to `bytes` of dynamic shared memory
/// per block (`sluice_launch_dims_t.shared_mem_bytes`); a launch asking for more
/// than 48 KiB needs this first (the driver's
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`). Applies to the launches made
/// after the call, from any thread, captured ones included.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `function`);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`bytes` plus the kernel's static shared memory
/// over the device's opt-in limit per block; the message gives the numbers);
/// `SLUICE_ERROR_DRIVER` (the driver refused); `SLUICE_ERROR_UNSUPPORTED` on host.
#[no_mangle]
pub extern "C" fn sluice_function_set_max_dynamic_shared_memory(
    function: sluice_function_t,
    bytes: u32,
) -> *mut sluice_error_t {
    boundary("sluice_function_set_max_dynamic_shared_memory", || {
        get(function)?.set_max_dynamic_shared_memory(bytes)
    })
}

/// Lets the launches of `function` use a thread block cluster larger than the
/// portable size of 8 blocks (the kernel's `__cluster_dims__`), up to what the
/// device supports (16 blocks on an H100 or H200; the driver's
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`). Such a launch may fail on
/// other devices. `allowed = false` restores the portable limit. Applies to the
/// launches made after the call, from any thread, captured ones included.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `function`);
/// `SLUICE_ERROR_UNSUPPORTED` (`allowed` on a device below compute capability 9.0);
/// `SLUICE_ERROR_DRIVER` (the driver refused); `SLUICE_ERROR_UNSUPPORTED` on host.
#[no_mangle]
pub extern "C" fn sluice_function_set_non_portable_cluster_size_allowed(
    function: sluice_function_t,
    allowed: bool,
) -> *mut sluice_error_t {
    boundary(
        "sluice_function_set_non_portable_cluster_size_allowed",
        || get(function)?.set_non_portable_cluster_size_allowed(allowed),
    )
}

/// Launches `function` on `stream` as one tracked op over `reads` and `writes`.
/// `args` holds one pointer per kernel parameter, as for `cuLaunchKernel`, and
/// `num_args` is its length. Where the driver reports a kernel's parameters
/// (`cuFuncGetParamInfo`, CUDA 12.4 and newer drivers), `num_args` must equal their
/// number; older drivers cannot tell, and there a wrong count is undefined
/// behaviour in the driver, as with `cuLaunchKernel`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`dims` NULL, or `args`/`reads`/`writes`
/// NULL with a non-zero length); `SLUICE_ERROR_INVALID_HANDLE` (a stale stream,
/// function or sync handle); `SLUICE_ERROR_INVALID_ARGUMENT` (a zero grid or
/// block dimension, or `num_args` different from the kernel's parameter count);
/// `SLUICE_ERROR_WRONG_DEVICE` (the function's module is on another device);
/// `SLUICE_ERROR_UNSUPPORTED` on host; `SLUICE_ERROR_DRIVER` for a refused launch.
#[no_mangle]
pub extern "C" fn sluice_stream_launch(
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
    boundary("sluice_stream_launch", || {
        if dims.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "dims is NULL"));
        }
        // SAFETY: non-NULL; the caller promises a valid struct.
        let d = unsafe { *dims };
        slice_in(args as *const *mut c_void, num_args, "args")?;

        let dims = LaunchDims {
            grid: d.grid,
            block: d.block,
            shared_mem_bytes: d.shared_mem_bytes,
        };
        let argp = if num_args == 0 {
            std::ptr::null_mut()
        } else {
            args
        };
        let pin = crate::epoch::pin();
        let s = pinned(&pin, stream)?;
        let f = pinned(&pin, function)?;
        with_access_set(&pin, reads, num_reads, writes, num_writes, |set| {
            // SAFETY: the caller promises args match the kernel's parameters.
            unsafe { crate::ops::launch_set(s, f, dims, argp, num_args, set) }
        })
    })
}

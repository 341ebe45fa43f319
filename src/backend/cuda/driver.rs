//! The CUDA driver: probed once per process, every entry point looked up up front,
//! and the text of its result codes.

use crate::error::{Error, ErrorCode, Result};
use cudarc::driver::sys::{
    self, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode,
    CUmodule, CUstream,
};
use std::borrow::Cow;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::panic::catch_unwind;
use std::ptr::null;
use std::sync::OnceLock;

/// `CUresult` values we branch on.
pub(super) const CUDA_SUCCESS: u32 = 0;
pub(super) const CUDA_ERROR_NOT_FOUND: u32 = 500;
pub(super) const CUDA_ERROR_NOT_READY: u32 = 600;
pub(super) const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: u32 = 910;

pub(super) const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub(super) const CU_STREAM_LEGACY: u64 = 0x1;
pub(super) const CU_STREAM_PER_THREAD: u64 = 0x2;
pub(super) const CU_EVENT_DISABLE_TIMING: c_uint = 2;
pub(super) const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
pub(super) const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
pub(super) const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_uint = 16;
pub(super) const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_uint = 75;
pub(super) const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_uint = 76;
pub(super) const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_uint = 97;
pub(super) const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: c_uint = 1;
pub(super) const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_uint = 8;
pub(super) const CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: c_uint = 14;
pub(super) const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
pub(super) const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;
pub(super) const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_uint = 11;
pub(super) const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_uint = 12;
pub(super) const CU_MEMORYTYPE_HOST: c_uint = 1;
pub(super) const CUDA_ERROR_INVALID_VALUE: u32 = 1;
pub(super) const CU_JIT_INFO_LOG_BUFFER: c_uint = 3;
pub(super) const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: c_uint = 4;
pub(super) const CU_JIT_ERROR_LOG_BUFFER: c_uint = 5;
pub(super) const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_uint = 6;
pub(super) const CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE: c_uint = 1;
pub(super) const JIT_LOG_BYTES: usize = 16 * 1024;
/// Oldest driver API version we accept (12.0).
pub(super) const MIN_DRIVER_VERSION: c_int = 12000;

/// `CUgraphExecUpdateResultInfo` with the enum read as a plain integer.
#[repr(C)]
pub struct UpdateResultInfo {
    pub(super) result: c_uint,
    pub(super) error_node: CUgraphNode,
    pub(super) error_from_node: CUgraphNode,
}

pub(super) type HostFnPtr = Option<unsafe extern "C" fn(*mut c_void)>;

/// Declares [`Driver`]: one field per driver entry point, named like the symbol.
macro_rules! driver_api {
    (
        required { $($name:ident: fn($($arg:ty),* $(,)?);)* }
        optional { $($oname:ident: fn($($oarg:ty),* $(,)?);)* }
    ) => {
        /// The CUDA driver, probed once per process by [`driver`]. Holds every entry
        /// point the backend calls, already looked up, so calls through it never panic.
        #[allow(non_snake_case)]
        #[repr(C, align(64))]
        pub struct Driver {
            $(
                #[doc = concat!("`", stringify!($name), "`, returning the raw `CUresult`.")]
                pub $name: unsafe extern "C" fn($($arg),*) -> u32,
            )*
            $(
                #[doc = concat!("`", stringify!($oname), "` where the driver has it (newer drivers only).")]
                pub $oname: Option<unsafe extern "C" fn($($oarg),*) -> u32>,
            )*
            version: c_int,
        }

        impl Driver {
            /// Every driver symbol the backend calls; the probe looks up all of them.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Looks up every symbol. The caller has checked `is_culib_present()`.
            fn load() -> Result<Driver> {
                // SAFETY: the library was just found, so culib() opens it instead of panicking.
                let lib = unsafe { sys::culib() };
                Ok(Driver {
                    version: 0,
                    $($name: {
                        let name = concat!(stringify!($name), "\0").as_bytes();
                        // SAFETY: a dlsym lookup; culib() keeps the library loaded for the process.
                        let p = match unsafe { lib.get::<*const c_void>(name) } {
                            Ok(s) => *s,
                            Err(_) => null(),
                        };
                        if p.is_null() {
                            return Err(no_driver(concat!(
                                "CUDA driver too old: missing ",
                                stringify!($name)
                            )));
                        }
                        // SAFETY: non-null, and cuda.h declares this signature (CUresult as u32).
                        unsafe {
                            std::mem::transmute::<*const c_void, unsafe extern "C" fn($($arg),*) -> u32>(p)
                        }
                    },)*
                    $($oname: {
                        let name = concat!(stringify!($oname), "\0").as_bytes();
                        // SAFETY: as above; a missing symbol is None.
                        match unsafe { lib.get::<*const c_void>(name) } {
                            Ok(s) if !(*s).is_null() => {
                                // SAFETY: non-null, and cuda.h declares this signature.
                                Some(unsafe {
                                    std::mem::transmute::<*const c_void, unsafe extern "C" fn($($oarg),*) -> u32>(*s)
                                })
                            }
                            _ => None,
                        }
                    },)*
                })
            }
        }
    };
}

driver_api! {
    required {
    // Called on the hot paths: kept together at the front of the table.
    cuCtxGetCurrent: fn(*mut CUcontext);
    cuStreamWaitEvent: fn(CUstream, CUevent, c_uint);
    cuEventRecord: fn(CUevent, CUstream);
    cuLaunchKernel: fn(
        CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
        CUstream, *mut *mut c_void, *mut *mut c_void,
    );
    cuMemcpyAsync: fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuLaunchKernelEx: fn(*const sys::CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void);
    cuMemAllocAsync: fn(*mut CUdeviceptr, usize, CUstream);
    cuMemFreeAsync: fn(CUdeviceptr, CUstream);
    cuStreamIsCapturing: fn(CUstream, *mut c_uint);
    cuInit: fn(c_uint);
    cuDriverGetVersion: fn(*mut c_int);
    cuGetErrorName: fn(u32, *mut *const c_char);
    cuDeviceGet: fn(*mut CUdevice, c_int);
    cuDeviceGetCount: fn(*mut c_int);
    cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
    cuDeviceGetAttribute: fn(*mut c_int, c_uint, CUdevice);
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
    cuCtxSetCurrent: fn(CUcontext);
    cuCtxGetStreamPriorityRange: fn(*mut c_int, *mut c_int);
    cuStreamCreateWithPriority: fn(*mut CUstream, c_uint, c_int);
    cuStreamDestroy_v2: fn(CUstream);
    cuStreamGetFlags: fn(CUstream, *mut c_uint);
    cuStreamGetCtx: fn(CUstream, *mut CUcontext);
    cuStreamQuery: fn(CUstream);
    cuStreamSynchronize: fn(CUstream);
    cuLaunchHostFunc: fn(CUstream, HostFnPtr, *mut c_void);
    cuEventCreate: fn(*mut CUevent, c_uint);
    cuEventDestroy_v2: fn(CUevent);
    cuEventQuery: fn(CUevent);
    cuEventSynchronize: fn(CUevent);
    cuEventElapsedTime: fn(*mut f32, CUevent, CUevent);
    cuMemHostAlloc: fn(*mut *mut c_void, usize, c_uint);
    cuMemFreeHost: fn(*mut c_void);
    cuMemHostRegister_v2: fn(*mut c_void, usize, c_uint);
    cuMemHostUnregister: fn(*mut c_void);
    cuPointerGetAttributes: fn(c_uint, *mut c_uint, *mut *mut c_void, CUdeviceptr);
    cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemsetD8Async: fn(CUdeviceptr, u8, usize, CUstream);
    cuModuleLoadDataEx: fn(*mut CUmodule, *const c_void, c_uint, *mut c_uint, *mut *mut c_void);
    cuModuleUnload: fn(CUmodule);
    cuModuleGetFunction: fn(*mut CUfunction, CUmodule, *const c_char);
    cuFuncSetAttribute: fn(CUfunction, c_uint, c_int);
    cuFuncGetAttribute: fn(*mut c_int, c_uint, CUfunction);
    cuStreamBeginCapture_v2: fn(CUstream, c_uint);
    cuStreamEndCapture: fn(CUstream, *mut CUgraph);
    cuGraphDestroy: fn(CUgraph);
    cuGraphInstantiateWithFlags: fn(*mut CUgraphExec, CUgraph, u64);
    cuGraphExecDestroy: fn(CUgraphExec);
    cuGraphUpload: fn(CUgraphExec, CUstream);
    cuGraphLaunch: fn(CUgraphExec, CUstream);
    cuGraphExecUpdate_v2: fn(CUgraphExec, CUgraph, *mut UpdateResultInfo);
    cuGraphNodeGetType: fn(CUgraphNode, *mut c_uint);
    cuGraphGetNodes: fn(CUgraph, *mut CUgraphNode, *mut usize);
    cuGraphDebugDotPrint: fn(CUgraph, *const c_char, c_uint);
    cuPointerGetAttribute: fn(*mut c_void, c_uint, CUdeviceptr);
    }
    optional {
        // CUDA 12.4+: the launch checks its argument count with it.
        cuFuncGetParamInfo: fn(CUfunction, usize, *mut usize, *mut usize);
    }
}

pub(super) fn no_driver(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::NoDriver, msg)
}

impl Driver {
    /// The driver API version, e.g. 12090 for CUDA 12.9.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The `CUresult` name, e.g. `CUDA_ERROR_INVALID_VALUE`.
    pub(super) fn error_name(&self, res: u32) -> Cow<'static, str> {
        let mut p: *const c_char = null();
        // SAFETY: cuGetErrorName only writes a static string pointer (or fails).
        let r = unsafe { (self.cuGetErrorName)(res, &mut p) };
        if r != CUDA_SUCCESS || p.is_null() {
            return Cow::Borrowed("CUDA_ERROR_UNRECOGNIZED");
        }
        // SAFETY: the driver returned a NUL-terminated static string.
        Cow::Owned(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// The error for a failed call (`res != CUDA_SUCCESS`).
    pub(super) fn err(&self, res: u32, what: impl fmt::Display) -> Error {
        Error::driver(res, &self.error_name(res), what)
    }

    #[inline]
    pub(super) fn check(&self, res: u32, what: &str) -> Result<()> {
        if res == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.err(res, what))
        }
    }

    /// SUCCESS -> true, NOT_READY -> false, else an error.
    pub(super) fn ready(&self, res: u32, what: &str) -> Result<bool> {
        match res {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            _ => Err(self.err(res, what)),
        }
    }
}

/// The driver, probed on first use and cached for the process (the failure too).
///
/// Checks that libcuda exists, looks up every symbol the backend uses, calls `cuInit`
/// and requires a 12.0 or newer driver. Any failure is [`ErrorCode::NoDriver`].
pub fn driver() -> Result<&'static Driver> {
    static DRIVER: OnceLock<Result<Driver, Error>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // Backstop only: after the presence check nothing in probe() can panic.
            catch_unwind(probe)
                .unwrap_or_else(|_| Err(no_driver("loading the CUDA driver library failed")))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn probe() -> Result<Driver> {
    // SAFETY: only tries to open and close the candidate library names.
    if !unsafe { sys::is_culib_present() } {
        return Err(no_driver("no CUDA driver library (libcuda.so) found"));
    }
    let mut d = Driver::load()?;
    // SAFETY: symbol checked by load(); flags must be 0.
    let res = unsafe { (d.cuInit)(0) };
    if res != CUDA_SUCCESS {
        let mut e = d.err(res, "cuInit failed");
        e.code = ErrorCode::NoDriver;
        return Err(e);
    }
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    let res = unsafe { (d.cuDriverGetVersion)(&mut v) };
    if res != CUDA_SUCCESS {
        let mut e = d.err(res, "cuDriverGetVersion failed");
        e.code = ErrorCode::NoDriver;
        return Err(e);
    }
    if v < MIN_DRIVER_VERSION {
        return Err(no_driver(format!(
            "CUDA driver too old: it supports CUDA {}.{}, sluice needs 12.0 or newer",
            v / 1000,
            (v % 1000) / 10
        )));
    }
    d.version = v;
    Ok(d)
}

/// Number of CUDA devices. Fails with [`ErrorCode::NoDriver`] without a usable driver.
pub fn device_count() -> Result<u32> {
    let d = driver()?;
    let mut n: c_int = 0;
    // SAFETY: writes one int; the driver is initialised.
    d.check(unsafe { (d.cuDeviceGetCount)(&mut n) }, "cuDeviceGetCount")?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// Why `cuGraphExecUpdate` refused, from `CUgraphExecUpdateResult`.
pub(super) fn update_result_reason(result: c_uint) -> String {
    let s = match result {
        0 => "no error reported",
        1 => "update failed",
        2 => "topology changed",
        3 => "node type changed",
        4 => "function changed",
        5 => "parameters changed",
        6 => "not supported",
        7 => "unsupported function change",
        8 => "attributes changed",
        other => return format!("update refused (result {other})"),
    };
    s.to_string()
}

/// A `CUgraphNodeType` in words.
pub(super) fn node_type_name(ty: c_uint) -> Cow<'static, str> {
    Cow::Borrowed(match ty {
        0 => "kernel",
        1 => "memcpy",
        2 => "memset",
        3 => "host",
        4 => "child graph",
        5 => "empty",
        6 => "event wait",
        7 => "event record",
        8 => "external semaphore signal",
        9 => "external semaphore wait",
        10 => "memory alloc",
        11 => "memory free",
        12 => "batch memory op",
        13 => "conditional",
        other => return Cow::Owned(format!("type {other}")),
    })
}

/// The text of a JIT log buffer, up to its NUL.
pub(super) fn log_text(buf: &[u8]) -> String {
    let bytes = match CStr::from_bytes_until_nul(buf) {
        Ok(s) => s.to_bytes(),
        Err(_) => buf,
    };
    String::from_utf8_lossy(bytes).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::super::expect_err;
    use super::*;

    #[test]
    fn probe_list_is_complete_and_unique() {
        let mut names = Driver::SYMBOLS.to_vec();
        assert!(names.iter().all(|n| n.starts_with("cu")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Driver::SYMBOLS.len());
        for n in [
            "cuInit",
            "cuLaunchHostFunc",
            "cuGraphExecUpdate_v2",
            "cuEventElapsedTime",
        ] {
            assert!(Driver::SYMBOLS.contains(&n), "{n}");
        }
    }

    #[test]
    fn no_driver_is_a_clean_cached_error() {
        // SAFETY: only probes for the library.
        if unsafe { sys::is_culib_present() } {
            return; // a machine with libcuda: covered by gpu_smoke
        }
        let first = expect_err(driver());
        assert_eq!(first.code, ErrorCode::NoDriver);
        assert!(first.message.contains("libcuda"), "{}", first.message);
        let second = expect_err(driver());
        assert_eq!(first, second);
        assert_eq!(expect_err(device_count()).code, ErrorCode::NoDriver);
        assert_eq!(expect_err(super::super::open(0)).code, ErrorCode::NoDriver);
    }

    #[test]
    fn driver_is_consistent_across_threads() {
        let results: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| driver().map(|d| d as *const Driver as usize)))
            .map(|t| t.join().expect("no panic"))
            .collect();
        for r in &results[1..] {
            assert_eq!(r, &results[0]);
        }
    }

    #[test]
    fn update_reasons_and_node_names() {
        assert_eq!(update_result_reason(2), "topology changed");
        assert_eq!(update_result_reason(3), "node type changed");
        assert_eq!(update_result_reason(99), "update refused (result 99)");
        assert_eq!(node_type_name(0), "kernel");
        assert_eq!(node_type_name(42), "type 42");
        assert_eq!(log_text(b"  oops \0junk"), "oops");
        assert_eq!(log_text(b"no nul"), "no nul");
    }
}

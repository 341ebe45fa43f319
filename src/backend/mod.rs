//! The device seam. Each backend implements [`Backend`] for one device, and the
//! core reaches it only through [`DeviceBackend`], an enum of the two that
//! dispatches statically (the calls inline down to the driver). Nothing above this
//! module names a CUDA or host-worker type.
//!
//! Raw handles are opaque `u64`s, the way the driver hands out pointers: a
//! `CUstream`/`CUevent`/`CUdeviceptr` on cuda, a pointer to a worker object on host.
//! The core guarantees a raw handle is only passed back to the backend that made it,
//! and only while it is alive.

pub mod cuda;
#[doc(hidden)]
pub mod faults;
pub mod host;

use crate::c_enum::c_enum;
use crate::error::Result;
use std::ffi::c_void;

c_enum! {
    /// Which backend a device runs on, seen by C as `SLUICE_BACKEND_*`.
    pub enum BackendKind: "SLUICE_BACKEND_" {
        /// The host backend: CPU worker threads with CUDA stream semantics.
        Host = 1 => HOST,
        /// The CUDA backend (driver API).
        Cuda = 2 => CUDA,
    }
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// Static properties of a device.
#[derive(Clone, Debug, Default)]
pub struct DeviceProps {
    pub name: String,
    pub total_memory: u64,
    pub compute_capability: (i32, i32),
    pub multiprocessor_count: i32,
}

/// How a backend compiles one program: decided before the compile, and part of the
/// kernel cache's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompilePlan {
    /// The options passed to the compiler, the target architecture included.
    pub options: Vec<String>,
    /// The target, for example `sm_86` (a cubin) or `compute_90` (PTX).
    pub target: String,
    /// True when the compile produces a cubin, false for PTX.
    pub cubin: bool,
    /// The compiler and its version, for example `NVRTC 12.9`.
    pub compiler: String,
    /// The driver API version, for example 12090.
    pub driver_version: i32,
}

/// A header that sources may `#include` by `name` without any include path.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinHeader {
    /// The include name, for example `sluice/rng.cuh`.
    pub name: &'static std::ffi::CStr,
    /// The header's text.
    pub text: &'static std::ffi::CStr,
}

/// A kernel attribute that the core sets ([`ModuleApi::function_set_attribute`]).
#[derive(Clone, Copy, Debug)]
pub enum FuncAttribute {
    /// The most dynamic shared memory a block may ask for, in bytes (cuda:
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    MaxDynamicShared(u32),
    /// Whether clusters may exceed the portable 8 blocks (cuda:
    /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`).
    NonPortableClusterSize(bool),
}

/// Kernel launch geometry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

c_enum! {
    /// Graph capture mode, seen by C as `SLUICE_CAPTURE_*`.
    pub enum CaptureMode: "SLUICE_CAPTURE_" {
        /// Capture mode: relaxed (the default). Safe when goroutines or other threads move
        /// between OS threads, since it ties nothing to the capturing thread.
        Relaxed = 0 => RELAXED,
        /// Capture mode: thread-local (CUDA's `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`).
        /// The capture ends only on the thread that began it, and that thread's
        /// unsafe calls (a synchronize, an allocation) fail while it lasts.
        ThreadLocal = 1 => THREAD_LOCAL,
        /// Capture mode: global (CUDA's `CU_STREAM_CAPTURE_MODE_GLOBAL`). As
        /// thread-local, and while it lasts every thread's unsafe calls fail
        /// (`SLUICE_ERROR_CAPTURE_FAILED`), which may also invalidate the capture.
        Global = 2 => GLOBAL,
    }
}

/// A host function run in stream order. It must not call back into CUDA. It is `Fn`
/// so that a captured graph can run it on every replay.
pub type HostFn = Box<dyn Fn() + Send + Sync + 'static>;

/// Declares the backend traits (one per area: device, streams, events, memory,
/// modules, graphs) from one list of methods, `Backend` as all of them together,
/// and gives [`DeviceBackend`] the same methods, each forwarding to its variant's
/// own. A backend implements each area in its own file.
macro_rules! backend_api {
    ($(
        $(#[$tmeta:meta])*
        trait $tr:ident {
            $( $(#[$meta:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?; )*
            $( unsafe {
                $( $(#[$umeta:meta])* fn $uname:ident(&self $(, $uarg:ident: $uty:ty)* $(,)?) $(-> $uret:ty)?; )*
            } )?
        }
    )*) => {
        $(
            $(#[$tmeta])*
            pub trait $tr {
                $( $(#[$meta])* fn $name(&self $(, $arg: $ty)*) $(-> $ret)?; )*
                $($( $(#[$umeta])* unsafe fn $uname(&self $(, $uarg: $uty)*) $(-> $uret)?; )*)?
            }

            impl DeviceBackend {
                $(
                    $(#[$meta])*
                    #[inline(always)]
                    pub fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                        match self {
                            DeviceBackend::Cuda(d) => d.$name($($arg),*),
                            DeviceBackend::Host(d) => d.$name($($arg),*),
                        }
                    }
                )*
                $($(
                    $(#[$umeta])*
                    #[inline(always)]
                    pub unsafe fn $uname(&self $(, $uarg: $uty)*) $(-> $uret)? {
                        // SAFETY: forwards the caller's contract unchanged.
                        unsafe {
                            match self {
                                DeviceBackend::Cuda(d) => d.$uname($($uarg),*),
                                DeviceBackend::Host(d) => d.$uname($($uarg),*),
                            }
                        }
                    }
                )*)?
            }
        )*

        /// One device of one backend: every area. All methods are thread-safe.
        /// Every method that talks to the driver binds the device's context on the
        /// calling thread first.
        pub trait Backend: Send + Sync + 'static $(+ $tr)* {}

        impl<T: Send + Sync + 'static $(+ $tr)*> Backend for T {}
    };
}

/// The backend of one device.
pub enum DeviceBackend {
    Cuda(cuda::CudaDevice),
    Host(host::HostDevice),
}

impl DeviceBackend {
    /// Opens device `ordinal` of `kind`.
    pub fn open(kind: BackendKind, ordinal: u32) -> Result<DeviceBackend> {
        Ok(match kind {
            BackendKind::Host => DeviceBackend::Host(host::open(ordinal)?),
            BackendKind::Cuda => DeviceBackend::Cuda(cuda::open(ordinal)?),
        })
    }

    /// Number of devices of `kind`; cuda without a driver is an error.
    pub fn count(kind: BackendKind) -> Result<u32> {
        match kind {
            BackendKind::Host => Ok(host::device_count()),
            BackendKind::Cuda => cuda::device_count(),
        }
    }
}

/// Marks the start of one C-ABI call: the thread's bound context is checked again.
#[inline(always)]
pub fn enter_call() {
    cuda::enter_call()
}

/// Marks the end of one C-ABI call.
#[inline(always)]
pub fn leave_call() {
    cuda::leave_call()
}

/// True when the calling thread runs a host function as a node of a graph replay
/// (the host backend's workers; never on cuda, where a host function cannot be
/// captured), false for one queued directly on a stream.
#[inline(always)]
pub(crate) fn in_graph_replay() -> bool {
    host::replaying()
}

/// Forgets the thread's cached context binding (after caller code that may switch it).
pub fn forget_binding() {
    cuda::forget_binding()
}

backend_api! {
    /// What a device is.
    trait DeviceApi {
        fn kind(&self) -> BackendKind;
        fn ordinal(&self) -> u32;
        fn props(&self) -> Result<DeviceProps>;
        /// (least, greatest) stream priority; greatest is numerically lowest on CUDA.
        fn priority_range(&self) -> Result<(i32, i32)>;
    }

    /// Streams and the host functions enqueued on them.
    trait StreamApi {
        fn stream_create(&self, non_blocking: bool, priority: i32) -> Result<u64>;
        fn stream_destroy(&self, stream: u64);
        /// Adopts a foreign raw stream without owning it (not the legacy default on
        /// cuda) and returns the raw handle to use; release it with
        /// `stream_release_external`.
        fn stream_adopt_external(&self, raw: u64) -> Result<u64>;
        fn stream_release_external(&self, raw: u64);
        /// True when all work enqueued so far has completed.
        fn stream_query(&self, stream: u64) -> Result<bool>;
        fn stream_synchronize(&self, stream: u64) -> Result<()>;
        fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()>;
        fn launch_host_fn(&self, stream: u64, f: HostFn) -> Result<()>;
    }

    /// Events.
    trait EventApi {
        fn event_create(&self, timing: bool) -> Result<u64>;
        fn event_destroy(&self, event: u64);
        fn event_record(&self, event: u64, stream: u64) -> Result<()>;
        /// True when the recorded work has completed (or the event was never recorded).
        fn event_query(&self, event: u64) -> Result<bool>;
        fn event_synchronize(&self, event: u64) -> Result<()>;
        fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32>;
    }

    /// Memory: stream-ordered device memory, pinned and registered host memory,
    /// copies and memsets.
    trait MemoryApi {
        fn mem_alloc_async(&self, size: usize, stream: u64) -> Result<u64>;
        fn mem_free_async(&self, ptr: u64, stream: u64) -> Result<()>;
        fn pinned_alloc(&self, size: usize) -> Result<*mut u8>;
        fn pinned_free(&self, ptr: *mut u8);
        fn host_register(&self, ptr: *mut u8, len: usize) -> Result<()>;
        fn host_unregister(&self, ptr: *mut u8);
        /// Copies `len` bytes between any two addresses this device can reach
        /// (device, pinned or registered host memory), in stream order.
        fn memcpy_async(&self, dst: u64, src: u64, len: usize, stream: u64) -> Result<()>;
        /// Copies from pageable host memory. Returns once `src` may be reused.
        fn memcpy_from_pageable(&self, dst: u64, src: &[u8], stream: u64) -> Result<()>;
        fn memset_async(&self, dst: u64, value: u8, len: usize, stream: u64) -> Result<()>;
        /// Checks that `[ptr, ptr+len)` is memory of this device, allocated by someone
        /// else (cuda: `cuPointerGetAttribute`; host: any address is accepted).
        fn check_foreign_range(&self, ptr: u64, len: usize) -> Result<()>;
        /// True when all of `[ptr, ptr+len)` is page-locked host memory that this
        /// device copies to and from directly (cuda: allocated or registered with the
        /// driver, `cuPointerGetAttributes`; host: this backend's own pinned blocks and
        /// registered ranges). False when unsure; never an error.
        fn host_ptr_is_pinned(&self, ptr: *const u8, len: usize) -> bool;
    }

    /// Modules and kernel launches (cuda; host returns Unsupported).
    trait ModuleApi {
        fn module_load(&self, image: &[u8]) -> Result<u64>;
        fn module_unload(&self, module: u64);
        fn module_function(&self, module: u64, name: &std::ffi::CStr) -> Result<u64>;
        /// The kernel's number of parameters, where the driver can tell
        /// (`cuFuncGetParamInfo`, CUDA 12.4+); `None` where it cannot.
        fn function_param_count(&self, func: u64) -> Result<Option<usize>>;
        /// The kernel's static shared memory and the most shared memory one block
        /// may use on this device once a kernel opts in, in bytes: `(static, limit)`.
        fn function_shared_limits(&self, func: u64) -> Result<(u32, u32)>;
        /// Sets one of `func`'s launch attributes, for its later launches.
        fn function_set_attribute(&self, func: u64, attr: FuncAttribute) -> Result<()>;
        /// Decides how [`compile`](ModuleApi::compile) would build a program with these
        /// options (the architecture defaults to the device's own). Fails where no
        /// compiler is available.
        fn compile_plan(&self, options: &[String]) -> Result<CompilePlan>;
        /// Compiles CUDA C `source` to an image (cubin or PTX, as `plan` says).
        /// `name` is the program's name in diagnostics. A compile error gives
        /// `ErrorCode::Compile` with the compiler's log.
        fn compile(
            &self,
            source: &std::ffi::CStr,
            name: &std::ffi::CStr,
            headers: &[BuiltinHeader],
            plan: &CompilePlan,
        ) -> Result<Vec<u8>>;
        unsafe {
            /// # Safety
            /// `args` must point to one valid pointer per kernel parameter.
            /// `programmatic`: with programmatic stream serialization (the kernel
            /// may start before the one ahead of it on the stream completes).
            fn launch_kernel(
                &self,
                func: u64,
                dims: LaunchDims,
                programmatic: bool,
                args: *mut *mut c_void,
                stream: u64,
            ) -> Result<()>;
        }
    }

    /// Graph capture and graphs (cuda; host implements its own recorder).
    trait GraphApi {
        fn capture_begin(&self, stream: u64, mode: CaptureMode) -> Result<()>;
        /// Ends capture and returns the raw graph.
        fn capture_end(&self, stream: u64) -> Result<u64>;
        /// True while `stream` is capturing (active capture status).
        fn capture_active(&self, stream: u64) -> Result<bool>;
        fn graph_destroy(&self, graph: u64);
        fn graph_instantiate(&self, graph: u64) -> Result<u64>;
        fn graph_exec_destroy(&self, exec: u64);
        fn graph_upload(&self, exec: u64, stream: u64) -> Result<()>;
        fn graph_launch(&self, exec: u64, stream: u64) -> Result<()>;
        /// Updates `exec` in place from `graph`. `Ok(Err(reason))` means the update was
        /// refused (topology or node kind changed) and the caller should re-instantiate.
        fn graph_exec_update(&self, exec: u64, graph: u64)
            -> Result<std::result::Result<(), String>>;
        /// Number of nodes in a graph.
        fn graph_node_count(&self, graph: u64) -> Result<usize>;
        fn graph_debug_dot(&self, graph: u64, path: &std::ffi::CStr, verbose: bool) -> Result<()>;
    }
}

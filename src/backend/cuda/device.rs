//! One CUDA device: its retained primary context, bound on the calling thread at
//! every entry, and the [`Backend`] implementation on the driver API.

use super::driver::*;
use super::image::prepare_image;
use crate::backend::{Backend, BackendKind, CaptureMode, DeviceProps, HostFn, LaunchDims};
use crate::error::{Error, ErrorCode, Result};
use crate::tls;
use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule, CUstream,
};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

/// Opens CUDA device `ordinal`, retaining its primary context.
pub fn open(ordinal: u32) -> Result<CudaDevice> {
    let d = driver()?;
    let count = device_count()?;
    if ordinal >= count {
        return Err(Error::new(
            ErrorCode::NoDevice,
            format!("CUDA device {ordinal} does not exist (there are {count})"),
        ));
    }
    let mut dev: CUdevice = 0;
    // SAFETY: writes one device handle; ordinal < count <= i32::MAX.
    let res = unsafe { (d.cuDeviceGet)(&mut dev, ordinal as c_int) };
    d.check(res, "cuDeviceGet")?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: writes one context handle; released in Drop.
    let res = unsafe { (d.cuDevicePrimaryCtxRetain)(&mut ctx, dev) };
    d.check(res, "cuDevicePrimaryCtxRetain")?;
    Ok(CudaDevice {
        ctx,
        hot: HotFns {
            ctx_get_current: d.cuCtxGetCurrent,
            stream_wait_event: d.cuStreamWaitEvent,
            event_record: d.cuEventRecord,
            launch_kernel: d.cuLaunchKernel,
        },
        drv: d,
        ordinal,
        dev,
    })
}

/// The driver functions of a tracked op, copied next to the context so that the
/// op path reads one cache line of the device instead of two.
#[derive(Clone, Copy)]
struct HotFns {
    ctx_get_current: unsafe extern "C" fn(*mut CUcontext) -> u32,
    stream_wait_event: unsafe extern "C" fn(CUstream, CUevent, c_uint) -> u32,
    event_record: unsafe extern "C" fn(CUevent, CUstream) -> u32,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CUstream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> u32,
}

/// One CUDA device and its retained primary context.
#[repr(C, align(64))]
pub struct CudaDevice {
    ctx: CUcontext,
    hot: HotFns,
    drv: &'static Driver,
    ordinal: u32,
    dev: CUdevice,
}

// SAFETY: a context handle is a process-wide driver object, usable from any thread.
unsafe impl Send for CudaDevice {}
// SAFETY: as above; the driver API is thread-safe and `CudaDevice` has no interior state.
unsafe impl Sync for CudaDevice {}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `open`.
        let _ = unsafe { (self.drv.cuDevicePrimaryCtxRelease_v2)(self.dev) };
    }
}

/// A raw `u64` handle as a driver pointer.
#[inline]
fn h<T>(raw: u64) -> *mut T {
    raw as usize as *mut T
}

/// A driver pointer as a raw `u64` handle.
#[inline]
fn raw<T>(p: *mut T) -> u64 {
    p as usize as u64
}

/// Marks the start of one C-ABI call: the thread's context is checked again.
#[inline(always)]
pub fn enter_call() {
    tls::call(|t| {
        t.scope.set(t.scope.get() + 1);
        t.bound.set(0);
    })
}

/// Marks the end of one C-ABI call.
#[inline(always)]
pub fn leave_call() {
    tls::call(|t| {
        t.scope.set(t.scope.get().saturating_sub(1));
        t.bound.set(0);
    })
}

/// Forgets the cached binding (after running caller code that may switch contexts).
pub fn forget_binding() {
    tls::call(|t| t.bound.set(0));
}

/// Runs a [`HostFn`] boxed by `launch_host_fn`; a panic never reaches the driver.
extern "C" fn host_fn_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: user_data is Box::into_raw(Box<HostFn>) from launch_host_fn, run once.
    let f = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    let _ = catch_unwind(AssertUnwindSafe(f));
}

impl CudaDevice {
    /// Makes the primary context current on this thread (compare, then set).
    #[inline(always)]
    fn bind(&self) -> Result<&'static Driver> {
        let d = self.drv;
        let ctx_bits = self.ctx as usize;
        if tls::call(|t| t.bound.get()) == ctx_bits {
            return Ok(d);
        }
        let mut cur: CUcontext = null_mut();
        // SAFETY: writes one context handle.
        let res = unsafe { (self.hot.ctx_get_current)(&mut cur) };
        if res != CUDA_SUCCESS || cur != self.ctx {
            self.set_current()?;
        }
        tls::call(|t| {
            if t.scope.get() > 0 {
                t.bound.set(ctx_bits);
            }
        });
        Ok(d)
    }

    #[cold]
    fn set_current(&self) -> Result<()> {
        // SAFETY: self.ctx is retained until Drop.
        let res = unsafe { (self.drv.cuCtxSetCurrent)(self.ctx) };
        self.drv
            .check(res, "binding the CUDA context (cuCtxSetCurrent)")
    }

    fn attribute(&self, d: &Driver, attr: c_uint, what: &str) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int for a valid attribute id.
        d.check(
            unsafe { (d.cuDeviceGetAttribute)(&mut v, attr, self.dev) },
            what,
        )?;
        Ok(v)
    }
}

impl Backend for CudaDevice {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn props(&self) -> Result<DeviceProps> {
        let d = self.bind()?;
        let mut buf = [0u8; 256];
        // SAFETY: the driver writes at most buf.len() bytes, NUL-terminated.
        let res =
            unsafe { (d.cuDeviceGetName)(buf.as_mut_ptr().cast(), buf.len() as c_int, self.dev) };
        d.check(res, "cuDeviceGetName")?;
        let name = match CStr::from_bytes_until_nul(&buf) {
            Ok(s) => s.to_string_lossy().into_owned(),
            Err(_) => String::from_utf8_lossy(&buf).into_owned(),
        };
        let mut total: usize = 0;
        // SAFETY: writes one size_t.
        let res = unsafe { (d.cuDeviceTotalMem_v2)(&mut total, self.dev) };
        d.check(res, "cuDeviceTotalMem")?;
        let major = self.attribute(
            d,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        )?;
        let minor = self.attribute(
            d,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        )?;
        let sms = self.attribute(
            d,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        )?;
        Ok(DeviceProps {
            name,
            total_memory: total as u64,
            compute_capability: (major, minor),
            multiprocessor_count: sms,
        })
    }

    fn priority_range(&self) -> Result<(i32, i32)> {
        let d = self.bind()?;
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: writes two ints for the current (bound) context.
        let res = unsafe { (d.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest) };
        d.check(res, "cuCtxGetStreamPriorityRange")?;
        Ok((least, greatest))
    }

    fn stream_create(&self, non_blocking: bool, priority: i32) -> Result<u64> {
        let d = self.bind()?;
        let flags = if non_blocking {
            CU_STREAM_NON_BLOCKING
        } else {
            0
        };
        let mut s: CUstream = null_mut();
        // SAFETY: writes one stream handle.
        let res = unsafe { (d.cuStreamCreateWithPriority)(&mut s, flags, priority) };
        d.check(res, "cuStreamCreateWithPriority")?;
        Ok(raw(s))
    }

    fn stream_destroy(&self, stream: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: the core passes a live stream of this device, destroyed once.
            let _ = unsafe { (d.cuStreamDestroy_v2)(h(stream)) };
        }
    }

    fn stream_adopt_external(&self, raw_stream: u64) -> Result<u64> {
        match raw_stream {
            0 => {
                return Err(Error::invalid_argument(
                    "the legacy default stream (0) cannot be adopted: it is shared by the whole \
                     context and implicitly synchronizes with other streams; pass a stream you created",
                ))
            }
            CU_STREAM_LEGACY => {
                return Err(Error::invalid_argument(
                    "CU_STREAM_LEGACY (0x1) cannot be adopted: it is the context-wide legacy \
                     default stream; pass a stream you created",
                ))
            }
            CU_STREAM_PER_THREAD => {
                return Err(Error::invalid_argument(
                    "CU_STREAM_PER_THREAD (0x2) cannot be adopted: it names a different stream on \
                     every OS thread; pass a stream you created",
                ))
            }
            _ => {}
        }
        let d = self.bind()?;
        let mut flags: c_uint = 0;
        // SAFETY: the caller vouches that raw_stream is a CUstream; the driver validates it.
        let res = unsafe { (d.cuStreamGetFlags)(h(raw_stream), &mut flags) };
        if res != CUDA_SUCCESS {
            let mut e = d.err(
                res,
                format_args!("{raw_stream:#x} is not a valid CUDA stream"),
            );
            e.code = ErrorCode::InvalidArgument;
            return Err(e);
        }
        let mut ctx: CUcontext = null_mut();
        // SAFETY: the stream was just validated; writes one context handle.
        let res = unsafe { (d.cuStreamGetCtx)(h(raw_stream), &mut ctx) };
        if res != CUDA_SUCCESS {
            let mut e = d.err(
                res,
                format_args!("{raw_stream:#x} is not a valid CUDA stream"),
            );
            e.code = ErrorCode::InvalidArgument;
            return Err(e);
        }
        if ctx != self.ctx {
            return Err(Error::invalid_argument(format!(
                "CUDA stream {raw_stream:#x} belongs to another context, not the primary context \
                 of CUDA device {}",
                self.ordinal
            )));
        }
        Ok(raw_stream)
    }

    fn stream_release_external(&self, _raw: u64) {}

    fn stream_query(&self, stream: u64) -> Result<bool> {
        let d = self.bind()?;
        // SAFETY: a live stream of this device.
        d.ready(unsafe { (d.cuStreamQuery)(h(stream)) }, "cuStreamQuery")
    }

    fn stream_synchronize(&self, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live stream of this device.
        d.check(
            unsafe { (d.cuStreamSynchronize)(h(stream)) },
            "cuStreamSynchronize",
        )
    }

    #[inline(always)]
    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live stream and event of this device.
        let res = unsafe { (self.hot.stream_wait_event)(h(stream), h(event), 0) };
        d.check(res, "cuStreamWaitEvent")
    }

    fn launch_host_fn(&self, stream: u64, f: HostFn) -> Result<()> {
        if self.capture_active(stream)? {
            // A captured host node would call the one-shot closure on every replay.
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                "a host callback cannot be captured into a CUDA graph (each replay would run it again)",
            ));
        }
        let d = self.bind()?;
        let user = Box::into_raw(Box::new(f)).cast::<c_void>();
        // SAFETY: the trampoline takes ownership of `user` when the driver runs it.
        let res = unsafe { (d.cuLaunchHostFunc)(h(stream), Some(host_fn_trampoline), user) };
        if res != CUDA_SUCCESS {
            // SAFETY: not enqueued, so the trampoline will never see `user`.
            drop(unsafe { Box::from_raw(user.cast::<HostFn>()) });
            return Err(d.err(res, "cuLaunchHostFunc"));
        }
        Ok(())
    }

    fn event_create(&self, timing: bool) -> Result<u64> {
        let d = self.bind()?;
        let flags = if timing { 0 } else { CU_EVENT_DISABLE_TIMING };
        let mut e: CUevent = null_mut();
        // SAFETY: writes one event handle.
        d.check(unsafe { (d.cuEventCreate)(&mut e, flags) }, "cuEventCreate")?;
        Ok(raw(e))
    }

    fn event_destroy(&self, event: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live event of this device, destroyed once.
            let _ = unsafe { (d.cuEventDestroy_v2)(h(event)) };
        }
    }

    #[inline(always)]
    fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live event and stream of this device.
        let res = unsafe { (self.hot.event_record)(h(event), h(stream)) };
        d.check(res, "cuEventRecord")
    }

    fn event_query(&self, event: u64) -> Result<bool> {
        let d = self.bind()?;
        // SAFETY: a live event of this device.
        d.ready(unsafe { (d.cuEventQuery)(h(event)) }, "cuEventQuery")
    }

    fn event_synchronize(&self, event: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live event of this device.
        d.check(
            unsafe { (d.cuEventSynchronize)(h(event)) },
            "cuEventSynchronize",
        )
    }

    fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        let d = self.bind()?;
        let mut ms: f32 = 0.0;
        // SAFETY: two live events of this device; writes one float.
        let res = unsafe { (d.cuEventElapsedTime)(&mut ms, h(start), h(end)) };
        if res == 600 {
            // CUDA_ERROR_NOT_READY: same error as the host backend gives.
            return Err(Error::new(
                ErrorCode::InvalidState,
                "event has not completed yet",
            ));
        }
        d.check(res, "cuEventElapsedTime")?;
        Ok(ms)
    }

    fn mem_alloc_async(&self, size: usize, stream: u64) -> Result<u64> {
        let d = self.bind()?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: writes one device pointer; a live stream of this device.
        let res = unsafe { (d.cuMemAllocAsync)(&mut p, size, h(stream)) };
        d.check(res, "cuMemAllocAsync")?;
        Ok(p)
    }

    fn mem_free_async(&self, ptr: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: ptr came from mem_alloc_async and is freed once, in stream order.
        let res = unsafe { (d.cuMemFreeAsync)(ptr, h(stream)) };
        d.check(res, "cuMemFreeAsync")
    }

    fn pinned_alloc(&self, size: usize) -> Result<*mut u8> {
        let d = self.bind()?;
        let mut p: *mut c_void = null_mut();
        // SAFETY: writes one host pointer.
        let res = unsafe { (d.cuMemHostAlloc)(&mut p, size, CU_MEMHOSTALLOC_PORTABLE) };
        d.check(res, "cuMemHostAlloc")?;
        Ok(p.cast())
    }

    fn pinned_free(&self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        if let Ok(d) = self.bind() {
            // SAFETY: ptr came from pinned_alloc and is freed once.
            let _ = unsafe { (d.cuMemFreeHost)(ptr.cast()) };
        }
    }

    fn host_register(&self, ptr: *mut u8, len: usize) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: the caller owns [ptr, ptr+len) until host_unregister.
        let res = unsafe { (d.cuMemHostRegister_v2)(ptr.cast(), len, CU_MEMHOSTREGISTER_PORTABLE) };
        d.check(res, "cuMemHostRegister")
    }

    fn host_unregister(&self, ptr: *mut u8) {
        if let Ok(d) = self.bind() {
            // SAFETY: ptr was registered by host_register.
            let _ = unsafe { (d.cuMemHostUnregister)(ptr.cast()) };
        }
    }

    fn memcpy_async(&self, dst: u64, src: u64, len: usize, stream: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let d = self.bind()?;
        // SAFETY: the core checked both ranges; unified addressing resolves the kinds.
        let res = unsafe { (d.cuMemcpyAsync)(dst, src, len, h(stream)) };
        d.check(res, "cuMemcpyAsync")
    }

    fn memcpy_from_pageable(&self, dst: u64, src: &[u8], stream: u64) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let d = self.bind()?;
        // If the driver knows the source (pinned, registered or managed), the copy is a
        // true async DMA, so wait for it before `src` may be reused. The plural query
        // reports type 0 for plain pageable memory instead of failing.
        let mut attr = [CU_POINTER_ATTRIBUTE_MEMORY_TYPE];
        let mut mem_type: c_uint = 0;
        let mut data = [(&mut mem_type as *mut c_uint).cast::<c_void>()];
        // SAFETY: one attribute, one output slot of the right size; a read-only query.
        let res = unsafe {
            (d.cuPointerGetAttributes)(
                1,
                attr.as_mut_ptr(),
                data.as_mut_ptr(),
                src.as_ptr() as usize as CUdeviceptr,
            )
        };
        let known = res == CUDA_SUCCESS && mem_type != 0;
        // SAFETY: src is valid for src.len() bytes; pageable sources are staged before return.
        let res =
            unsafe { (d.cuMemcpyHtoDAsync_v2)(dst, src.as_ptr().cast(), src.len(), h(stream)) };
        d.check(res, "cuMemcpyHtoDAsync")?;
        if known {
            // SAFETY: a live stream of this device.
            let res = unsafe { (d.cuStreamSynchronize)(h(stream)) };
            d.check(
                res,
                "cuStreamSynchronize (page-locked source of a pageable copy)",
            )?;
        }
        Ok(())
    }

    fn memset_async(&self, dst: u64, value: u8, len: usize, stream: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let d = self.bind()?;
        // SAFETY: the core checked the range.
        let res = unsafe { (d.cuMemsetD8Async)(dst, value, len, h(stream)) };
        d.check(res, "cuMemsetD8Async")
    }

    fn module_load(&self, image: &[u8]) -> Result<u64> {
        let image = prepare_image(image)?;
        let d = self.bind()?;
        let mut err_log = vec![0u8; JIT_LOG_BYTES];
        let mut info_log = vec![0u8; JIT_LOG_BYTES];
        let mut opts = [
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_INFO_LOG_BUFFER,
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals: [*mut c_void; 4] = [
            err_log.as_mut_ptr().cast(),
            JIT_LOG_BYTES as *mut c_void,
            info_log.as_mut_ptr().cast(),
            JIT_LOG_BYTES as *mut c_void,
        ];
        let mut m: CUmodule = null_mut();
        // SAFETY: the image was validated (PTX NUL-terminated); log buffers outlive the call.
        let res = unsafe {
            (d.cuModuleLoadDataEx)(
                &mut m,
                image.as_ptr().cast(),
                opts.len() as c_uint,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if res != CUDA_SUCCESS {
            let mut e = d.err(res, "loading CUDA module (cuModuleLoadDataEx)");
            e.code = ErrorCode::ModuleLoad;
            for (label, log) in [("JIT error log", &err_log), ("JIT info log", &info_log)] {
                let text = log_text(log);
                if !text.is_empty() {
                    e.message.push_str(&format!("\n{label}:\n{text}"));
                }
            }
            return Err(e);
        }
        Ok(raw(m))
    }

    fn module_unload(&self, module: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live module of this device, unloaded once.
            let _ = unsafe { (d.cuModuleUnload)(h(module)) };
        }
    }

    fn module_function(&self, module: u64, name: &CStr) -> Result<u64> {
        let d = self.bind()?;
        let mut f: CUfunction = null_mut();
        // SAFETY: a live module; name is NUL-terminated.
        let res = unsafe { (d.cuModuleGetFunction)(&mut f, h(module), name.as_ptr()) };
        if res == CUDA_ERROR_NOT_FOUND {
            let mut e = d.err(
                res,
                format_args!(
                    "kernel function '{}' not found in module",
                    name.to_string_lossy()
                ),
            );
            e.code = ErrorCode::NotFound;
            return Err(e);
        }
        d.check(res, "cuModuleGetFunction")?;
        Ok(raw(f))
    }

    #[inline(always)]
    unsafe fn launch_kernel(
        &self,
        func: u64,
        dims: LaunchDims,
        args: *mut *mut c_void,
        stream: u64,
    ) -> Result<()> {
        let d = self.bind()?;
        let [gx, gy, gz] = dims.grid;
        let [bx, by, bz] = dims.block;
        // SAFETY: the caller guarantees args matches the kernel's parameters.
        let res = unsafe {
            (self.hot.launch_kernel)(
                h(func),
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                dims.shared_mem_bytes,
                h(stream),
                args,
                null_mut(),
            )
        };
        d.check(res, "cuLaunchKernel")
    }

    fn capture_begin(&self, stream: u64, mode: CaptureMode) -> Result<()> {
        let d = self.bind()?;
        let mode: c_uint = match mode {
            CaptureMode::Global => 0,
            CaptureMode::ThreadLocal => 1,
            CaptureMode::Relaxed => 2,
        };
        // SAFETY: a live stream of this device; mode is a valid CUstreamCaptureMode.
        let res = unsafe { (d.cuStreamBeginCapture_v2)(h(stream), mode) };
        d.check(res, "cuStreamBeginCapture")
    }

    fn capture_end(&self, stream: u64) -> Result<u64> {
        let d = self.bind()?;
        let mut g: CUgraph = null_mut();
        // SAFETY: a live stream; writes one graph handle.
        let res = unsafe { (d.cuStreamEndCapture)(h(stream), &mut g) };
        d.check(res, "cuStreamEndCapture")?;
        if g.is_null() {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                "cuStreamEndCapture returned no graph (the capture was invalidated)",
            ));
        }
        Ok(raw(g))
    }

    fn capture_active(&self, stream: u64) -> Result<bool> {
        let d = self.bind()?;
        let mut status: c_uint = 0;
        // SAFETY: a live stream; writes one int.
        let res = unsafe { (d.cuStreamIsCapturing)(h(stream), &mut status) };
        d.check(res, "cuStreamIsCapturing")?;
        // ACTIVE (1) and INVALIDATED (2) both still need cuStreamEndCapture.
        Ok(status != 0)
    }

    fn graph_destroy(&self, graph: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live graph, destroyed once.
            let _ = unsafe { (d.cuGraphDestroy)(h(graph)) };
        }
    }

    fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        let d = self.bind()?;
        let mut exec: CUgraphExec = null_mut();
        // SAFETY: a live graph; writes one exec handle.
        let res = unsafe { (d.cuGraphInstantiateWithFlags)(&mut exec, h(graph), 0) };
        d.check(res, "cuGraphInstantiateWithFlags")?;
        Ok(raw(exec))
    }

    fn graph_exec_destroy(&self, exec: u64) {
        if let Ok(d) = self.bind() {
            // SAFETY: a live exec, destroyed once.
            let _ = unsafe { (d.cuGraphExecDestroy)(h(exec)) };
        }
    }

    fn graph_upload(&self, exec: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live exec and stream.
        let res = unsafe { (d.cuGraphUpload)(h(exec), h(stream)) };
        d.check(res, "cuGraphUpload")
    }

    fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        let d = self.bind()?;
        // SAFETY: a live exec and stream.
        let res = unsafe { (d.cuGraphLaunch)(h(exec), h(stream)) };
        d.check(res, "cuGraphLaunch")
    }

    fn graph_exec_update(&self, exec: u64, graph: u64) -> Result<std::result::Result<(), String>> {
        let d = self.bind()?;
        let mut info = UpdateResultInfo {
            result: 0,
            error_node: null_mut(),
            error_from_node: null_mut(),
        };
        // SAFETY: a live exec and graph; info matches CUgraphExecUpdateResultInfo's layout.
        let res = unsafe { (d.cuGraphExecUpdate_v2)(h(exec), h(graph), &mut info) };
        match res {
            CUDA_SUCCESS => Ok(Ok(())),
            CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => {
                let mut reason = update_result_reason(info.result);
                if !info.error_node.is_null() {
                    let mut ty: c_uint = 0;
                    // SAFETY: the driver returned a node of `graph`; writes one int.
                    if unsafe { (d.cuGraphNodeGetType)(info.error_node, &mut ty) } == CUDA_SUCCESS {
                        reason = format!("{reason} (at a {} node)", node_type_name(ty));
                    }
                }
                Ok(Err(reason))
            }
            _ => Err(d.err(res, "cuGraphExecUpdate")),
        }
    }

    fn graph_node_count(&self, graph: u64) -> Result<usize> {
        let d = self.bind()?;
        let mut n: usize = 0;
        // SAFETY: a live graph; with a NULL array the driver only writes the count.
        let res = unsafe { (d.cuGraphGetNodes)(h(graph), null_mut(), &mut n) };
        d.check(res, "cuGraphGetNodes")?;
        Ok(n)
    }

    fn graph_debug_dot(&self, graph: u64, path: &CStr, verbose: bool) -> Result<()> {
        let d = self.bind()?;
        let flags = if verbose {
            CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE
        } else {
            0
        };
        // SAFETY: a live graph; path is NUL-terminated.
        let res = unsafe { (d.cuGraphDebugDotPrint)(h(graph), path.as_ptr(), flags) };
        d.check(res, "cuGraphDebugDotPrint")
    }
}

#[cfg(test)]
mod tests {
    use super::super::expect_err;
    use super::*;
    use std::sync::Arc;

    #[test]
    fn trampoline_runs_once_and_swallows_panics() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = Arc::new(AtomicUsize::new(0));
        let h2 = hits.clone();
        let f: HostFn = Box::new(move || {
            h2.fetch_add(1, Ordering::SeqCst);
        });
        host_fn_trampoline(Box::into_raw(Box::new(f)).cast());
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let p: HostFn = Box::new(|| panic!("callback panic (expected by the test)"));
        host_fn_trampoline(Box::into_raw(Box::new(p)).cast());
        host_fn_trampoline(null_mut());
    }

    const FILL_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 n)
{
    .reg .pred p;
    .reg .b32 r<5>;
    .reg .b64 rd<5>;
    ld.param.u64 rd1, [out];
    ld.param.u32 r1, [n];
    mov.u32 r2, %ctaid.x;
    mov.u32 r3, %ntid.x;
    mov.u32 r4, %tid.x;
    mad.lo.s32 r2, r2, r3, r4;
    setp.ge.u32 p, r2, r1;
    @p bra DONE;
    cvta.to.global.u64 rd2, rd1;
    mul.wide.u32 rd3, r2, 4;
    add.s64 rd4, rd2, rd3;
    st.global.u32 [rd4], r2;
DONE:
    ret;
}
"#;

    /// Exercises every method on a real GPU; returns early where there is no driver.
    #[test]
    fn gpu_smoke() {
        if driver().is_err() || device_count().unwrap_or(0) == 0 {
            return;
        }
        let dev = open(0).expect("open");
        assert_eq!(
            expect_err(open(u32::MAX).map(|_| ())).code,
            ErrorCode::NoDevice
        );
        let props = dev.props().expect("props");
        assert!(!props.name.is_empty() && props.total_memory > 0);
        assert!(props.compute_capability.0 >= 5 && props.multiprocessor_count > 0);
        let (least, greatest) = dev.priority_range().expect("priority range");
        assert!(greatest <= least);

        for bad in [0u64, 1, 2] {
            assert_eq!(
                expect_err(dev.stream_adopt_external(bad)).code,
                ErrorCode::InvalidArgument
            );
        }
        let s = dev.stream_create(true, greatest).expect("stream");
        let s2 = dev.stream_create(false, 0).expect("stream 2");
        dev.stream_adopt_external(s)
            .expect("own stream is adoptable");

        // Memory, copies, memset, events.
        let n = 1 << 20;
        let buf = dev.mem_alloc_async(n, s).expect("alloc");
        let pinned = dev.pinned_alloc(n).expect("pinned");
        let mut host = vec![7u8; n];
        dev.host_register(host.as_mut_ptr(), n).expect("register");
        let (e0, e1) = (
            dev.event_create(true).expect("ev"),
            dev.event_create(true).expect("ev"),
        );
        dev.event_record(e0, s).expect("record");
        dev.memset_async(buf, 0xAB, n, s).expect("memset");
        dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
        dev.event_record(e1, s).expect("record");
        dev.stream_wait_event(s2, e1).expect("wait");
        dev.memcpy_async(host.as_mut_ptr() as u64, buf, n, s2)
            .expect("d2h 2");
        dev.stream_synchronize(s2).expect("sync");
        dev.event_synchronize(e1).expect("ev sync");
        assert!(dev.event_query(e1).expect("query"));
        assert!(dev.event_elapsed_ms(e0, e1).expect("elapsed") >= 0.0);
        // SAFETY: pinned holds n initialised bytes after the synchronised copy.
        let got = unsafe { std::slice::from_raw_parts(pinned, n) };
        assert!(got.iter().all(|&b| b == 0xAB) && host.iter().all(|&b| b == 0xAB));
        let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
        dev.memcpy_from_pageable(buf, &src, s)
            .expect("h2d pageable");
        dev.memcpy_from_pageable(buf, &host, s)
            .expect("h2d registered");
        dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
        dev.stream_synchronize(s).expect("sync");
        // SAFETY: as above.
        let got = unsafe { std::slice::from_raw_parts(pinned, n) };
        assert!(got.iter().all(|&b| b == 0xAB));

        // Host callbacks.
        let (tx, rx) = std::sync::mpsc::channel();
        dev.launch_host_fn(s, Box::new(move || tx.send(42).unwrap_or(())))
            .expect("host fn");
        dev.launch_host_fn(s, Box::new(|| panic!("expected callback panic")))
            .expect("host fn 2");
        dev.stream_synchronize(s).expect("sync");
        assert_eq!(rx.recv().ok(), Some(42));
        assert!(dev.stream_query(s).expect("query"));

        // Modules and kernels.
        let m = dev.module_load(FILL_PTX.as_bytes()).expect("module");
        let f = dev.module_function(m, c"fill").expect("function");
        assert_eq!(
            expect_err(dev.module_function(m, c"nope")).code,
            ErrorCode::NotFound
        );
        let bad = expect_err(dev.module_load(b".version 7.0\n.target sm_50\nbogus;"));
        assert_eq!(bad.code, ErrorCode::ModuleLoad);
        assert!(bad.message.contains("JIT error log"), "{}", bad.message);
        let count = (n / 4) as u32;
        let mut out = buf;
        let mut cnt = count;
        let mut args = [
            (&mut out as *mut u64).cast::<c_void>(),
            (&mut cnt as *mut u32).cast::<c_void>(),
        ];
        let dims = LaunchDims {
            grid: [count.div_ceil(256), 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
        };
        // SAFETY: two args matching fill(u64, u32).
        unsafe { dev.launch_kernel(f, dims, args.as_mut_ptr(), s) }.expect("launch");
        dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
        dev.stream_synchronize(s).expect("sync");
        // SAFETY: as above.
        let words = unsafe { std::slice::from_raw_parts(pinned.cast::<u32>(), n / 4) };
        assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));

        // Capture, graphs, update.
        let capture = |value: u8, twice: bool| {
            dev.capture_begin(s, CaptureMode::Relaxed).expect("begin");
            assert!(dev.capture_active(s).expect("active"));
            assert_eq!(
                expect_err(dev.launch_host_fn(s, Box::new(|| ()))).code,
                ErrorCode::CaptureUnsupported
            );
            dev.memset_async(buf, value, n, s).expect("memset");
            if twice {
                dev.memset_async(buf, value, n / 2, s).expect("memset 2");
            }
            let g = dev.capture_end(s).expect("end");
            assert!(!dev.capture_active(s).expect("inactive"));
            g
        };
        let g1 = capture(1, false);
        assert_eq!(dev.graph_node_count(g1).expect("count"), 1);
        let exec = dev.graph_instantiate(g1).expect("instantiate");
        dev.graph_upload(exec, s).expect("upload");
        let g2 = capture(2, false);
        assert_eq!(dev.graph_exec_update(exec, g2).expect("update"), Ok(()));
        dev.graph_launch(exec, s).expect("launch");
        dev.memcpy_async(pinned as u64, buf, n, s).expect("d2h");
        dev.stream_synchronize(s).expect("sync");
        // SAFETY: as above.
        let got = unsafe { std::slice::from_raw_parts(pinned, n) };
        assert!(got.iter().all(|&b| b == 2));
        let g3 = capture(3, true);
        let refused = dev.graph_exec_update(exec, g3).expect("update call");
        let reason = refused.expect_err("topology changed");
        assert!(reason.contains("topology"), "{reason}");
        let dot = std::env::temp_dir().join("sluice_cuda_smoke.dot");
        let dot_c = std::ffi::CString::new(dot.to_string_lossy().into_owned()).expect("path");
        dev.graph_debug_dot(g3, &dot_c, true).expect("dot");
        assert!(std::fs::metadata(&dot)
            .map(|m| m.len() > 0)
            .unwrap_or(false));

        // Teardown.
        dev.graph_exec_destroy(exec);
        for g in [g1, g2, g3] {
            dev.graph_destroy(g);
        }
        dev.module_unload(m);
        dev.mem_free_async(buf, s).expect("free");
        dev.stream_synchronize(s).expect("sync");
        dev.host_unregister(host.as_mut_ptr());
        dev.pinned_free(pinned);
        dev.event_destroy(e0);
        dev.event_destroy(e1);
        dev.stream_destroy(s);
        dev.stream_destroy(s2);

        // Binding from another thread, where no context is current yet.
        std::thread::scope(|t| {
            t.spawn(|| {
                let s = dev.stream_create(true, 0).expect("stream on new thread");
                dev.stream_synchronize(s).expect("sync");
                dev.stream_destroy(s);
            });
        });
    }
}

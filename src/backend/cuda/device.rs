//! One CUDA device: its retained primary context, bound on the calling thread at
//! every entry, and the [`Backend`] implementation on the driver API.

use super::driver::*;
use crate::backend::{BackendKind, DeviceApi, DeviceProps};
use crate::error::{Error, ErrorCode, Result};
use crate::tls;
use cudarc::driver::sys::{CUcontext, CUdevice, CUevent, CUfunction, CUstream};
use std::ffi::{c_int, c_uint, c_void, CStr};
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
pub(super) struct HotFns {
    pub(super) ctx_get_current: unsafe extern "C" fn(*mut CUcontext) -> u32,
    pub(super) stream_wait_event: unsafe extern "C" fn(CUstream, CUevent, c_uint) -> u32,
    pub(super) event_record: unsafe extern "C" fn(CUevent, CUstream) -> u32,
    #[allow(clippy::type_complexity)]
    pub(super) launch_kernel: unsafe extern "C" fn(
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
    pub(super) ctx: CUcontext,
    pub(super) hot: HotFns,
    pub(super) drv: &'static Driver,
    pub(super) ordinal: u32,
    pub(super) dev: CUdevice,
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
pub(super) fn h<T>(raw: u64) -> *mut T {
    raw as usize as *mut T
}

/// A driver pointer as a raw `u64` handle.
#[inline]
pub(super) fn raw<T>(p: *mut T) -> u64 {
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

impl CudaDevice {
    /// Makes the primary context current on this thread (compare, then set).
    #[inline(always)]
    pub(super) fn bind(&self) -> Result<&'static Driver> {
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

    /// The compute capability (major, minor).
    pub(super) fn compute_capability(&self) -> Result<(i32, i32)> {
        let d = self.drv;
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
        Ok((major, minor))
    }

    /// A device attribute (`cuDeviceGetAttribute`).
    pub(super) fn attribute(&self, d: &Driver, attr: c_uint, what: &str) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int for a valid attribute id.
        d.check(
            unsafe { (d.cuDeviceGetAttribute)(&mut v, attr, self.dev) },
            what,
        )?;
        Ok(v)
    }
}

impl DeviceApi for CudaDevice {
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
        let (major, minor) = self.compute_capability()?;
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
}

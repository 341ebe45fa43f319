//! Streams on the driver API, and the host functions enqueued on them.

use super::device::{h, raw, CudaDevice};
use super::driver::*;
use crate::backend::HostFn;
use crate::backend::{GraphApi, StreamApi};
use crate::error::{Error, ErrorCode, Result};
use cudarc::driver::sys::{CUcontext, CUstream};
use std::ffi::{c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

/// Runs a [`HostFn`] boxed by `launch_host_fn`; a panic never reaches the driver.
pub(super) extern "C" fn host_fn_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: user_data is Box::into_raw(Box<HostFn>) from launch_host_fn, run once.
    let f = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    let _ = catch_unwind(AssertUnwindSafe(f));
}

impl StreamApi for CudaDevice {
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
        let not_a_stream = |res: u32| -> Result<()> {
            if res == CUDA_SUCCESS {
                return Ok(());
            }
            let mut e = d.err(
                res,
                format_args!("{raw_stream:#x} is not a valid CUDA stream"),
            );
            e.code = ErrorCode::InvalidArgument;
            Err(e)
        };
        let mut flags: c_uint = 0;
        // SAFETY: the caller vouches that raw_stream is a CUstream; the driver validates it.
        not_a_stream(unsafe { (d.cuStreamGetFlags)(h(raw_stream), &mut flags) })?;
        let mut ctx: CUcontext = null_mut();
        // SAFETY: the stream was just validated; writes one context handle.
        not_a_stream(unsafe { (d.cuStreamGetCtx)(h(raw_stream), &mut ctx) })?;
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
}

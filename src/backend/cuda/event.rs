//! Events on the driver API.

use super::device::{h, raw, CudaDevice};
use super::driver::*;
use crate::backend::EventApi;
use crate::error::{Error, ErrorCode, Result};
use cudarc::driver::sys::CUevent;
use std::ptr::null_mut;

impl EventApi for CudaDevice {
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
}

//! CUDA backend on the driver API.
//!
//! - [`driver`] probes libcuda once per process and caches the outcome, so a machine
//!   without CUDA gets a clean [`ErrorCode::NoDriver`] instead of a cudarc panic.
//! - The probe looks up every entry point we call through `sys::culib()` and keeps
//!   them in [`Driver`] as plain function pointers returning `u32`: no lazy lookup can
//!   panic later, and a `CUresult` newer than cudarc's enum is never materialised.
//! - Each [`CudaDevice`] retains its device's primary context and binds it on the
//!   calling thread at every entry (callers may hop between OS threads).
//! - `nvrtc.rs` loads NVRTC the same way, on the first compile, for
//!   `sluice_module_compile`.

mod device;
mod driver;
mod event;
mod graph;
mod image;
mod memory;
mod module;
mod nvrtc;
mod stream;
#[cfg(test)]
mod tests;

pub use device::{enter_call, forget_binding, leave_call, open, CudaDevice};
pub use driver::{device_count, driver, Driver};

#[cfg(test)]
fn expect_err<T>(r: crate::error::Result<T>) -> crate::error::Error {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

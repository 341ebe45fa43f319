//! Kernel modules and launches (cuda backend; host returns Unsupported).

use crate::backend::LaunchDims;
use crate::device::Device;
use crate::engine;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::sync::{self, SyncObject};
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// A loaded PTX, cubin or fatbin image.
pub struct Module {
    pub(crate) device: Arc<Device>,
    raw: u64,
}

/// A kernel of a module; keeps its module loaded.
pub struct Function {
    raw: u64,
    /// The module's device, read by every launch (saves a hop through the module).
    device: Arc<Device>,
    /// Keeps the module loaded while the function exists.
    _module: Arc<Module>,
    pub name: String,
}

impl Module {
    /// Loads an image. A failed JIT compile returns `ModuleLoad` with the JIT log.
    pub fn load(device: &Arc<Device>, image: &[u8]) -> Result<Arc<Module>> {
        if image.is_empty() {
            return Err(Error::invalid_argument("module image is empty"));
        }
        let raw = device.backend.module_load(image)?;
        Ok(Arc::new(Module {
            device: device.clone(),
            raw,
        }))
    }

    pub fn function(self: &Arc<Self>, name: &CStr) -> Result<Arc<Function>> {
        let raw = self.device.backend.module_function(self.raw, name)?;
        Ok(Arc::new(Function {
            device: self.device.clone(),
            _module: self.clone(),
            raw,
            name: name.to_string_lossy().into_owned(),
        }))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.device.backend.module_unload(self.raw);
    }
}

#[inline(always)]
fn check_dims(d: &LaunchDims) -> Result<()> {
    if d.grid.contains(&0) || d.block.contains(&0) {
        return Err(Error::invalid_argument(format!(
            "launch dimensions must be non-zero (grid {:?}, block {:?})",
            d.grid, d.block
        )));
    }
    Ok(())
}

/// Launches `func` on `stream` as one tracked op over `reads` and `writes`.
///
/// # Safety
/// `args` must hold one valid pointer per kernel parameter, and the kernel may only
/// touch memory it is allowed to.
pub unsafe fn launch(
    stream: &Stream,
    func: &Function,
    dims: LaunchDims,
    args: *mut *mut c_void,
    reads: &[Arc<SyncObject>],
    writes: &[Arc<SyncObject>],
) -> Result<()> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { launch_set(stream, func, dims, args, &sync::access_set(reads, writes)) }
}

/// [`launch`] over an access set built by the caller.
///
/// # Safety
/// As for [`launch`].
#[inline(always)]
pub(crate) unsafe fn launch_set(
    stream: &Stream,
    func: &Function,
    dims: LaunchDims,
    args: *mut *mut c_void,
    set: &[sync::Access<'_>],
) -> Result<()> {
    stream
        .device
        .same_device_with(&func.device, || format!("kernel '{}'", func.name))?;
    check_dims(&dims)?;
    engine::run_op(
        stream,
        set,
        #[inline(always)]
        || {
            // SAFETY: forwarded from the caller's contract.
            unsafe { stream.drv_launch_kernel(func.raw, dims, args) }
                .map_err(|e| e.context(format!("launch of '{}'", func.name)))
        },
    )?;
    Ok(())
}

/// Enqueues a host callback as one tracked op. A non-zero return or a panic becomes
/// a `CallbackFailed` error at the stream's next synchronisation.
pub fn host_callback(
    stream: &Stream,
    call: impl Fn() -> i32 + Send + Sync + 'static,
    reads: &[Arc<SyncObject>],
    writes: &[Arc<SyncObject>],
) -> Result<()> {
    host_callback_set(stream, call, &sync::access_set(reads, writes))
}

/// [`host_callback`] over an access set built by the caller.
#[inline(always)]
pub(crate) fn host_callback_set(
    stream: &Stream,
    call: impl Fn() -> i32 + Send + Sync + 'static,
    set: &[sync::Access<'_>],
) -> Result<()> {
    let job = stream.callback_job(call);
    if let Some(cap) = stream.current_capture() {
        cap.ctl().callbacks = true;
    }
    engine::run_op(stream, set, || stream.push_host_fn(job))?;
    Ok(())
}

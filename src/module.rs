//! Kernel modules and their functions (cuda backend; host returns Unsupported).
//! Launches are tracked operations, in [`crate::ops`].

use crate::backend::FuncAttribute;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A loaded PTX, cubin or fatbin image.
pub struct Module {
    pub(crate) device: Arc<Device>,
    raw: u64,
}

/// A kernel of a module; keeps its module loaded.
///
/// What every launch reads comes first, on one cache line of its own (`repr(C)`,
/// line-aligned: in its `Arc` the counts then lie on the line before).
#[repr(C, align(64))]
pub struct Function {
    pub(crate) raw: u64,
    /// The module's device, read by every launch (saves a hop through the module).
    pub(crate) device: Arc<Device>,
    /// The kernel's number of parameters where the driver can tell (CUDA 12.4+).
    pub param_count: Option<usize>,
    /// Launched with programmatic stream serialization
    /// ([`Function::set_programmatic_launch`]).
    programmatic: AtomicBool,
    pub name: String,
    /// Its name in traces, interned at its first traced launch.
    pub(crate) span_name: crate::trace::KernelName,
    /// Keeps the module loaded while the function exists.
    _module: Arc<Module>,
}

// The launch's fields within the first line.
const _: () = assert!(std::mem::offset_of!(Function, programmatic) < 64);

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

    /// Finds a kernel by name. An empty name is `InvalidArgument` and a missing one
    /// `NotFound`, before the driver sees either.
    pub fn function(self: &Arc<Self>, name: &CStr) -> Result<Arc<Function>> {
        if name.is_empty() {
            return Err(Error::invalid_argument("kernel function name is empty"));
        }
        let raw = self.device.backend.module_function(self.raw, name)?;
        let param_count = self.device.backend.function_param_count(raw)?;
        Ok(Arc::new(Function {
            param_count,
            device: self.device.clone(),
            _module: self.clone(),
            raw,
            name: name.to_string_lossy().into_owned(),
            span_name: Default::default(),
            programmatic: AtomicBool::new(false),
        }))
    }
}

impl Function {
    /// Lets this kernel's launches start before the kernel ahead of them on their
    /// stream completes (programmatic dependent launch, compute capability 9.0 and
    /// newer): the kernel itself must wait for that kernel's results
    /// (`griddepcontrol.wait`, `cudaGridDependencySynchronize`) before it reads what
    /// that kernel wrote or writes what it reads. Devices below 9.0 give `Unsupported`.
    pub fn set_programmatic_launch(&self, enabled: bool) -> Result<()> {
        if enabled {
            self.require_sm90("programmatic dependent launch needs")?;
        }
        self.programmatic.store(enabled, Ordering::Relaxed);
        Ok(())
    }

    /// Lets this kernel's launches ask for up to `bytes` of dynamic shared memory per
    /// block; needed for more than 48 KiB. Applies to later launches from any thread.
    /// `bytes` plus the kernel's static shared memory over the device's opt-in limit
    /// per block is `InvalidArgument`, checked before the driver sees it.
    pub fn set_max_dynamic_shared_memory(&self, bytes: u32) -> Result<()> {
        let backend = &self.device.backend;
        let (static_bytes, limit) = backend.function_shared_limits(self.raw)?;
        if u64::from(bytes) + u64::from(static_bytes) > u64::from(limit) {
            return Err(Error::invalid_argument(format!(
                "kernel '{}' asks for {bytes} bytes of dynamic shared memory; with its {static_bytes} static bytes the device allows at most {limit} per block ({} dynamic)",
                self.name,
                limit.saturating_sub(static_bytes)
            )));
        }
        backend.function_set_attribute(self.raw, FuncAttribute::MaxDynamicShared(bytes))
    }

    /// Lets this kernel's launches use a thread block cluster larger than the 8 blocks
    /// every device of compute capability 9.0 supports (its `__cluster_dims__`), up
    /// to what the device allows (16 on an H100); such a size may fail on other
    /// devices. Devices below 9.0 give `Unsupported`. Applies to later launches from
    /// any thread.
    pub fn set_non_portable_cluster_size_allowed(&self, allowed: bool) -> Result<()> {
        if allowed {
            self.require_sm90("thread block clusters need")?;
        }
        self.device
            .backend
            .function_set_attribute(self.raw, FuncAttribute::NonPortableClusterSize(allowed))
    }

    /// `Unsupported` below compute capability 9.0: "`feature_needs` compute capability
    /// 9.0 or newer", with the device's.
    fn require_sm90(&self, feature_needs: &str) -> Result<()> {
        let (major, minor) = self.device.props()?.compute_capability;
        if major >= 9 {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::Unsupported,
            format!(
                "{feature_needs} compute capability 9.0 or newer; the device of kernel '{}' has {major}.{minor}",
                self.name
            ),
        ))
    }

    /// Whether launches use programmatic stream serialization.
    #[inline(always)]
    pub fn programmatic_launch(&self) -> bool {
        self.programmatic.load(Ordering::Relaxed)
    }

    /// Checks `given` launch arguments against the kernel's parameters, where the
    /// driver reports their number (`cuFuncGetParamInfo`, CUDA 12.4+).
    pub fn check_arg_count(&self, given: usize) -> Result<()> {
        match self.param_count {
            Some(n) if n != given => Err(Error::invalid_argument(format!(
                "kernel '{}' takes {n} parameter{}, {given} argument{} given",
                self.name,
                if n == 1 { "" } else { "s" },
                if given == 1 { " was" } else { "s were" },
            ))),
            _ => Ok(()),
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.device.backend.module_unload(self.raw);
    }
}

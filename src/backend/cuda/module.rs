//! Modules (JIT-linked images) and kernel launches on the driver API.

use super::device::{h, raw, CudaDevice};
use super::driver::*;
use super::image::prepare_image;
use super::nvrtc::nvrtc;
use crate::backend::{BuiltinHeader, CompilePlan, FuncAttribute, LaunchDims, ModuleApi};
use crate::error::{ErrorCode, Result};
use cudarc::driver::sys::{self, CUfunction, CUmodule};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::ptr::null_mut;

/// More parameters than a kernel can take (4 KiB of 1-byte parameters, 32 KiB on
/// Volta+ with CUDA 12.1+), so the count loop always ends.
const MAX_KERNEL_PARAMS: usize = 32 * 1024;

impl ModuleApi for CudaDevice {
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

    fn function_param_count(&self, func: u64) -> Result<Option<usize>> {
        let d = self.bind()?;
        // Probing: the driver answers CUDA_ERROR_INVALID_VALUE for the first index
        // past the end (an API error to compute-sanitizer, whose memcheck runs with
        // --report-api-errors no). cuFuncGetParamCount (12.9+) is not used: the
        // first GPU run with it hung in the interop tests (run 65, docs/gpu-runs.md).
        let Some(info) = d.cuFuncGetParamInfo else {
            return Ok(None);
        };
        for i in 0..=MAX_KERNEL_PARAMS {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: a live function; writes two size_t.
            let res = unsafe { info(h(func), i, &mut off, &mut size) };
            match res {
                CUDA_SUCCESS => {}
                CUDA_ERROR_INVALID_VALUE => return Ok(Some(i)),
                // Not supported for this function or driver: no count.
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    fn function_shared_limits(&self, func: u64) -> Result<(u32, u32)> {
        let d = self.bind()?;
        let mut static_bytes: c_int = 0;
        // SAFETY: a live function; writes one int.
        let res = unsafe {
            (d.cuFuncGetAttribute)(
                &mut static_bytes,
                CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                h(func),
            )
        };
        d.check(res, "cuFuncGetAttribute(SHARED_SIZE_BYTES)")?;
        let limit = self.attribute(
            d,
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
        )?;
        let bytes = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok((bytes(static_bytes), bytes(limit)))
    }

    fn function_set_attribute(&self, func: u64, attr: FuncAttribute) -> Result<()> {
        let d = self.bind()?;
        let (id, value, what) = match attr {
            // The caller checked bytes against the device's limit, so it fits an int.
            FuncAttribute::MaxDynamicShared(bytes) => (
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                c_int::try_from(bytes).unwrap_or(c_int::MAX),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            ),
            FuncAttribute::NonPortableClusterSize(allowed) => (
                CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                c_int::from(allowed),
                "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
            ),
        };
        // SAFETY: a live function; a valid attribute id.
        let res = unsafe { (d.cuFuncSetAttribute)(h(func), id, value) };
        d.check(res, what)
    }

    fn compile_plan(&self, options: &[String]) -> Result<CompilePlan> {
        self.nvrtc_plan(options)
    }

    fn compile(
        &self,
        source: &CStr,
        name: &CStr,
        headers: &[BuiltinHeader],
        plan: &CompilePlan,
    ) -> Result<Vec<u8>> {
        nvrtc()?.compile(source, name, headers, plan)
    }

    #[inline(always)]
    unsafe fn launch_kernel(
        &self,
        func: u64,
        dims: LaunchDims,
        programmatic: bool,
        args: *mut *mut c_void,
        stream: u64,
    ) -> Result<()> {
        let d = self.bind()?;
        if programmatic {
            // SAFETY: forwarded from the caller's contract.
            return unsafe { launch_programmatic(d, func, dims, args, stream) };
        }
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
}

/// `cuLaunchKernelEx` with programmatic stream serialization: the kernel may start
/// before the kernel ahead of it on the stream completes.
///
/// # Safety
/// As for [`ModuleApi::launch_kernel`].
#[cold]
unsafe fn launch_programmatic(
    d: &Driver,
    func: u64,
    dims: LaunchDims,
    args: *mut *mut c_void,
    stream: u64,
) -> Result<()> {
    // SAFETY: an all-zero attribute is valid plain data; its value is set below.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let [gx, gy, gz] = dims.grid;
    let [bx, by, bz] = dims.block;
    let config = sys::CUlaunchConfig {
        gridDimX: gx,
        gridDimY: gy,
        gridDimZ: gz,
        blockDimX: bx,
        blockDimY: by,
        blockDimZ: bz,
        sharedMemBytes: dims.shared_mem_bytes,
        hStream: h(stream),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the config and its one attribute outlive the call; the caller
    // guarantees args matches the kernel's parameters.
    let res = unsafe { (d.cuLaunchKernelEx)(&config, h(func), args, null_mut()) };
    d.check(res, "cuLaunchKernelEx")
}

//! The host backend runs no kernels: modules, functions and compiles are unsupported.

use super::HostDevice;
use crate::backend::{BuiltinHeader, CompilePlan, FuncAttribute, LaunchDims, ModuleApi};
use crate::error::{Error, ErrorCode, Result};
use std::ffi::{c_void, CStr};

fn compile_unsupported() -> Error {
    Error::new(
        ErrorCode::Unsupported,
        "compiling CUDA C (module_compile) is not supported on the host backend: \
         it runs no kernels; use the cuda backend",
    )
}

impl ModuleApi for HostDevice {
    fn module_load(&self, _image: &[u8]) -> Result<u64> {
        Err(Error::unsupported(
            "module_load (loading a CUDA module)",
            "host",
        ))
    }

    fn module_unload(&self, _module: u64) {}

    fn module_function(&self, _module: u64, _name: &CStr) -> Result<u64> {
        Err(Error::unsupported("module_function", "host"))
    }

    fn function_param_count(&self, _func: u64) -> Result<Option<usize>> {
        Ok(None)
    }

    fn function_shared_limits(&self, _func: u64) -> Result<(u32, u32)> {
        Err(Error::unsupported("function_shared_limits", "host"))
    }

    fn function_set_attribute(&self, _func: u64, _attr: FuncAttribute) -> Result<()> {
        Err(Error::unsupported("function_set_attribute", "host"))
    }

    fn compile_plan(&self, _options: &[String]) -> Result<CompilePlan> {
        Err(compile_unsupported())
    }

    fn compile(
        &self,
        _source: &CStr,
        _name: &CStr,
        _headers: &[BuiltinHeader],
        _plan: &CompilePlan,
    ) -> Result<Vec<u8>> {
        Err(compile_unsupported())
    }

    unsafe fn launch_kernel(
        &self,
        _func: u64,
        _dims: LaunchDims,
        _programmatic: bool,
        _args: *mut *mut c_void,
        _stream: u64,
    ) -> Result<()> {
        Err(Error::unsupported("launch (a CUDA kernel launch)", "host"))
    }
}

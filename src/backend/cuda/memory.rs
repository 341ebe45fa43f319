//! Memory on the driver API: stream-ordered device memory, pinned and registered
//! host memory, copies and memsets.

use super::device::{h, CudaDevice};
use super::driver::*;
use crate::backend::MemoryApi;
use crate::error::Result;
use cudarc::driver::sys::CUdeviceptr;
use std::ffi::{c_uint, c_void};
use std::ptr::null_mut;

impl MemoryApi for CudaDevice {
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
}

//! Memory on the driver API: stream-ordered device memory, pinned and registered
//! host memory, copies and memsets.

use super::device::{h, CudaDevice};
use super::driver::*;
use crate::backend::MemoryApi;
use crate::error::{Error, Result};
use cudarc::driver::sys::CUdeviceptr;
use std::ffi::{c_int, c_uint, c_void};
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

    fn host_ptr_is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        if ptr.is_null() || len == 0 {
            return false;
        }
        let Some(last) = (ptr as u64).checked_add(len as u64 - 1) else {
            return false;
        };
        let Ok(d) = self.bind() else {
            return false;
        };
        // The plural query reports type 0 (and no range) for memory the driver does
        // not know, instead of failing.
        let mem_type = |p: u64, range: Option<(&mut CUdeviceptr, &mut usize)>| -> c_uint {
            let mut t: c_uint = 0;
            let mut attrs = [
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            ];
            let mut data: [*mut c_void; 3] =
                [(&mut t as *mut c_uint).cast(), null_mut(), null_mut()];
            let n = match range {
                Some((start, size)) => {
                    data[1] = (start as *mut CUdeviceptr).cast();
                    data[2] = (size as *mut usize).cast();
                    3
                }
                None => 1,
            };
            // SAFETY: n attributes, each with an output slot of its type; a
            // read-only query.
            let res =
                unsafe { (d.cuPointerGetAttributes)(n, attrs.as_mut_ptr(), data.as_mut_ptr(), p) };
            if res == CUDA_SUCCESS {
                t
            } else {
                0
            }
        };
        let (mut start, mut size): (CUdeviceptr, usize) = (0, 0);
        if mem_type(ptr as u64, Some((&mut start, &mut size))) != CU_MEMORYTYPE_HOST {
            return false;
        }
        let end = start.saturating_add(size as u64);
        if size != 0 && start <= ptr as u64 && (ptr as u64) < end {
            // The allocation (or registration) the first byte lies in holds them all.
            return last < end;
        }
        // No range reported (or one in other terms): the last byte must be
        // page-locked too (one object the caller hands over does not span a
        // pageable hole).
        mem_type(last, None) == CU_MEMORYTYPE_HOST
    }

    fn check_foreign_range(&self, ptr: u64, len: usize) -> Result<()> {
        let d = self.bind()?;
        let mut ordinal: c_int = -1;
        // SAFETY: writes one int; a read-only query that fails for unknown pointers.
        let res = unsafe {
            (d.cuPointerGetAttribute)(
                (&mut ordinal as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        };
        if res != CUDA_SUCCESS {
            let mut e = d.err(
                res,
                format_args!(
                    "0x{ptr:x} is not memory the CUDA driver knows (cuPointerGetAttribute)"
                ),
            );
            e.code = crate::error::ErrorCode::InvalidArgument;
            return Err(e);
        }
        if ordinal != self.ordinal as c_int {
            return Err(Error::new(
                crate::error::ErrorCode::WrongDevice,
                format!(
                    "0x{ptr:x} belongs to CUDA device {ordinal}, not to device {}",
                    self.ordinal
                ),
            ));
        }
        let mut start: CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: each writes one value of the attribute's type.
        let r1 = unsafe {
            (d.cuPointerGetAttribute)(
                (&mut start as *mut CUdeviceptr).cast(),
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                ptr,
            )
        };
        // SAFETY: as above.
        let r2 = unsafe {
            (d.cuPointerGetAttribute)(
                (&mut size as *mut usize).cast(),
                CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                ptr,
            )
        };
        if r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS {
            let end = start.saturating_add(size as u64);
            if ptr.checked_add(len as u64).is_none_or(|e| e > end) {
                return Err(Error::out_of_range(format!(
                    "[0x{ptr:x}, +{len}) runs past the end of its allocation [0x{start:x}, +{size})"
                )));
            }
        }
        Ok(())
    }
}

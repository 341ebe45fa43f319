//! The host backend's memory: "device" memory is host memory, copies run on workers.

use super::{lock, HostDevice, Job, StepKind};
use crate::backend::faults::{self, hit, Kind};
use crate::backend::MemoryApi;
use crate::error::{Error, ErrorCode, Result};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

impl MemoryApi for HostDevice {
    fn mem_alloc_async(&self, size: usize, _stream: u64) -> Result<u64> {
        hit("mem_alloc_async")?;
        let p = aligned_alloc(size, 256)? as u64;
        faults::made(Kind::DeviceBytes, p, size);
        Ok(p)
    }

    fn mem_free_async(&self, ptr: u64, stream: u64) -> Result<()> {
        hit("mem_free_async")?;
        // SAFETY: ptr came from posix_memalign and the core frees it once.
        self.enqueue(stream, StepKind::MemFree, free_once(ptr));
        Ok(())
    }

    fn pinned_alloc(&self, size: usize) -> Result<*mut u8> {
        hit("pinned_alloc")?;
        let p = aligned_alloc(size, 4096)?;
        faults::made(Kind::PinnedBytes, p as u64, size);
        lock(pinned_ranges()).insert(p as u64, size);
        Ok(p)
    }

    fn pinned_free(&self, ptr: *mut u8) {
        faults::gone(ptr as u64);
        lock(pinned_ranges()).remove(&(ptr as u64));
        // SAFETY: ptr came from posix_memalign in pinned_alloc and is freed once.
        unsafe { libc::free(ptr as *mut c_void) }
    }

    fn host_register(&self, ptr: *mut u8, len: usize) -> Result<()> {
        hit("host_register")?;
        let (p, end) = (ptr as u64, (ptr as u64).saturating_add(len as u64));
        let mut ranges = lock(pinned_ranges());
        let before = ranges.range(..=p).next_back().map(|(&s, &n)| s + n as u64);
        let after = ranges.range(p..).next().map(|(&s, _)| s);
        if before.is_some_and(|e| e > p) || after.is_some_and(|s| s < end) {
            // As cuMemHostRegister: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
            return Err(Error::driver(
                712,
                "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
                "registering host memory that is already page-locked",
            ));
        }
        ranges.insert(p, len);
        Ok(())
    }

    fn host_unregister(&self, ptr: *mut u8) {
        lock(pinned_ranges()).remove(&(ptr as u64));
    }

    fn host_ptr_is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        let (p, Some(end)) = (ptr as u64, (ptr as u64).checked_add(len as u64)) else {
            return false;
        };
        if ptr.is_null() || len == 0 {
            return false;
        }
        lock(pinned_ranges())
            .range(..=p)
            .next_back()
            .is_some_and(|(&start, &size)| end <= start + size as u64)
    }

    fn check_foreign_range(&self, _ptr: u64, _len: usize) -> Result<()> {
        // Host "device" memory is host memory: any address the caller vouches for.
        Ok(())
    }

    fn memcpy_async(&self, dst: u64, src: u64, len: usize, stream: u64) -> Result<()> {
        hit("memcpy_async")?;
        self.enqueue(
            stream,
            StepKind::Memcpy,
            Arc::new(move || {
                // SAFETY: the core range-checked both ranges and keeps them alive
                // until this job has run; ranges of distinct buffers do not overlap.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
            }),
        );
        Ok(())
    }

    fn memcpy_from_pageable(&self, dst: u64, src: &[u8], stream: u64) -> Result<()> {
        hit("memcpy_from_pageable")?;
        let staged: Arc<[u8]> = Arc::from(src);
        self.enqueue(
            stream,
            StepKind::Memcpy,
            Arc::new(move || {
                // SAFETY: dst was range-checked by the core and is alive until this runs.
                unsafe {
                    std::ptr::copy_nonoverlapping(staged.as_ptr(), dst as *mut u8, staged.len())
                }
            }),
        );
        Ok(())
    }

    fn memset_async(&self, dst: u64, value: u8, len: usize, stream: u64) -> Result<()> {
        hit("memset_async")?;
        self.enqueue(
            stream,
            StepKind::Memset,
            Arc::new(move || {
                // SAFETY: dst was range-checked by the core and is alive until this runs.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) }
            }),
        );
        Ok(())
    }
}

/// Host memory this backend treats as page-locked: its pinned blocks and registered
/// ranges, by start address (any host device's; host memory is one).
fn pinned_ranges() -> &'static Mutex<BTreeMap<u64, usize>> {
    static RANGES: OnceLock<Mutex<BTreeMap<u64, usize>>> = OnceLock::new();
    RANGES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn aligned_alloc(size: usize, align: usize) -> Result<*mut u8> {
    if size > isize::MAX as usize {
        return Err(Error::new(
            ErrorCode::OutOfMemory,
            format!("host allocation of {size} bytes is larger than any address space"),
        ));
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes p only on success; align is a power of two.
    let rc = unsafe { libc::posix_memalign(&mut p, align, size.max(1)) };
    if rc != 0 || p.is_null() {
        return Err(Error::new(
            ErrorCode::OutOfMemory,
            format!("host allocation of {size} bytes failed"),
        ));
    }
    Ok(p as *mut u8)
}

fn free_once(ptr: u64) -> Job {
    let cell = Mutex::new(Some(ptr));
    Arc::new(move || {
        if let Some(p) = lock(&cell).take() {
            faults::gone(p);
            // SAFETY: p came from posix_memalign; the Option makes this run once.
            unsafe { libc::free(p as *mut c_void) }
        }
    })
}

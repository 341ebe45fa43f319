//! Buffers (device, pinned, registered host memory), the pinned caching pool, and
//! range-checked copies. Every copy and memset is a tracked op on its buffers'
//! sync objects.

use crate::device::Device;
use crate::engine;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::stream::Stream;
use crate::sync::{self, Access, ObjRef, SyncObject};
use std::sync::{Arc, Mutex};

/// Where a buffer's memory lives. Values are part of the C ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BufferKind {
    Device = 1,
    Pinned = 2,
    Registered = 3,
}

/// A range of memory the device can reach, with its own sync object. Its fields are
/// those of the [`Memory`] it shares with the captured graphs that use it.
pub struct Buffer {
    mem: Arc<Memory>,
}

/// Owns a buffer's memory; dropping the last reference (the buffer, or a graph
/// that uses it) frees it in stream order.
pub struct Memory {
    pub(crate) device: Arc<Device>,
    pub kind: BufferKind,
    pub addr: u64,
    pub size: usize,
    pub sync: Arc<SyncObject>,
    /// Device buffers: the stream their free is ordered on.
    home: Option<Arc<Stream>>,
    /// Pinned buffers: the size of the underlying pool block.
    block_size: usize,
}

impl std::ops::Deref for Buffer {
    type Target = Memory;
    fn deref(&self) -> &Memory {
        &self.mem
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} buffer #{} ({} bytes)",
            self.kind, self.sync.id, self.size
        )
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.mem.fmt(f)
    }
}

fn check_size(size: usize, what: &str) -> Result<()> {
    if size == 0 {
        return Err(Error::invalid_argument(format!("{what}: size must be > 0")));
    }
    Ok(())
}

impl Buffer {
    /// Allocates device memory in stream order on `stream` (the driver's pool).
    pub fn alloc(stream: &Arc<Stream>, size: usize) -> Result<Arc<Buffer>> {
        check_size(size, "device allocation")?;
        stream.reject_in_capture("buffer allocation")?;
        let dev = stream.device.clone();
        let addr = match stream.take_block(size) {
            Some(a) => a,
            None => stream.push(|| dev.backend.mem_alloc_async(size, stream.raw))?,
        };
        Ok(Buffer::from_memory(Memory {
            device: dev,
            kind: BufferKind::Device,
            addr,
            size,
            sync: SyncObject::allocated_on(stream),
            home: Some(stream.clone()),
            block_size: 0,
        }))
    }

    /// Takes pinned host memory from the device's caching pool.
    pub fn alloc_pinned(device: &Arc<Device>, size: usize) -> Result<Arc<Buffer>> {
        check_size(size, "pinned allocation")?;
        let (addr, block_size) = device.pinned.take(device, size)?;
        Ok(Buffer::from_memory(Memory {
            device: device.clone(),
            kind: BufferKind::Pinned,
            addr,
            size,
            sync: SyncObject::new(),
            home: None,
            block_size,
        }))
    }

    /// Registers caller-owned host memory. The caller keeps it alive until the
    /// buffer is destroyed; destroying it waits for copies that use it.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, writable host memory for the buffer's lifetime.
    pub unsafe fn register(device: &Arc<Device>, ptr: *mut u8, len: usize) -> Result<Arc<Buffer>> {
        check_size(len, "host registration")?;
        if ptr.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "host pointer is NULL"));
        }
        (ptr as u64)
            .checked_add(len as u64)
            .ok_or_else(|| Error::out_of_range("host range wraps around the address space"))?;
        device.backend.host_register(ptr, len)?;
        Ok(Buffer::from_memory(Memory {
            device: device.clone(),
            kind: BufferKind::Registered,
            addr: ptr as u64,
            size: len,
            sync: SyncObject::new(),
            home: None,
            block_size: 0,
        }))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Host address of pinned or registered memory.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        match self.kind {
            BufferKind::Device => None,
            _ => Some(self.addr as *mut u8),
        }
    }

    /// Checks `off..off+len` lies inside the buffer and returns the address.
    pub fn range(&self, off: usize, len: usize, what: &str) -> Result<u64> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok(self.addr + off as u64),
            _ => Err(Error::out_of_range(format!(
                "{what}: range [{off}, {off}+{len}) is outside {self:?}"
            ))),
        }
    }
}

impl Buffer {
    fn from_memory(mem: Memory) -> Arc<Buffer> {
        let mem = Arc::new(mem);
        let owner: Arc<dyn std::any::Any + Send + Sync> = mem.clone();
        let _ = mem.sync.owner.set(Arc::downgrade(&owner));
        Arc::new(Buffer { mem })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let backend = &self.device.backend;
        match self.kind {
            BufferKind::Device => {
                if let Some(home) = &self.home {
                    if let Some(cap) = home.current_capture() {
                        // A free must not become part of a graph: do it after the capture.
                        cap.ctl().deferred_frees.push((
                            home.clone(),
                            self.addr,
                            self.sync.outstanding(),
                        ));
                        return;
                    }
                    // Order the free after every outstanding use, on the device.
                    let set = [Access::new(ObjRef::new(&self.sync), true)];
                    let _ = engine::op_begin(home, &set);
                    if !home.cache_block(self.size, self.addr) {
                        let _ = home.push(|| backend.mem_free_async(self.addr, home.raw));
                    }
                }
            }
            BufferKind::Pinned => {
                self.device.pinned.give_back(
                    &self.device,
                    self.addr,
                    self.block_size,
                    self.sync.outstanding(),
                );
            }
            BufferKind::Registered => {
                for r in self.sync.outstanding() {
                    let _ = r.wait_complete();
                }
                backend.host_unregister(self.addr as *mut u8);
            }
        }
    }
}

/// Statistics of a device's pinned pool. Field order is part of the C ABI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedStats {
    pub bytes_in_use: u64,
    pub bytes_cached: u64,
    pub cache_limit: u64,
    pub hits: u64,
    pub misses: u64,
}

struct Block {
    addr: u64,
    size: usize,
    pending: Vec<RecRef>,
}

/// A bounded cache of pinned blocks. Sizes are rounded to the page size, not to
/// powers of two; a cached block is reused for requests up to 25% smaller.
pub struct PinnedPool {
    inner: Mutex<PoolState>,
}

struct PoolState {
    cached: Vec<Block>,
    stats: PinnedStats,
}

pub const PINNED_GRANULARITY: usize = 4096;
pub const DEFAULT_PINNED_CACHE_LIMIT: u64 = 256 << 20;

impl Default for PinnedPool {
    fn default() -> Self {
        PinnedPool::new()
    }
}

impl PinnedPool {
    pub fn new() -> PinnedPool {
        PinnedPool {
            inner: Mutex::new(PoolState {
                cached: Vec::new(),
                stats: PinnedStats {
                    cache_limit: DEFAULT_PINNED_CACHE_LIMIT,
                    ..Default::default()
                },
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, device: &Device, size: usize) -> Result<(u64, usize)> {
        let rounded = size
            .checked_next_multiple_of(PINNED_GRANULARITY)
            .ok_or_else(|| Error::out_of_range(format!("pinned size {size} overflows")))?;
        let found = {
            let mut st = self.state();
            let best = st
                .cached
                .iter()
                .enumerate()
                .filter(|(_, b)| b.size >= rounded && b.size - rounded <= b.size / 4)
                .min_by_key(|(_, b)| b.size)
                .map(|(i, _)| i);
            match best {
                Some(i) => {
                    let b = st.cached.swap_remove(i);
                    st.stats.bytes_cached -= b.size as u64;
                    st.stats.bytes_in_use += b.size as u64;
                    st.stats.hits += 1;
                    Some(b)
                }
                None => {
                    st.stats.misses += 1;
                    None
                }
            }
        };
        if let Some(b) = found {
            // The host will write this memory: earlier copies must have finished.
            if let Err(e) = b.pending.iter().try_for_each(|r| r.wait_complete()) {
                let mut st = self.state();
                st.stats.bytes_in_use -= b.size as u64;
                st.stats.bytes_cached += b.size as u64;
                st.cached.push(b);
                return Err(e);
            }
            return Ok((b.addr, b.size));
        }
        let p = device.backend.pinned_alloc(rounded)?;
        self.state().stats.bytes_in_use += rounded as u64;
        Ok((p as u64, rounded))
    }

    fn give_back(&self, device: &Device, addr: u64, size: usize, pending: Vec<RecRef>) {
        let mut st = self.state();
        st.stats.bytes_in_use -= size as u64;
        if st.stats.bytes_cached + size as u64 <= st.stats.cache_limit {
            st.stats.bytes_cached += size as u64;
            st.cached.push(Block {
                addr,
                size,
                pending,
            });
            return;
        }
        drop(st);
        for r in &pending {
            let _ = r.wait_complete();
        }
        device.backend.pinned_free(addr as *mut u8);
    }

    pub fn stats(&self) -> PinnedStats {
        self.state().stats
    }

    /// Sets the cache bound and trims down to it.
    pub fn set_limit(&self, device: &Device, limit: u64) {
        self.state().stats.cache_limit = limit;
        self.trim_to(device, limit);
    }

    /// Frees cached blocks until at most `target` bytes stay cached.
    pub fn trim_to(&self, device: &Device, target: u64) {
        let victims: Vec<Block> = {
            let mut st = self.state();
            let mut v = Vec::new();
            st.cached.sort_by_key(|b| b.size);
            while st.stats.bytes_cached > target {
                match st.cached.pop() {
                    Some(b) => {
                        st.stats.bytes_cached -= b.size as u64;
                        v.push(b);
                    }
                    None => break,
                }
            }
            v
        };
        for b in victims {
            for r in &b.pending {
                let _ = r.wait_complete();
            }
            device.backend.pinned_free(b.addr as *mut u8);
        }
    }
}

fn check_pair(stream: &Stream, bufs: &[&Buffer]) -> Result<()> {
    for b in bufs {
        stream
            .device
            .same_device_with(&b.device, || format!("{b:?}"))?;
    }
    Ok(())
}

/// Copies `len` bytes between two buffers on `stream`. Out-of-range is an error
/// and changes nothing; a zero length is a no-op.
pub fn copy(
    stream: &Stream,
    dst: &Buffer,
    dst_off: usize,
    src: &Buffer,
    src_off: usize,
    len: usize,
) -> Result<()> {
    check_pair(stream, &[dst, src])?;
    let d = dst.range(dst_off, len, "copy destination")?;
    let s = src.range(src_off, len, "copy source")?;
    if len == 0 {
        return Ok(());
    }
    if std::ptr::eq(dst, src) && d < s + len as u64 && s < d + len as u64 {
        return Err(Error::invalid_argument(
            "copy: source and destination ranges overlap",
        ));
    }
    let backend = &stream.device.backend;
    let (r, w) = (
        std::slice::from_ref(&src.sync),
        std::slice::from_ref(&dst.sync),
    );
    engine::run_op(stream, &sync::access_set(r, w), || {
        backend.memcpy_async(d, s, len, stream.raw)
    })?;
    Ok(())
}

/// Copies from pageable host memory into `dst`. Returns once `src` may be reused.
pub fn copy_from_host(stream: &Stream, dst: &Buffer, dst_off: usize, src: &[u8]) -> Result<()> {
    check_pair(stream, &[dst])?;
    let d = dst.range(dst_off, src.len(), "copy destination")?;
    stream.reject_in_capture("copy from pageable host memory")?;
    if src.is_empty() {
        return Ok(());
    }
    let backend = &stream.device.backend;
    engine::run_op(
        stream,
        &sync::access_set(&[], std::slice::from_ref(&dst.sync)),
        || backend.memcpy_from_pageable(d, src, stream.raw),
    )?;
    Ok(())
}

/// Copies from `src` into pageable host memory; blocks until the bytes arrived.
pub fn copy_to_host(stream: &Stream, dst: &mut [u8], src: &Buffer, src_off: usize) -> Result<()> {
    check_pair(stream, &[src])?;
    let s = src.range(src_off, dst.len(), "copy source")?;
    stream.reject_in_capture("copy to pageable host memory")?;
    if dst.is_empty() {
        return Ok(());
    }
    let backend = &stream.device.backend;
    let d = dst.as_mut_ptr() as u64;
    let len = dst.len();
    let rec = engine::run_op_recorded(
        stream,
        &sync::access_set(std::slice::from_ref(&src.sync), &[]),
        || backend.memcpy_async(d, s, len, stream.raw),
    )?;
    match rec {
        Some(r) => r.synchronize(),
        None => stream.synchronize(),
    }
}

/// Sets `len` bytes of `dst` to `value`, in stream order.
pub fn memset(stream: &Stream, dst: &Buffer, off: usize, value: u8, len: usize) -> Result<()> {
    check_pair(stream, &[dst])?;
    let d = dst.range(off, len, "memset")?;
    if len == 0 {
        return Ok(());
    }
    let backend = &stream.device.backend;
    engine::run_op(
        stream,
        &sync::access_set(&[], std::slice::from_ref(&dst.sync)),
        || backend.memset_async(d, value, len, stream.raw),
    )?;
    Ok(())
}

//! Buffers: device memory in stream order, pinned and registered host memory, each
//! with its own sync object. Frees are ordered after every outstanding use. The
//! pinned caching pool and the per-stream cache of freed device blocks are beside
//! it; copies and memsets are tracked operations in [`crate::ops`]. Foreign device
//! memory (wrapped, or imported through DLPack) is released by its owner's function
//! after its last use (`foreign.rs`).

pub(crate) mod block_cache;
mod foreign;
mod pinned;

pub use foreign::Release;

pub use pinned::{PinnedPool, PinnedStats, DEFAULT_PINNED_CACHE_LIMIT, PINNED_GRANULARITY};

use crate::c_enum::c_enum;
use crate::device::Device;
use crate::engine;
use crate::error::{Error, ErrorCode, Result};
use crate::stream::Stream;
use crate::sync::{Access, ObjRef, SyncObject};
use crate::trace::{self, OpKind};
use std::sync::Arc;

c_enum! {
    /// Where a buffer's memory lives, seen by C as `SLUICE_BUFFER_*`.
    pub enum BufferKind: "SLUICE_BUFFER_" {
        /// Buffer kind: device memory from the driver's stream-ordered pool.
        Device = 1 => DEVICE,
        /// Buffer kind: pinned host memory from the device's caching pool.
        Pinned = 2 => PINNED,
        /// Buffer kind: caller-owned host memory registered with the device.
        Registered = 3 => REGISTERED,
        /// Buffer kind: device memory owned by someone else (`sluice_buffer_wrap_device`,
        /// or a DLPack import), released by its owner's function after its last use.
        Foreign = 4 => FOREIGN,
    }
}

/// A range of memory the device can reach, with its own sync object. It owns the
/// memory: dropping the last reference (its handle, or a captured graph that uses
/// it) frees it in stream order.
///
/// What every copy, memset and launch reads comes first, on one cache line of its
/// own (`repr(C)`, line-aligned: Rust's order put it after the cold fields, over
/// two).
#[repr(C, align(64))]
pub struct Buffer {
    pub(crate) device: Arc<Device>,
    pub sync: Arc<SyncObject>,
    pub addr: u64,
    pub size: usize,
    pub kind: BufferKind,
    /// Device buffers: the stream their free is ordered on.
    home: Option<Arc<Stream>>,
    /// Pinned buffers: the size of the underlying pool block.
    block_size: usize,
    /// Foreign buffers: the owner's release function.
    release: Option<Release>,
    /// The element type and shape, where the memory came with one (a DLPack import).
    tensor: Option<crate::dlpack::TensorDesc>,
}

// The op path's fields within the first line.
const _: () = assert!(std::mem::offset_of!(Buffer, kind) < 64);

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} buffer #{} ({} bytes)",
            self.kind, self.sync.id, self.size
        )
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
        let cached = stream.take_block(size);
        let addr = match cached {
            Some(a) => a,
            None => stream.push(|| dev.backend.mem_alloc_async(size, stream.raw))?,
        };
        trace::memory(
            "alloc",
            BufferKind::Device,
            size,
            Some(stream.id),
            Some(cached.is_some()),
        );
        Ok(Buffer::shared(Buffer {
            device: dev,
            kind: BufferKind::Device,
            addr,
            size,
            sync: SyncObject::allocated_on(stream),
            home: Some(stream.clone()),
            block_size: 0,
            release: None,
            tensor: None,
        }))
    }

    /// Takes pinned host memory from the device's caching pool.
    pub fn alloc_pinned(device: &Arc<Device>, size: usize) -> Result<Arc<Buffer>> {
        check_size(size, "pinned allocation")?;
        let (addr, block_size, cached) = device.pinned.take(device, size)?;
        trace::memory("alloc", BufferKind::Pinned, size, None, Some(cached));
        Ok(Buffer::shared(Buffer {
            device: device.clone(),
            kind: BufferKind::Pinned,
            addr,
            size,
            sync: SyncObject::new(),
            home: None,
            block_size,
            release: None,
            tensor: None,
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
        Ok(Buffer::shared(Buffer {
            device: device.clone(),
            kind: BufferKind::Registered,
            addr: ptr as u64,
            size: len,
            sync: SyncObject::new(),
            home: None,
            block_size: 0,
            release: None,
            tensor: None,
        }))
    }

    /// Wraps device memory that someone else allocated and owns, as a buffer with its
    /// own sync object. `release` runs once, after the buffer (and every graph that
    /// captured it) is gone and every use ordered through its sync object completed on
    /// the device; it never blocks the dropping thread and may run on a library
    /// thread. On cuda the range must be memory of `device`.
    ///
    /// `ready_on`: the stream the memory's producer ordered its contents on, if any
    /// (a DLPack import); the first use on another stream then waits for that
    /// stream's work, like a fresh allocation.
    ///
    /// On failure `release` is not called: the caller keeps the memory.
    pub fn wrap_device(
        device: &Arc<Device>,
        ptr: u64,
        len: usize,
        release: Option<Release>,
        ready_on: Option<&Arc<Stream>>,
        tensor: Option<crate::dlpack::TensorDesc>,
    ) -> Result<Arc<Buffer>> {
        check_size(len, "foreign device memory")?;
        if ptr == 0 {
            return Err(Error::new(
                ErrorCode::NullArgument,
                "device pointer is NULL",
            ));
        }
        ptr.checked_add(len as u64)
            .ok_or_else(|| Error::out_of_range("device range wraps around the address space"))?;
        if let Some(s) = ready_on {
            device.same_device(&s.device, "stream")?;
            if s.is_capturing() {
                return Err(Error::new(
                    ErrorCode::CaptureUnsupported,
                    format!(
                        "ready_on {s:?} is capturing a graph: its work now runs only when \
                         the graph does, so no order of it makes this memory ready"
                    ),
                ));
            }
        }
        device.backend.check_foreign_range(ptr, len)?;
        trace::memory("wrap", BufferKind::Foreign, len, None, None);
        Ok(Buffer::shared(Buffer {
            device: device.clone(),
            kind: BufferKind::Foreign,
            addr: ptr,
            size: len,
            sync: match ready_on {
                Some(s) => SyncObject::allocated_on(s),
                None => SyncObject::new(),
            },
            home: None,
            block_size: 0,
            release,
            tensor,
        }))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The element type and shape the memory came with (a DLPack import).
    pub fn tensor(&self) -> Option<&crate::dlpack::TensorDesc> {
        self.tensor.as_ref()
    }

    /// Host address of pinned or registered memory.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        match self.kind {
            BufferKind::Device | BufferKind::Foreign => None,
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
    /// The new buffer in its `Arc`, named as its sync object's owner (so that
    /// captured graphs keep it alive).
    fn shared(buf: Buffer) -> Arc<Buffer> {
        let buf = Arc::new(buf);
        let owner: Arc<dyn std::any::Any + Send + Sync> = buf.clone();
        let _ = buf.sync.owner.set(Arc::downgrade(&owner));
        buf
    }
}

impl Buffer {
    /// A buffer freed while foreign ops are counted open on its sync object (begun,
    /// not ended) is not freed yet: their work is on their streams already, but
    /// sluice learns of it only when they end and publish. Its memory moves into a
    /// buffer that the sync object keeps (`SyncCore::keep_while_open`); the end
    /// that closes the last of those ops drops that buffer, which frees the memory
    /// as below, ordered after every use published by then, theirs included. True
    /// when kept (this value then owns nothing).
    fn keep_while_ops_open(&mut self) -> bool {
        self.sync.keep_while_open(|| {
            Box::new(Buffer {
                device: self.device.clone(),
                sync: self.sync.clone(),
                addr: self.addr,
                size: self.size,
                kind: self.kind,
                home: self.home.take(),
                block_size: self.block_size,
                release: self.release.take(),
                tensor: self.tensor.take(),
            })
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.keep_while_ops_open() {
            return;
        }
        let backend = &self.device.backend;
        trace::memory(
            "free",
            self.kind,
            self.size,
            self.home.as_ref().map(|h| h.id),
            None,
        );
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
                    let (kind, mut seen) = (OpKind::ForeignBegin(&"free"), engine::Seen::new());
                    let begun = engine::op_begin(home, &set, kind, false, &mut seen);
                    // `seen` stays empty when a capture began meanwhile and took
                    // the waits into its graph, which orders nothing real.
                    if begun.is_err() || seen.len() != set.len() {
                        // Not ordered on the device: wait for the uses on the host.
                        for r in self.sync.outstanding() {
                            let _ = r.wait_complete();
                        }
                    }
                    if !home.cache_block(self.size, self.addr) {
                        home.free_block(self.addr, &[]);
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
            BufferKind::Foreign => {
                if let Some(r) = &self.release {
                    // Never used: its owner's work on `ready_on` comes first too.
                    let mut recs = self.sync.outstanding();
                    recs.extend(self.sync.alloc_point());
                    foreign::release_after(recs, r);
                }
            }
        }
    }
}

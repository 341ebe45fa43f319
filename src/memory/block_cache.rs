//! A stream's cache of freed device blocks: a block freed in a stream's order can
//! be handed to the next allocation of the same size on that stream at once, with
//! no trip through the driver's pool. Bounded in blocks and bytes.

use crate::error::Result;
use crate::event::RecRef;
use crate::stream::Stream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Most blocks a stream keeps.
const MAX_BLOCKS: usize = 16;
/// Default byte bound (`sluice_stream_set_block_cache_limit` changes it).
const MAX_BYTES: usize = 64 << 20;

/// Freed blocks (size, address), reusable in their stream's order.
pub(crate) struct BlockCache {
    cached: Mutex<Cached>,
    limit_bytes: AtomicUsize,
}

#[derive(Default)]
struct Cached {
    blocks: Vec<(usize, u64)>,
    /// Counters, under the lock the cache takes anyway.
    hits: u64,
    misses: u64,
    trims: u64,
}

impl Default for BlockCache {
    fn default() -> Self {
        BlockCache {
            cached: Mutex::new(Cached::default()),
            limit_bytes: AtomicUsize::new(MAX_BYTES),
        }
    }
}

impl Stream {
    fn cached(&self) -> MutexGuard<'_, Cached> {
        self.block_cache
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a cached block of exactly `size` bytes, freed earlier in this stream's
    /// order; None means the caller allocates from the driver (a miss).
    pub(crate) fn take_block(&self, size: usize) -> Option<u64> {
        let mut c = self.cached();
        match c.blocks.iter().position(|b| b.0 == size) {
            Some(i) => {
                c.hits += 1;
                Some(c.blocks.swap_remove(i).1)
            }
            None => {
                c.misses += 1;
                None
            }
        }
    }

    /// Keeps a block whose free is ordered on this stream; false when the cache is full.
    pub(crate) fn cache_block(&self, size: usize, addr: u64) -> bool {
        let mut c = self.cached();
        let bytes: usize = c.blocks.iter().map(|b| b.0).sum();
        let limit = self.block_cache.limit_bytes.load(Ordering::Relaxed);
        if c.blocks.len() >= MAX_BLOCKS || bytes + size > limit {
            drop(c);
            crate::log::debug(|| {
                format!("{self:?}: block cache full ({bytes} of {limit} bytes); {size} bytes go back to the driver")
            });
            return false;
        }
        c.blocks.push((size, addr));
        true
    }

    /// (hits, misses, trims) of the block cache.
    pub(crate) fn block_cache_counts(&self) -> (u64, u64, u64) {
        let c = self.cached();
        (c.hits, c.misses, c.trims)
    }

    /// Sets the byte bound of the block cache (0 disables it) and trims it.
    pub fn set_block_cache_limit(&self, bytes: usize) -> Result<()> {
        self.block_cache.limit_bytes.store(bytes, Ordering::Relaxed);
        self.trim_block_cache()
    }

    /// Returns every cached block to the driver's pool, in stream order. While the
    /// stream captures a graph the blocks stay cached (a free would become part of
    /// the graph, and be lost with a discarded one); a later trim returns them.
    pub fn trim_block_cache(&self) -> Result<()> {
        if self.is_capturing() {
            return Ok(());
        }
        let blocks = {
            let mut c = self.cached();
            c.trims += c.blocks.len() as u64;
            std::mem::take(&mut c.blocks)
        };
        if !blocks.is_empty() {
            let bytes: usize = blocks.iter().map(|b| b.0).sum();
            crate::log::info(|| {
                format!(
                    "{self:?}: block cache trimmed, {} blocks ({bytes} bytes) go back to the driver",
                    blocks.len()
                )
            });
        }
        for (_, addr) in blocks {
            self.free_block(addr, &[]);
        }
        Ok(())
    }

    /// Frees device memory in this stream's order, after `after`. When the driver
    /// refuses, waits on the host and tries once more; a second refusal leaks the
    /// block and becomes the stream's deferred error (no caller is there to tell).
    pub(crate) fn free_block(&self, addr: u64, after: &[RecRef]) {
        let b = &self.device.backend;
        let ordered = self.push(|| {
            for r in after {
                self.wait_pushed(r)?;
            }
            b.mem_free_async(addr, self.raw)
        });
        if ordered.is_ok() {
            return;
        }
        self.free_block_slow(addr, after);
    }

    #[cold]
    fn free_block_slow(&self, addr: u64, after: &[RecRef]) {
        let b = &self.device.backend;
        for r in after {
            let _ = r.wait_complete();
        }
        let _ = b.stream_synchronize(self.raw);
        if let Err(e) = self.push(|| b.mem_free_async(addr, self.raw)) {
            let e = e.context(format!("freeing device memory at 0x{addr:x} (leaked)"));
            crate::log::warn(|| format!("{self:?}: {}", e.message));
            self.pool.deferred.report(e);
        }
    }
}

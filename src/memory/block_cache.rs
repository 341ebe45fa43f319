//! A stream's cache of freed device blocks: a block freed in a stream's order can
//! be handed to the next allocation of the same size on that stream at once, with
//! no trip through the driver's pool. Bounded in blocks and bytes.

use crate::error::Result;
use crate::stream::Stream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most blocks a stream keeps.
const MAX_BLOCKS: usize = 16;
/// Default byte bound (`sluice_stream_set_block_cache_limit` changes it).
const MAX_BYTES: usize = 64 << 20;

/// Freed blocks (size, address), reusable in their stream's order.
pub(crate) struct BlockCache {
    blocks: Mutex<Vec<(usize, u64)>>,
    limit_bytes: AtomicUsize,
}

impl Default for BlockCache {
    fn default() -> Self {
        BlockCache {
            blocks: Mutex::new(Vec::new()),
            limit_bytes: AtomicUsize::new(MAX_BYTES),
        }
    }
}

impl Stream {
    /// Takes a cached block of exactly `size` bytes, freed earlier in this stream's order.
    pub(crate) fn take_block(&self, size: usize) -> Option<u64> {
        let mut c = self
            .block_cache
            .blocks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let i = c.iter().position(|b| b.0 == size)?;
        Some(c.swap_remove(i).1)
    }

    /// Keeps a block whose free is ordered on this stream; false when the cache is full.
    pub(crate) fn cache_block(&self, size: usize, addr: u64) -> bool {
        let mut c = self
            .block_cache
            .blocks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let bytes: usize = c.iter().map(|b| b.0).sum();
        let limit = self.block_cache.limit_bytes.load(Ordering::Relaxed);
        if c.len() >= MAX_BLOCKS || bytes + size > limit {
            return false;
        }
        c.push((size, addr));
        true
    }

    /// Sets the byte bound of the block cache (0 disables it) and trims it.
    pub fn set_block_cache_limit(&self, bytes: usize) -> Result<()> {
        self.block_cache.limit_bytes.store(bytes, Ordering::Relaxed);
        self.trim_block_cache()
    }

    /// Returns every cached block to the driver's pool, in stream order.
    pub fn trim_block_cache(&self) -> Result<()> {
        let blocks = std::mem::take(
            &mut *self
                .block_cache
                .blocks
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        self.push(|| {
            for (_, addr) in blocks {
                self.device.backend.mem_free_async(addr, self.raw)?;
            }
            Ok(())
        })
    }
}

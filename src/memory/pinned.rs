//! A bounded cache of pinned host blocks, rounded to the page size (not to powers
//! of two). A block goes back to the cache with the recordings of its last uses,
//! and is handed out again only once they completed.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::event::RecRef;
use std::sync::Mutex;

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
    /// Blocks given back to the driver (trims and frees over the bound).
    trims: u64,
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
                trims: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `size` bytes: (address, block size, from the cache).
    pub(crate) fn take(&self, device: &Device, size: usize) -> Result<(u64, usize, bool)> {
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
            return Ok((b.addr, b.size, true));
        }
        let p = device.backend.pinned_alloc(rounded)?;
        self.state().stats.bytes_in_use += rounded as u64;
        Ok((p as u64, rounded, false))
    }

    pub(crate) fn give_back(&self, device: &Device, addr: u64, size: usize, pending: Vec<RecRef>) {
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
        st.trims += 1;
        let limit = st.stats.cache_limit;
        drop(st);
        crate::log::debug(|| {
            format!("pinned cache full (bound {limit} bytes): a block of {size} bytes goes back to the driver")
        });
        for r in &pending {
            let _ = r.wait_complete();
        }
        device.backend.pinned_free(addr as *mut u8);
    }

    pub fn stats(&self) -> PinnedStats {
        self.state().stats
    }

    /// Blocks given back to the driver so far.
    pub fn trims(&self) -> u64 {
        self.state().trims
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
            st.trims += v.len() as u64;
            v
        };
        if !victims.is_empty() {
            let bytes: usize = victims.iter().map(|b| b.size).sum();
            crate::log::info(|| {
                format!(
                    "pinned cache trimmed to {target} bytes: {} blocks ({bytes} bytes) go back to the driver",
                    victims.len()
                )
            });
        }
        for b in victims {
            for r in &b.pending {
                let _ = r.wait_complete();
            }
            device.backend.pinned_free(b.addr as *mut u8);
        }
    }
}

//! Counters of what the engine, the event pools, the allocators, the graph caches
//! and the prefetchers did, per device or summed over the process.
//!
//! Most are always on: they are the streams' existing counters, or are updated
//! under a lock the path already holds, or on paths far from the op path. Those that
//! would cost work on every op (waits deduplicated, waits skipped as same-stream,
//! bytes copied) are counted only while counting is on ([`set_enabled`],
//! `SLUICE_COUNTERS=1`, or a trace being written): the op path then pays its one
//! relaxed load of the trace switch and nothing else.

use crate::device::Device;
use crate::memory::BufferKind;
use crate::stream::Stream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $field:ident,)*) => {
        /// Counters of one device, or of every device (see [`process`]).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[doc = $doc])* pub $field: u64,)*
        }

        impl Counters {
            /// Adds `o` field by field.
            pub fn add(&mut self, o: &Counters) {
                $(self.$field += o.$field;)*
            }

            /// (name, value) of every field, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }
        }
    };
}

counters! {
    /// Live streams.
    streams,
    /// Stream waits inserted by the engine and by explicit event waits.
    waits_inserted,
    /// Waits merged because the op already waits on the same or a newer recording
    /// of that stream (counted while counting is on).
    waits_deduplicated,
    /// Waits not inserted because stream order already covers them (counted while
    /// counting is on).
    waits_skipped_same_stream,
    /// Events recorded.
    events_recorded,
    /// Events created because a pool had none free.
    events_created,
    /// Records served by a recycled event (recorded less created).
    events_recycled,
    /// Free events in the pools of live streams now.
    events_in_pools,
    /// Bytes copied host to device (counted while counting is on; not in graphs).
    bytes_h2d,
    /// Bytes copied device to host (as above).
    bytes_d2h,
    /// Bytes copied device to device (as above).
    bytes_d2d,
    /// Bytes copied host to host through the device (as above).
    bytes_h2h,
    /// Device allocations served by a stream's block cache.
    device_alloc_hits,
    /// Device allocations from the driver.
    device_alloc_misses,
    /// Cached device blocks given back to the driver by a trim.
    device_alloc_trims,
    /// Pinned allocations served by the pinned cache.
    pinned_alloc_hits,
    /// Pinned allocations from the driver.
    pinned_alloc_misses,
    /// Pinned blocks given back to the driver (trims and frees over the cache bound).
    pinned_alloc_trims,
    /// Pinned bytes handed out now.
    pinned_bytes_in_use,
    /// Pinned bytes cached now.
    pinned_bytes_cached,
    /// Graph cache runs replayed.
    graph_cache_hits,
    /// Graph cache runs captured and instantiated.
    graph_cache_captures,
    /// Graph cache runs executed eagerly.
    graph_cache_eager,
    /// Graph cache entries evicted, least recently used first, to keep a cache
    /// under its maximum (`SLUICE_GRAPH_CACHE_MAX`).
    graph_cache_evictions,
    /// Executable graphs updated in place.
    graph_updates,
    /// Executable graph updates that fell back to re-instantiation.
    graph_update_fallbacks,
    /// Times a prefetcher's producer blocked for a free slot.
    prefetch_producer_waits,
    /// Times a prefetcher's consumer blocked for a batch.
    prefetch_consumer_waits,
    /// Time producers spent in acquire, in ns.
    prefetch_producer_wait_ns,
    /// Time consumers spent in next, in ns.
    prefetch_consumer_wait_ns,
    /// Host synchronisations made by `SLUICE_ENGINE=sync`.
    engine_syncs,
}

/// Direction of a copy, by the kinds of its buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDir {
    H2D = 0,
    D2H = 1,
    D2D = 2,
    H2H = 3,
}

impl CopyDir {
    /// The direction of a copy from `src` to `dst`.
    pub fn of(src: BufferKind, dst: BufferKind) -> CopyDir {
        let on_device = |k| matches!(k, BufferKind::Device | BufferKind::Foreign);
        match (on_device(src), on_device(dst)) {
            (false, true) => CopyDir::H2D,
            (true, false) => CopyDir::D2H,
            (true, true) => CopyDir::D2D,
            (false, false) => CopyDir::H2H,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CopyDir::H2D => "H2D",
            CopyDir::D2H => "D2H",
            CopyDir::D2D => "D2D",
            CopyDir::H2H => "H2H",
        }
    }
}

/// A stream's counters that cost work on the op path; updated only while counting
/// is on, under the stream's push lock (so a load and a store, no locked add).
#[derive(Debug, Default)]
pub(crate) struct StreamCounts {
    pub(crate) dedup: AtomicU64,
    pub(crate) same_stream: AtomicU64,
    pub(crate) bytes: [AtomicU64; 4],
}

impl StreamCounts {
    /// Adds `n` to `c`; the caller holds the stream's push lock.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

/// A device's counters kept outside its streams.
#[derive(Default)]
pub(crate) struct DeviceCounters {
    pub(crate) graph_cache_hits: AtomicU64,
    pub(crate) graph_cache_captures: AtomicU64,
    pub(crate) graph_cache_eager: AtomicU64,
    pub(crate) graph_cache_evictions: AtomicU64,
    pub(crate) graph_updates: AtomicU64,
    pub(crate) graph_update_fallbacks: AtomicU64,
    pub(crate) prefetch_producer_waits: AtomicU64,
    pub(crate) prefetch_consumer_waits: AtomicU64,
    pub(crate) prefetch_producer_wait_ns: AtomicU64,
    pub(crate) prefetch_consumer_wait_ns: AtomicU64,
    /// What destroyed streams counted.
    retired: Mutex<Counters>,
}

impl DeviceCounters {
    pub(crate) fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Turns the counters that cost work on the op path on or off (a trace being
/// written counts them too).
pub fn set_enabled(on: bool) {
    crate::trace::set_counting(on)
}

/// True while the op-path counters count.
pub fn enabled() -> bool {
    crate::trace::counting()
}

impl Stream {
    /// Adds this stream's counters to `c`.
    fn add_counts(&self, c: &mut Counters) {
        let (op_waits, records, free) = {
            let inner = self.push_lock();
            (inner.op_waits, inner.seq, inner.free_events())
        };
        let counts = &self.pool.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let created = self.stats.events_created.load(Ordering::Relaxed);
        c.waits_inserted += self.stats.waits.load(Ordering::Relaxed) + op_waits;
        c.waits_deduplicated += get(&counts.dedup);
        c.waits_skipped_same_stream += get(&counts.same_stream);
        c.events_recorded += records;
        c.events_created += created;
        c.events_recycled += records.saturating_sub(created);
        c.events_in_pools += free;
        c.bytes_h2d += get(&counts.bytes[CopyDir::H2D as usize]);
        c.bytes_d2h += get(&counts.bytes[CopyDir::D2H as usize]);
        c.bytes_d2d += get(&counts.bytes[CopyDir::D2D as usize]);
        c.bytes_h2h += get(&counts.bytes[CopyDir::H2H as usize]);
        let (hits, misses, trims) = self.block_cache_counts();
        c.device_alloc_hits += hits;
        c.device_alloc_misses += misses;
        c.device_alloc_trims += trims;
        c.engine_syncs += self.stats.engine_syncs.load(Ordering::Relaxed);
    }

    /// Keeps this stream's counters in its device's totals (the stream is going).
    pub(crate) fn retire_counts(&self) {
        let mut c = Counters::default();
        self.add_counts(&mut c);
        c.events_in_pools = 0;
        self.device
            .counters
            .retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&c);
    }
}

impl Device {
    /// This device's counters: its live streams, its destroyed streams, its
    /// pinned pool, its graph caches and prefetchers.
    pub fn counters(&self) -> Counters {
        let mut c = *self
            .counters
            .retired
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for s in self.live_streams() {
            c.streams += 1;
            s.add_counts(&mut c);
        }
        let p = self.pinned.stats();
        c.pinned_alloc_hits += p.hits;
        c.pinned_alloc_misses += p.misses;
        c.pinned_alloc_trims += self.pinned.trims();
        c.pinned_bytes_in_use += p.bytes_in_use;
        c.pinned_bytes_cached += p.bytes_cached;
        let d = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        c.graph_cache_hits += get(&d.graph_cache_hits);
        c.graph_cache_captures += get(&d.graph_cache_captures);
        c.graph_cache_eager += get(&d.graph_cache_eager);
        c.graph_cache_evictions += get(&d.graph_cache_evictions);
        c.graph_updates += get(&d.graph_updates);
        c.graph_update_fallbacks += get(&d.graph_update_fallbacks);
        c.prefetch_producer_waits += get(&d.prefetch_producer_waits);
        c.prefetch_consumer_waits += get(&d.prefetch_consumer_waits);
        c.prefetch_producer_wait_ns += get(&d.prefetch_producer_wait_ns);
        c.prefetch_consumer_wait_ns += get(&d.prefetch_consumer_wait_ns);
        c
    }
}

/// The counters of every device opened in this process, summed.
pub fn process() -> Counters {
    let mut c = Counters::default();
    for d in crate::device::all_devices() {
        c.add(&d.counters());
    }
    c
}

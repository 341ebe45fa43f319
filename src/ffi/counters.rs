//! Counters: of one device or of the process.

use super::*;
use crate::counters::Counters;

/// Counters of one device, or of every device of the process (`sluice_counters`).
/// Fields marked "while counting" count only while `sluice_counters_set_enabled(true)`,
/// `SLUICE_COUNTERS=1` or a trace is on: they would cost work on every op otherwise.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct sluice_counters_t {
    /// Live streams, counting destroyed streams that buffers allocated on them
    /// still keep alive for their stream-ordered free.
    pub streams: u64,
    /// Stream waits inserted by the engine and by explicit event waits.
    pub waits_inserted: u64,
    /// Waits merged because the op already waits on the same or a newer recording of
    /// that stream (while counting).
    pub waits_deduplicated: u64,
    /// Waits not inserted because stream order already covers them (while counting).
    pub waits_skipped_same_stream: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Events created because a pool had none free.
    pub events_created: u64,
    /// Records served by a recycled event (recorded less created).
    pub events_recycled: u64,
    /// Free events in the pools of live streams now.
    pub events_in_pools: u64,
    /// Bytes copied host to device (while counting; not in graphs).
    pub bytes_h2d: u64,
    /// Bytes copied device to host (as above).
    pub bytes_d2h: u64,
    /// Bytes copied device to device (as above).
    pub bytes_d2d: u64,
    /// Bytes copied host to host through the device (as above).
    pub bytes_h2h: u64,
    /// Device allocations served by a stream's block cache.
    pub device_alloc_hits: u64,
    /// Device allocations from the driver.
    pub device_alloc_misses: u64,
    /// Cached device blocks given back to the driver by a trim.
    pub device_alloc_trims: u64,
    /// Pinned allocations served by the pinned cache.
    pub pinned_alloc_hits: u64,
    /// Pinned allocations from the driver.
    pub pinned_alloc_misses: u64,
    /// Pinned blocks given back to the driver (trims and frees over the cache bound).
    pub pinned_alloc_trims: u64,
    /// Pinned bytes handed out now.
    pub pinned_bytes_in_use: u64,
    /// Pinned bytes cached now.
    pub pinned_bytes_cached: u64,
    /// Graph cache runs replayed.
    pub graph_cache_hits: u64,
    /// Graph cache runs captured and instantiated.
    pub graph_cache_captures: u64,
    /// Graph cache runs executed eagerly.
    pub graph_cache_eager: u64,
    /// Graph cache entries evicted, least recently used first, to keep a cache
    /// under its maximum (`SLUICE_GRAPH_CACHE_MAX`).
    pub graph_cache_evictions: u64,
    /// Executable graphs updated in place.
    pub graph_updates: u64,
    /// Executable graph updates that fell back to re-instantiation.
    pub graph_update_fallbacks: u64,
    /// Times a prefetcher's producer blocked for a free slot.
    pub prefetch_producer_waits: u64,
    /// Times a prefetcher's consumer blocked for a batch.
    pub prefetch_consumer_waits: u64,
    /// Time producers spent in acquire, in ns.
    pub prefetch_producer_wait_ns: u64,
    /// Time consumers spent in next, in ns.
    pub prefetch_consumer_wait_ns: u64,
    /// Host synchronisations made by `SLUICE_ENGINE=sync`.
    pub engine_syncs: u64,
}

impl From<Counters> for sluice_counters_t {
    fn from(c: Counters) -> Self {
        sluice_counters_t {
            streams: c.streams,
            waits_inserted: c.waits_inserted,
            waits_deduplicated: c.waits_deduplicated,
            waits_skipped_same_stream: c.waits_skipped_same_stream,
            events_recorded: c.events_recorded,
            events_created: c.events_created,
            events_recycled: c.events_recycled,
            events_in_pools: c.events_in_pools,
            bytes_h2d: c.bytes_h2d,
            bytes_d2h: c.bytes_d2h,
            bytes_d2d: c.bytes_d2d,
            bytes_h2h: c.bytes_h2h,
            device_alloc_hits: c.device_alloc_hits,
            device_alloc_misses: c.device_alloc_misses,
            device_alloc_trims: c.device_alloc_trims,
            pinned_alloc_hits: c.pinned_alloc_hits,
            pinned_alloc_misses: c.pinned_alloc_misses,
            pinned_alloc_trims: c.pinned_alloc_trims,
            pinned_bytes_in_use: c.pinned_bytes_in_use,
            pinned_bytes_cached: c.pinned_bytes_cached,
            graph_cache_hits: c.graph_cache_hits,
            graph_cache_captures: c.graph_cache_captures,
            graph_cache_eager: c.graph_cache_eager,
            graph_cache_evictions: c.graph_cache_evictions,
            graph_updates: c.graph_updates,
            graph_update_fallbacks: c.graph_update_fallbacks,
            prefetch_producer_waits: c.prefetch_producer_waits,
            prefetch_consumer_waits: c.prefetch_consumer_waits,
            prefetch_producer_wait_ns: c.prefetch_producer_wait_ns,
            prefetch_consumer_wait_ns: c.prefetch_consumer_wait_ns,
            engine_syncs: c.engine_syncs,
        }
    }
}

/// Writes the counters of `device`, or, when `device.bits` is 0, of every device
/// opened in the process (destroyed streams included) to `counters_out`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`counters_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale non-zero `device`).
#[no_mangle]
pub extern "C" fn sluice_counters(
    device: sluice_device_t,
    counters_out: *mut sluice_counters_t,
) -> *mut sluice_error_t {
    boundary("sluice_counters", || {
        out_value(counters_out, "counters_out", || {
            Ok(match device.bits {
                0 => crate::counters::process(),
                _ => get(device)?.counters(),
            }
            .into())
        })
    })
}

/// Turns on or off the counters that cost work on every op (those marked "while
/// counting" in `sluice_counters_t`); a trace counts them too. Off by default, or
/// on with `SLUICE_COUNTERS=1`.
///
/// Errors: none: it always succeeds.
#[no_mangle]
pub extern "C" fn sluice_counters_set_enabled(enabled: bool) -> *mut sluice_error_t {
    boundary("sluice_counters_set_enabled", || {
        crate::counters::set_enabled(enabled);
        Ok(())
    })
}

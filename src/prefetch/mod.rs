//! The prefetcher: the next batch is copied host-to-device on the prefetcher's own
//! copy streams while the consumer computes on the current one. This file holds its
//! types, creation, counters and close; `produce.rs` the producers' side,
//! `consume.rs` the consumers', `stream_store.rs` the streaming stores that fill
//! a slot, and `signal.rs` the wake-ups between them.
//!
//! Each of `depth` slots holds pinned staging memory and device memory for every
//! segment, all allocated at create. A slot cycles free → filling (a producer
//! writes its pinned memory) → ready (its H2D copies are enqueued) → leased (a
//! consumer uses its device memory) → free. Sequence numbers are given when a
//! producer takes a slot, and consumers receive batches in that order.
//!
//! Producers on different threads enqueue their copies on different copy streams
//! (up to [`MAX_COPY_STREAMS`], a stream per producer thread), so that their
//! submits do not queue behind each other on one stream's lock and the driver's.
//!
//! Ordering on the device comes from the segments' sync objects: the H2D copy is a
//! tracked op that writes the device buffer, a lease is a foreign op that reads it
//! on the consumer's stream from `next` to `release`, so a refill waits on the
//! device for the consumer's work. The host waits only for its own staging memory:
//! a producer that takes a slot waits for that slot's previous H2D copy.

mod consume;
mod produce;
mod signal;
mod stream_store;

pub use stream_store::gather_rows;

use crate::device::Device;
use crate::engine::ForeignOp;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::sync::SyncObject;
use signal::Signal;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// The most segments a batch may have.
pub(crate) const MAX_SEGMENTS: usize = 8;
/// The depth used when the caller gives 0.
pub(crate) const DEFAULT_DEPTH: u32 = 2;
/// The greatest depth.
pub(crate) const MAX_DEPTH: u32 = 64;
/// The most copy streams a prefetcher has (never more than its depth).
pub(crate) const MAX_COPY_STREAMS: usize = 4;

/// What a pull-mode fill callback reports.
pub enum FillOutcome {
    /// The lengths are set; the batch is ready to copy.
    Ready,
    /// The input has ended; this slot carries no batch.
    End,
    /// The producer failed; the consumer receives this error in the batch's place.
    Failed(String),
}

/// A pull-mode producer: called on the prefetcher's own threads, one slot at a time.
pub type FillFn = Arc<dyn Fn(&mut Fill<'_>) -> FillOutcome + Send + Sync>;

/// A slot taken by a producer: its sequence number and its pinned memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub seq: u64,
    pub slot: u32,
    /// The slot's generation when taken: a ticket is used once.
    pub generation: u32,
}

/// A slot being filled in place (pull mode, or zero-copy push).
pub struct Fill<'a> {
    pub ticket: Ticket,
    /// Host address and capacity of each segment's pinned memory.
    pub host: &'a [(*mut u8, usize)],
    /// The bytes the producer wrote into each segment.
    pub len: &'a mut [usize],
}

/// A batch as the consumer sees it.
#[derive(Clone, Debug)]
pub struct BatchView {
    pub seq: u64,
    /// The slot it is in.
    pub slot: u32,
    /// Device address and length of each segment.
    pub segments: Vec<(u64, usize)>,
    /// The device buffer of each segment (its sync object orders kernels on it).
    pub buffers: Vec<Arc<Buffer>>,
}

/// An error of `next`: when a producer failed, the batch's sequence number too.
#[derive(Clone, Debug)]
pub struct NextError {
    pub error: Error,
    /// The failed batch's sequence number (producer errors only).
    pub seq: Option<u64>,
}

impl From<Error> for NextError {
    fn from(error: Error) -> Self {
        NextError { error, seq: None }
    }
}

type NextResult<T> = std::result::Result<T, NextError>;

/// Counters of one prefetcher.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrefetchStats {
    /// Batches handed to consumers.
    pub batches: u64,
    /// Bytes copied host-to-device.
    pub bytes: u64,
    /// Time producers waited for a free slot (and for its previous copy).
    pub producer_wait_ns: u64,
    /// Time consumers waited in `next`.
    pub consumer_wait_ns: u64,
    /// Pinned staging memory held (constant from create to destroy).
    pub pinned_bytes: u64,
    /// Host-to-device GB/s over the copies timed so far: batch 0's, then every
    /// eighth batch's once 8 MiB were copied since the last timed one, each timed
    /// when its slot is reused (so this trails by `depth` batches; 0 before the
    /// first). Copies of producers on different threads may overlap on the
    /// device: the rate is then that of one copy among them.
    pub copy_gbps: f64,
}

struct SlotBuffers {
    pinned: Vec<Arc<Buffer>>,
    device: Vec<Arc<Buffer>>,
    host: Vec<(*mut u8, usize)>,
}

// SAFETY: the raw host pointers name pinned memory owned by `pinned`.
unsafe impl Send for SlotBuffers {}
// SAFETY: as above; writers are serialised by the slot's state.
unsafe impl Sync for SlotBuffers {}

struct Slot {
    buffers: Arc<SlotBuffers>,
    generation: u32,
    /// Timing recordings around the slot's last copies, until timed (one batch
    /// in [`TIMED_EVERY`] has them).
    copied: Option<(RecRef, RecRef, u64)>,
}

enum Entry {
    Filling(u32),
    Ready(u32, Vec<usize>),
    Failed(Error),
    Skipped,
}

struct State {
    slots: Vec<Slot>,
    free: VecDeque<u32>,
    next_seq: u64,
    next_out: u64,
    pending: BTreeMap<u64, Entry>,
    input_closed: bool,
    stats: PrefetchStats,
    copy_secs: f64,
    copy_timed_bytes: u64,
    /// Bytes submitted untimed since the last timed batch.
    untimed_bytes: u64,
}

/// A prefetcher. Thread-safe: producers and consumers may be on any threads.
pub struct Prefetcher {
    device: Arc<Device>,
    /// The copy streams, each with the lock that keeps a timed batch's copies
    /// alone between its timing recordings (written by timed batches, read by the
    /// others). A producer thread always uses the same one.
    copy_streams: Vec<(Arc<Stream>, RwLock<()>)>,
    capacities: Vec<usize>,
    /// The device buffers' sync objects, per slot.
    syncs: Vec<Vec<Arc<SyncObject>>>,
    state: Mutex<State>,
    /// The leased batches. Only consumers take this lock, so `next` and
    /// `release` meet the producers on `state` once each.
    leases: Mutex<HashMap<u64, Lease>>,
    /// Set by `close` while it holds `state` (so paths under that lock see it as
    /// of the lock), and read by the lease paths, which do not take it.
    destroyed: AtomicBool,
    slot_freed: Signal,
    batch_ready: Signal,
    producers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// A leased batch: its slot, its open read, and the slot's buffers, kept until
/// the read has ended, so that a `close` that takes the leases while a release
/// is ending one frees that memory only after the read is published.
struct Lease {
    slot: u32,
    /// Dropped before `buffers` (fields drop in order): the read ends first.
    op: ForeignOp,
    buffers: Arc<SlotBuffers>,
}

fn destroyed() -> Error {
    Error::new(ErrorCode::InvalidHandle, "the prefetcher was destroyed")
}

fn timed_out(what: &str) -> Error {
    Error::new(ErrorCode::Timeout, format!("{what} timed out"))
}

impl Prefetcher {
    /// Allocates `depth` slots (0 means [`DEFAULT_DEPTH`]) of pinned and device
    /// memory for each segment capacity, and the prefetcher's copy stream.
    pub fn create(device: &Arc<Device>, depth: u32, capacities: &[usize]) -> Result<Arc<Self>> {
        let depth = if depth == 0 { DEFAULT_DEPTH } else { depth };
        if depth > MAX_DEPTH {
            return Err(Error::invalid_argument(format!(
                "prefetcher depth {depth} is over {MAX_DEPTH}"
            )));
        }
        if capacities.is_empty() || capacities.len() > MAX_SEGMENTS {
            return Err(Error::invalid_argument(format!(
                "a prefetcher has 1 to {MAX_SEGMENTS} segments, not {}",
                capacities.len()
            )));
        }
        if let Some(i) = capacities.iter().position(|&c| c == 0) {
            return Err(Error::invalid_argument(format!(
                "segment {i}: capacity must be > 0"
            )));
        }
        let copy_streams = (0..MAX_COPY_STREAMS.min(depth as usize))
            .map(|_| {
                let s = Stream::create(device, crate::stream::STREAM_NON_BLOCKING, 0)?;
                s.set_label(Some("sluice prefetcher copies"));
                Ok((s, RwLock::new(())))
            })
            .collect::<Result<Vec<_>>>()?;
        let copy_stream = &copy_streams[0].0;
        let mut slots = Vec::with_capacity(depth as usize);
        let mut syncs = Vec::with_capacity(depth as usize);
        for _ in 0..depth {
            let mut pinned = Vec::new();
            let mut dev = Vec::new();
            for &cap in capacities {
                pinned.push(Buffer::alloc_pinned(device, cap)?);
                dev.push(Buffer::alloc(copy_stream, cap)?);
            }
            let host = pinned
                .iter()
                .map(|b| (b.host_ptr().expect("pinned memory"), b.size))
                .collect();
            syncs.push(dev.iter().map(|b| b.sync.clone()).collect());
            slots.push(Slot {
                buffers: Arc::new(SlotBuffers {
                    pinned,
                    device: dev,
                    host,
                }),
                generation: 1,
                copied: None,
            });
        }
        let pinned_bytes = depth as u64 * capacities.iter().map(|&c| c as u64).sum::<u64>();
        Ok(Arc::new(Prefetcher {
            device: device.clone(),
            copy_streams,
            capacities: capacities.to_vec(),
            syncs,
            leases: Mutex::new(HashMap::new()),
            destroyed: AtomicBool::new(false),
            state: Mutex::new(State {
                slots,
                free: (0..depth).collect(),
                next_seq: 0,
                next_out: 0,
                pending: BTreeMap::new(),
                input_closed: false,
                stats: PrefetchStats {
                    pinned_bytes,
                    ..PrefetchStats::default()
                },
                copy_secs: 0.0,
                copy_timed_bytes: 0,
                untimed_bytes: produce::TIMED_AFTER_BYTES,
            }),
            slot_freed: Signal::default(),
            batch_ready: Signal::default(),
            producers: Mutex::new(Vec::new()),
        }))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The capacity of each segment.
    pub fn capacities(&self) -> &[usize] {
        &self.capacities
    }

    /// The number of slots.
    pub fn depth(&self) -> usize {
        self.syncs.len()
    }

    /// Slot `slot`'s device buffers.
    pub fn slot_buffers(&self, slot: usize) -> Vec<Arc<Buffer>> {
        let st = self.lock();
        st.slots
            .get(slot)
            .map(|s| s.buffers.device.clone())
            .unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    fn lock_leases(&self) -> MutexGuard<'_, HashMap<u64, Lease>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counters so far.
    pub fn stats(&self) -> PrefetchStats {
        let st = self.lock();
        let mut s = st.stats;
        if st.copy_secs > 0.0 {
            s.copy_gbps = st.copy_timed_bytes as f64 / st.copy_secs / 1e9;
        }
        s
    }

    /// The first half of [`Prefetcher::close`]: marks the prefetcher destroyed,
    /// wakes every blocked producer and consumer, and waits until each open fill
    /// was submitted or cancelled (both then fail). Those calls must still reach
    /// the prefetcher meanwhile: a C handle is removed only after this returns.
    pub fn stop(&self) {
        let mut st = self.lock();
        self.destroyed.store(true, Ordering::Release);
        st.pending.retain(|_, e| matches!(e, Entry::Filling(_)));
        st.free.clear();
        self.slot_freed.notify_all();
        self.batch_ready.notify_all();
        // A producer may still be writing an open fill's pinned memory.
        while !st.pending.is_empty() {
            st = self.slot_freed.wait(st, None).0;
        }
    }

    /// Destroys the prefetcher's state at any moment: [`Prefetcher::stop`], then
    /// joins the producer threads, ends open leases and frees the memory (device
    /// memory after its outstanding use, in stream order).
    pub fn close(&self) {
        self.stop();
        // No fill opens once the flag is set, so none is pending now.
        let slots = std::mem::take(&mut self.lock().slots);
        let leased = std::mem::take(&mut *self.lock_leases());
        let producers =
            std::mem::take(&mut *self.producers.lock().unwrap_or_else(|p| p.into_inner()));
        for h in producers {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        // Ending each lease publishes its reader: the frees below wait for it.
        drop(leased);
        drop(slots);
    }
}

impl Drop for Prefetcher {
    /// Ends the leases (publishing their reads) before the slots' memory is freed.
    fn drop(&mut self) {
        self.leases
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        st.slots.clear();
    }
}

/// A producer's view of a taken slot's pinned memory.
pub struct SlotBuffersView(Arc<SlotBuffers>);

impl SlotBuffersView {
    /// Host address and capacity of each segment's pinned memory.
    pub fn host(&self) -> &[(*mut u8, usize)] {
        &self.0.host
    }
}

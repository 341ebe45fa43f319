//! The prefetcher: the next batch is copied host-to-device on the prefetcher's own
//! stream while the consumer computes on the current one.
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

use crate::device::Device;
use crate::engine::ForeignOp;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::ops;
use crate::stream::Stream;
use crate::sync::SyncObject;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// The most segments a batch may have.
pub(crate) const MAX_SEGMENTS: usize = 8;
/// The depth used when the caller gives 0.
pub(crate) const DEFAULT_DEPTH: u32 = 2;
/// The greatest depth.
pub(crate) const MAX_DEPTH: u32 = 64;
/// The most copy streams a prefetcher has (never more than its depth).
pub(crate) const MAX_COPY_STREAMS: usize = 4;

/// Numbers the threads that submit batches, from 0, for the choice of copy stream.
static PRODUCER_THREADS: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's number among producer threads plus 1; 0 before its first submit.
    static PRODUCER_THREAD: Cell<u32> = const { Cell::new(0) };
}

/// This thread's number among the threads that submitted batches.
fn producer_thread() -> usize {
    PRODUCER_THREAD.with(|t| {
        if t.get() == 0 {
            t.set(
                PRODUCER_THREADS
                    .fetch_add(1, Ordering::Relaxed)
                    .wrapping_add(1)
                    .max(1),
            );
        }
        (t.get() - 1) as usize
    })
}

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

/// A batch taken by a consumer: its sequence number, slot, lengths and buffers.
type Taken = (u64, u32, Vec<usize>, Arc<SlotBuffers>);

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
    /// The leased batches: their slots and open reads. Only consumers take this
    /// lock, so `next` and `release` meet the producers on `state` once each.
    leases: Mutex<HashMap<u64, (u32, ForeignOp)>>,
    /// Set by `close` while it holds `state` (so paths under that lock see it as
    /// of the lock), and read by the lease paths, which do not take it.
    destroyed: AtomicBool,
    slot_freed: Condvar,
    batch_ready: Condvar,
    producers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Batch 0 has its copies timed, then one batch in [`TIMED_EVERY`] once
/// [`TIMED_AFTER_BYTES`] were copied untimed since the last timed one: every eighth
/// batch of 1 MiB or more, about one in 48 of 200 KiB. A timed batch costs two
/// timing recordings on its copy stream, an elapsed-time query and a moment alone
/// on that stream; small batches are bound by such driver calls.
const TIMED_EVERY: u64 = 8;
const TIMED_AFTER_BYTES: u64 = 8 << 20;

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
                untimed_bytes: TIMED_AFTER_BYTES,
            }),
            slot_freed: Condvar::new(),
            batch_ready: Condvar::new(),
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

    fn lock_leases(&self) -> MutexGuard<'_, HashMap<u64, (u32, ForeignOp)>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on `cv` until `deadline`; false when it passed.
    fn wait<'a>(
        cv: &Condvar,
        st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, State>, bool) {
        match deadline {
            None => (cv.wait(st).unwrap_or_else(|p| p.into_inner()), true),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (st, false);
                }
                let (st, _) = cv.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner());
                (st, true)
            }
        }
    }

    /// Takes a free slot for a producer, blocking while all are busy (back-pressure)
    /// until `timeout` (None: no limit). Then waits for the slot's previous copy
    /// before its pinned memory is handed out (that wait has no timeout: the copy
    /// was enqueued at least `depth` batches earlier). The fill stays open until
    /// [`Prefetcher::submit`] or [`Prefetcher::cancel`].
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<(Ticket, SlotBuffersView)> {
        let t0 = Instant::now();
        let deadline = timeout.map(|t| t0 + t);
        let mut st = self.lock();
        let slot = loop {
            if self.is_destroyed() {
                return Err(destroyed());
            }
            if st.input_closed {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    "the prefetcher's input is closed",
                ));
            }
            if let Some(s) = st.free.pop_front() {
                break s;
            }
            crate::trace::prefetch_blocked(&self.device, false);
            let (g, in_time) = Self::wait(&self.slot_freed, st, deadline);
            st = g;
            if !in_time {
                st.stats.producer_wait_ns += t0.elapsed().as_nanos() as u64;
                crate::trace::prefetch_waited(&self.device, false, t0);
                return Err(timed_out("waiting for a free prefetcher slot"));
            }
        };
        let seq = st.next_seq;
        st.next_seq += 1;
        st.pending.insert(seq, Entry::Filling(slot));
        let s = &mut st.slots[slot as usize];
        let ticket = Ticket {
            seq,
            slot,
            generation: s.generation,
        };
        let buffers = s.buffers.clone();
        let copied = s.copied.take();
        drop(st);
        // The pinned memory is free once the slot's previous copies, its only
        // readers, completed.
        if let Err(e) = buffers.pinned.iter().try_for_each(|p| p.sync.wait_write()) {
            let _ = self.finish(ticket, Entry::Failed(e.clone()));
            return Err(e);
        }
        let timed = copied.and_then(|(start, end, bytes)| {
            let ms = start.elapsed_ms(&end).ok()?;
            Some((ms as f64 / 1e3, bytes))
        });
        let mut st = self.lock();
        st.stats.producer_wait_ns += t0.elapsed().as_nanos() as u64;
        crate::trace::prefetch_waited(&self.device, false, t0);
        if self.is_destroyed() {
            self.abandon(&mut st, ticket);
            return Err(destroyed());
        }
        if let Some((secs, bytes)) = timed {
            st.copy_secs += secs;
            st.copy_timed_bytes += bytes;
        }
        Ok((ticket, SlotBuffersView(buffers)))
    }

    /// After a destroy, ends an open fill: `close` waits for every open fill, so that
    /// no producer writes into memory that was already freed.
    fn abandon(&self, st: &mut State, ticket: Ticket) {
        if matches!(st.pending.get(&ticket.seq), Some(Entry::Filling(x)) if *x == ticket.slot)
            && st
                .slots
                .get(ticket.slot as usize)
                .is_some_and(|s| s.generation == ticket.generation)
        {
            st.pending.remove(&ticket.seq);
            self.slot_freed.notify_all();
        }
    }

    /// Checks that `ticket` names a slot still filling under it; after a destroy,
    /// ends the fill and reports the destroy.
    fn check_open(&self, st: &mut State, ticket: Ticket) -> Result<()> {
        if self.is_destroyed() {
            self.abandon(st, ticket);
            return Err(destroyed());
        }
        Self::check_ticket(st, ticket)
    }

    /// Checks that `ticket` names a slot still filling under it.
    fn check_ticket(st: &State, ticket: Ticket) -> Result<()> {
        let ok = st.slots.get(ticket.slot as usize).is_some_and(|s| {
            s.generation == ticket.generation
                && matches!(st.pending.get(&ticket.seq), Some(Entry::Filling(x)) if *x == ticket.slot)
        });
        if !ok {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "prefetcher ticket for batch {} is not an open fill (submitted, cancelled or forged)",
                    ticket.seq
                ),
            ));
        }
        Ok(())
    }

    /// Ends a fill: the slot's entry becomes `entry`; a slot with no batch in it is
    /// free again.
    fn finish(&self, ticket: Ticket, entry: Entry) -> Result<()> {
        let mut st = self.lock();
        self.check_open(&mut st, ticket)?;
        self.end_fill(&mut st, ticket, entry);
        Ok(())
    }

    /// [`Prefetcher::finish`] for a caller that holds the lock and checked `ticket`.
    fn end_fill(&self, st: &mut State, ticket: Ticket, entry: Entry) {
        let slot = &mut st.slots[ticket.slot as usize];
        slot.generation = slot.generation.wrapping_add(1).max(1);
        if !matches!(entry, Entry::Ready(..)) {
            st.free.push_back(ticket.slot);
            self.slot_freed.notify_one();
        }
        st.pending.insert(ticket.seq, entry);
        self.batch_ready.notify_all();
    }

    /// Submits a filled slot: enqueues the H2D copy of each segment's first
    /// `lens[i]` bytes on the copy stream. A length over the capacity is an error
    /// for the submitter, and the consumer receives it in the batch's place.
    pub fn submit(&self, ticket: Ticket, lens: &[usize]) -> Result<()> {
        let bytes = lens.iter().fold(0u64, |a, &l| a.saturating_add(l as u64));
        let (buffers, timed) = {
            let mut st = self.lock();
            self.check_open(&mut st, ticket)?;
            let timed = ticket.seq % TIMED_EVERY == 0 && st.untimed_bytes >= TIMED_AFTER_BYTES;
            st.untimed_bytes = if timed {
                0
            } else {
                st.untimed_bytes.saturating_add(bytes)
            };
            (st.slots[ticket.slot as usize].buffers.clone(), timed)
        };
        if let Err(e) = self
            .check_lens(lens)
            .map_err(|e| e.context(format!("prefetcher batch {}", ticket.seq)))
        {
            let _ = self.finish(ticket, Entry::Failed(e.clone()));
            return Err(e);
        }
        match self.enqueue_copies(&buffers, lens, timed) {
            Ok(timing) => {
                let mut st = self.lock();
                self.check_open(&mut st, ticket)?;
                st.stats.bytes += bytes;
                st.slots[ticket.slot as usize].copied = timing.map(|(a, b)| (a, b, bytes));
                self.end_fill(&mut st, ticket, Entry::Ready(ticket.slot, lens.to_vec()));
                drop(st);
                crate::trace::prefetch_slot(
                    &self.copy_streams[0].0,
                    "submit",
                    ticket.seq,
                    ticket.slot,
                );
                Ok(())
            }
            Err(e) => {
                let e = e.context(format!("prefetcher batch {}", ticket.seq));
                let _ = self.finish(ticket, Entry::Failed(e.clone()));
                Err(e)
            }
        }
    }

    /// Checks one length per segment, each within its capacity; the caller adds
    /// which batch or call it was.
    fn check_lens(&self, lens: &[usize]) -> Result<()> {
        if lens.len() != self.capacities.len() {
            return Err(Error::invalid_argument(format!(
                "{} segment lengths for {} segments",
                lens.len(),
                self.capacities.len()
            )));
        }
        for (i, (&l, &c)) in lens.iter().zip(&self.capacities).enumerate() {
            if l > c {
                return Err(Error::out_of_range(format!(
                    "segment {i} has {l} bytes, over its capacity {c}"
                )));
            }
        }
        Ok(())
    }

    /// Enqueues one batch's copies as one foreign op on the copy stream; when
    /// `timed`, between two timing recordings, after the op's waits (for the
    /// consumer's release), so that the timing covers the copies alone.
    fn enqueue_copies(
        &self,
        b: &SlotBuffers,
        lens: &[usize],
        timed: bool,
    ) -> Result<Option<(RecRef, RecRef)>> {
        let (s, order) = &self.copy_streams[producer_thread() % self.copy_streams.len()];
        // A timed batch's copies alone between its two recordings on its stream;
        // untimed batches may interleave (each op's end is recorded after its own
        // copies).
        let (_alone, _shared);
        if timed {
            _alone = order.write().unwrap_or_else(|p| p.into_inner());
        } else {
            _shared = order.read().unwrap_or_else(|p| p.into_inner());
        }
        let reads = b.pinned.iter().map(|p| p.sync.clone()).collect();
        let writes = b.device.iter().map(|d| d.sync.clone()).collect();
        let op = ForeignOp::begin(s, reads, writes)?;
        let start = if timed { Some(s.record(true)?) } else { None };
        for (i, &len) in lens.iter().enumerate() {
            if len > 0 {
                let (dst, src) = (b.device[i].addr, b.pinned[i].addr);
                s.push(|| s.device.backend.memcpy_async(dst, src, len, s.raw))?;
            }
        }
        let timing = match start {
            Some(start) => Some((start, s.record(true)?)),
            None => None,
        };
        op.end()?;
        Ok(timing)
    }

    /// Gives a filled slot back unused: its sequence number is skipped.
    pub fn cancel(&self, ticket: Ticket) -> Result<()> {
        self.finish(ticket, Entry::Skipped)
    }

    /// Reports a producer's failure: the consumer receives `err` in the batch's place.
    pub fn fail(&self, ticket: Ticket, err: Error) -> Result<()> {
        self.finish(ticket, Entry::Failed(err))
    }

    /// Copies `segments` into a free slot's pinned memory and submits it. Blocks
    /// while every slot is busy, until `timeout`. Returns the batch's sequence number.
    pub fn push(&self, segments: &[&[u8]], timeout: Option<Duration>) -> Result<u64> {
        let lens: Vec<usize> = segments.iter().map(|s| s.len()).collect();
        // Bad lengths are the caller's error here; nothing is queued.
        self.check_lens(&lens).map_err(|e| e.context("push"))?;
        let (ticket, view) = self.acquire(timeout)?;
        for (seg, &(ptr, _)) in segments.iter().zip(view.host()) {
            // SAFETY: the slot's pinned memory is ours until submit, and its capacity
            // was checked above.
            unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), ptr, seg.len()) };
        }
        self.submit(ticket, &lens)?;
        Ok(ticket.seq)
    }

    /// Ends the input: `next` drains what is in flight, then reports end of data.
    /// Producers waiting for a slot return an error.
    pub fn close_input(&self) {
        let mut st = self.lock();
        st.input_closed = true;
        self.slot_freed.notify_all();
        self.batch_ready.notify_all();
    }

    /// Waits for the oldest batch: its sequence number, slot, lengths and buffers.
    fn take_next(&self, timeout: Option<Duration>) -> NextResult<Taken> {
        let t0 = Instant::now();
        let deadline = timeout.map(|t| t0 + t);
        let mut st = self.lock();
        let r = loop {
            if self.is_destroyed() {
                break Err(destroyed().into());
            }
            let seq = st.next_out;
            match st.pending.get(&seq) {
                Some(Entry::Filling(_)) => {}
                Some(_) => {
                    st.next_out += 1;
                    match st.pending.remove(&seq) {
                        Some(Entry::Ready(slot, lens)) => {
                            let buffers = st.slots[slot as usize].buffers.clone();
                            break Ok((seq, slot, lens, buffers));
                        }
                        Some(Entry::Failed(error)) => {
                            break Err(NextError {
                                error,
                                seq: Some(seq),
                            })
                        }
                        _ => continue,
                    }
                }
                None if st.input_closed && st.pending.is_empty() => {
                    break Err(Error::new(
                        ErrorCode::EndOfData,
                        "the prefetcher's input is closed and every batch was consumed",
                    )
                    .into());
                }
                None => {}
            }
            crate::trace::prefetch_blocked(&self.device, true);
            let (g, in_time) = Self::wait(&self.batch_ready, st, deadline);
            st = g;
            if !in_time {
                break Err(timed_out("waiting for the next prefetched batch").into());
            }
        };
        st.stats.consumer_wait_ns += t0.elapsed().as_nanos() as u64;
        crate::trace::prefetch_waited(&self.device, true, t0);
        if r.is_ok() {
            st.stats.batches += 1;
        }
        r
    }

    fn view(seq: u64, slot: u32, lens: &[usize], b: &SlotBuffers) -> BatchView {
        BatchView {
            seq,
            slot,
            segments: b
                .device
                .iter()
                .zip(lens)
                .map(|(d, &l)| (d.addr, l))
                .collect(),
            buffers: b.device.clone(),
        }
    }

    /// The oldest ready batch, leased to work on `stream`: the stream waits on the
    /// device for the batch's copy (the host does not), and kernels that name the
    /// segments' sync objects are tracked. Release it with [`Prefetcher::release`].
    pub fn next(&self, stream: &Arc<Stream>, timeout: Option<Duration>) -> NextResult<BatchView> {
        self.device
            .same_device(&stream.device, "the consumer stream")?;
        let (seq, slot, lens, buffers) = self.take_next(timeout)?;
        let op = match ForeignOp::begin(stream, self.syncs[slot as usize].clone(), Vec::new()) {
            Ok(op) => op,
            Err(e) => {
                self.lock().free.push_back(slot);
                self.slot_freed.notify_one();
                return Err(NextError {
                    error: e.context(format!("prefetcher batch {seq}")),
                    seq: Some(seq),
                });
            }
        };
        {
            let mut leases = self.lock_leases();
            // close sets the flag before it takes the leases.
            if self.is_destroyed() {
                drop(leases);
                drop(op);
                return Err(destroyed().into());
            }
            leases.insert(seq, (slot, op));
        }
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "next", seq, slot);
        Ok(Self::view(seq, slot, &lens, &buffers))
    }

    /// Releases a leased batch, in stream order: the slot is refilled only after
    /// the work enqueued on the consumer's stream so far has completed.
    pub fn release(&self, seq: u64) -> Result<()> {
        if self.is_destroyed() {
            return Err(destroyed());
        }
        let (slot, op) = self.lock_leases().remove(&seq).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidState,
                format!("prefetcher batch {seq} is not leased"),
            )
        })?;
        let ended = op.end();
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "release", seq, slot);
        let mut st = self.lock();
        if !self.is_destroyed() {
            st.free.push_back(slot);
            self.slot_freed.notify_one();
        }
        ended
    }

    /// Graph mode: copies the oldest batch, device to device as a tracked op on
    /// `stream`, into `dst` (one buffer per segment, each at least as large as the
    /// segment's length), and releases it at once in stream order.
    pub fn next_into(
        &self,
        stream: &Arc<Stream>,
        dst: &[&Buffer],
        timeout: Option<Duration>,
    ) -> NextResult<BatchView> {
        if dst.len() != self.capacities.len() {
            return Err(Error::invalid_argument(format!(
                "next_into: {} destination buffers for {} segments",
                dst.len(),
                self.capacities.len()
            ))
            .into());
        }
        for (i, (d, &c)) in dst.iter().zip(&self.capacities).enumerate() {
            if d.size < c {
                return Err(Error::out_of_range(format!(
                    "next_into: destination {i} holds {} bytes, under the segment's capacity {c}",
                    d.size
                ))
                .into());
            }
        }
        let (seq, slot, lens, buffers) = self.take_next(timeout)?;
        let pairs: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| (dst[i], &*buffers.device[i], len))
            .collect();
        let copied = ops::copy_all(stream, &pairs);
        let mut st = self.lock();
        if self.is_destroyed() {
            return Err(destroyed().into());
        }
        let view = Self::view(seq, slot, &lens, &buffers);
        crate::trace::prefetch_slot(&self.copy_streams[0].0, "next_into", seq, slot);
        {
            st.free.push_back(slot);
            self.slot_freed.notify_one();
        }
        copied.map(|()| view).map_err(NextError::from)
    }

    /// Starts `threads` producer threads that fill slots with `fill` until it
    /// reports the end, or until the prefetcher closes.
    pub fn start_producers(self: &Arc<Self>, threads: u32, fill: FillFn) -> Result<()> {
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        if !producers.is_empty() {
            return Err(Error::new(
                ErrorCode::InvalidState,
                "the prefetcher's producers are already running",
            ));
        }
        for i in 0..threads.max(1) {
            let pf = self.clone();
            let fill = fill.clone();
            let h = std::thread::Builder::new()
                .name(format!("sluice-prefetch-{i}"))
                .spawn(move || pf.produce(&*fill))
                .map_err(|e| Error::new(ErrorCode::OutOfMemory, format!("thread spawn: {e}")))?;
            producers.push(h);
        }
        Ok(())
    }

    fn produce(&self, fill: &(dyn Fn(&mut Fill<'_>) -> FillOutcome + Send + Sync)) {
        while let Ok((ticket, view)) = self.acquire(None) {
            let mut lens = vec![0usize; self.capacities.len()];
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fill(&mut Fill {
                    ticket,
                    host: view.host(),
                    len: &mut lens,
                })
            }))
            .unwrap_or_else(|_| FillOutcome::Failed("the fill callback panicked".into()));
            match outcome {
                FillOutcome::Ready => {
                    let _ = self.submit(ticket, &lens);
                }
                FillOutcome::End => {
                    let _ = self.cancel(ticket);
                    self.close_input();
                }
                FillOutcome::Failed(msg) => {
                    let _ = self.fail(
                        ticket,
                        Error::new(
                            ErrorCode::CallbackFailed,
                            format!("prefetcher batch {}: fill failed: {msg}", ticket.seq),
                        ),
                    );
                }
            }
        }
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

    /// Destroys the prefetcher's state at any moment: wakes every blocked producer
    /// and consumer, waits for open fills to be submitted or cancelled (they then
    /// fail), joins the producer threads, ends open leases and frees the memory
    /// (device memory after its outstanding use, in stream order).
    pub fn close(&self) {
        let slots = {
            let mut st = self.lock();
            self.destroyed.store(true, Ordering::Release);
            st.pending.retain(|_, e| matches!(e, Entry::Filling(_)));
            st.free.clear();
            self.slot_freed.notify_all();
            self.batch_ready.notify_all();
            // A producer may still be writing an open fill's pinned memory.
            while !st.pending.is_empty() {
                st = self.slot_freed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            std::mem::take(&mut st.slots)
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::STREAM_NON_BLOCKING;

    #[test]
    fn producers_on_different_threads_copy_on_different_streams() {
        const PER_THREAD: u64 = 64;
        let dev = Device::open_default().unwrap();
        let pf = Prefetcher::create(&dev, 4, &[8]).unwrap();
        assert_eq!(pf.copy_streams.len(), MAX_COPY_STREAMS);
        let producers: Vec<_> = (0..4u8)
            .map(|t| {
                let pf = pf.clone();
                std::thread::spawn(move || {
                    for _ in 0..PER_THREAD {
                        pf.push(&[&[t; 8]], None).unwrap();
                    }
                })
            })
            .collect();
        let s = Stream::create(&dev, STREAM_NON_BLOCKING, 0).unwrap();
        let mut per_thread = [0u64; 4];
        for _ in 0..4 * PER_THREAD {
            let v = pf.next(&s, None).map_err(|e| e.error).unwrap();
            let mut byte = [0u8; 1];
            crate::ops::copy_to_host(&s, &mut byte, &v.buffers[0], 0).unwrap();
            per_thread[byte[0] as usize] += 1;
            pf.release(v.seq).unwrap();
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(per_thread, [PER_THREAD; 4], "every batch arrived once");
        let recorded: Vec<u64> = pf.copy_streams.iter().map(|(s, _)| s.last_seq()).collect();
        assert!(
            recorded.iter().filter(|&&n| n > 0).count() >= 2,
            "four producer threads used one copy stream: {recorded:?}"
        );
        assert!(
            recorded.iter().sum::<u64>() >= 4 * PER_THREAD,
            "{recorded:?}"
        );
        pf.close();
    }
}

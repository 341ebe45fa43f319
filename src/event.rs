//! Events: recordings of pooled events and their recycling.
//!
//! Each stream owns a pool of events. Recording takes an event from the pool and
//! wraps it in a [`RecRef`] (a counted reference, like `Arc<Recording>`) with the
//! stream's next sequence number. The event goes back to the pool only when the
//! last reference drops, so nothing can wait on a recycled event by mistake
//! (MXNet's 64-slot ring ABA cannot happen).

use crate::counters::StreamCounts;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::objlock::{ObjGuard, ObjLock};
use crate::stream::Stream;
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The part of a stream that recordings keep alive: the pool and the clock.
#[repr(C, align(64))]
pub(crate) struct EventPool {
    pub(crate) stream_id: u64,
    /// Highest sequence known complete through a host wait (used to prune, never polled).
    pub(crate) completed: AtomicU64,
    /// Guards the sequence counter and the free lists, so that sequence order
    /// equals recording order on the stream.
    pub(crate) inner: ObjLock<PoolInner>,
    pub(crate) device: Arc<Device>,
    /// Errors reported asynchronously (host callbacks), returned at the next
    /// sync; shared with the device when the stream is destroyed while busy.
    pub(crate) deferred: Arc<Deferred>,
    /// Counted only while counting is on, under `inner` (`crate::counters`); out of
    /// `inner` so that the op path's fields keep to the first cache line.
    pub(crate) counts: StreamCounts,
}

impl EventPool {
    pub(crate) fn new(device: &Arc<Device>, stream_id: u64) -> Arc<EventPool> {
        Arc::new(EventPool {
            device: device.clone(),
            stream_id,
            inner: ObjLock::new(PoolInner {
                seq: 0,
                op_waits: 0,
                free: FreeNodes::EMPTY,
                free_timing: FreeNodes::EMPTY,
                closed: false,
            }),
            completed: AtomicU64::new(0),
            deferred: Arc::default(),
            counts: StreamCounts::default(),
        })
    }

    /// Returns and clears the stream's deferred error (stream sync points).
    pub(crate) fn take_deferred(&self) -> Result<()> {
        self.deferred.take()
    }

    /// Reports the stream's deferred error without clearing it (event and
    /// sync-object waits), so the stream's own next sync still sees it.
    pub(crate) fn peek_deferred(&self) -> Result<()> {
        self.deferred.peek()
    }
}

/// A stream's first error reported asynchronously (a failed host callback, a
/// refused free), kept until a sync point returns it.
#[derive(Default)]
pub(crate) struct Deferred(Mutex<Option<Error>>);

impl Deferred {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Error>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `e` unless an earlier error is kept.
    pub(crate) fn report(&self, e: Error) {
        self.lock().get_or_insert(e);
    }

    /// Returns and clears the error.
    pub(crate) fn take(&self) -> Result<()> {
        self.lock().take().map_or(Ok(()), Err)
    }

    /// Returns the error, keeping it.
    pub(crate) fn peek(&self) -> Result<()> {
        self.lock().as_ref().map_or(Ok(()), |e| Err(e.clone()))
    }
}

pub(crate) struct PoolInner {
    pub(crate) seq: u64,
    /// Waits inserted by library ops, counted when their event is recorded (under
    /// this lock, so the hot path adds no atomic of its own).
    pub(crate) op_waits: u64,
    free: FreeNodes,
    free_timing: FreeNodes,
    /// Set when the stream is gone: recordings dropped later destroy their event.
    closed: bool,
}

impl PoolInner {
    #[inline(always)]
    fn free_list(&mut self, timing: bool) -> &mut FreeNodes {
        if timing {
            &mut self.free_timing
        } else {
            &mut self.free
        }
    }

    /// Free events in the pool (walks the free lists; for counters).
    pub(crate) fn free_events(&self) -> u64 {
        self.free.len() + self.free_timing.len()
    }
}

/// Unreferenced nodes, linked through their `refs` word (unused while free), so a
/// recycled node is the only memory that recording touches besides the pool.
struct FreeNodes(*mut RecNode);

// SAFETY: the nodes are owned by the list and only reached under the pool lock.
unsafe impl Send for FreeNodes {}

impl FreeNodes {
    const EMPTY: FreeNodes = FreeNodes(std::ptr::null_mut());

    #[inline(always)]
    fn push(&mut self, node: Box<RecNode>) {
        node.refs.store(self.0 as usize, Ordering::Relaxed);
        self.0 = Box::into_raw(node);
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<Box<RecNode>> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: a non-null head is a node pushed by `push`, owned by the list.
        let node = unsafe { Box::from_raw(self.0) };
        self.0 = node.refs.load(Ordering::Relaxed) as *mut RecNode;
        node.refs.store(0, Ordering::Relaxed);
        Some(node)
    }

    fn len(&self) -> u64 {
        let mut n = 0;
        let mut p = self.0;
        while !p.is_null() {
            n += 1;
            // SAFETY: the nodes on the list are owned by it; `refs` links the next.
            p = unsafe { &*p }.refs.load(Ordering::Relaxed) as *mut RecNode;
        }
        n
    }
}

impl Drop for FreeNodes {
    fn drop(&mut self) {
        while let Some(node) = self.pop() {
            drop(node);
        }
    }
}

impl EventPool {
    /// Destroys the free events; later recordings destroy theirs when unreferenced.
    /// Breaks the cycle between the pool and its free nodes (which hold the pool).
    pub(crate) fn close(&self) {
        let (a, b) = {
            let mut inner = self.inner.lock();
            inner.closed = true;
            (
                std::mem::replace(&mut inner.free, FreeNodes::EMPTY),
                std::mem::replace(&mut inner.free_timing, FreeNodes::EMPTY),
            )
        };
        drop((a, b));
    }

    /// Records that the stream's work up to `seq` completed.
    pub(crate) fn complete_through(&self, seq: u64) {
        if crate::atomic_max::fetch_max_u64(&self.completed, seq, Ordering::AcqRel) < seq {
            COMPLETIONS.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// One recording of a pooled event on a stream. The stream id and the device are
/// copied from the pool, so the engine reads one cache line per recording.
pub struct Recording {
    pub(crate) pool: Arc<EventPool>,
    pub(crate) raw: u64,
    pub seq: u64,
    stream_id: u64,
    /// The pool's device (kept alive by `pool`).
    device: *const Device,
    /// The capture this recording belongs to, if it was made while capturing.
    capture_id: Option<NonZeroU64>,
    pub timing: bool,
}

// SAFETY: `device` points into the `Arc<Device>` that `pool` keeps alive.
unsafe impl Send for Recording {}
// SAFETY: as above; the pointee is Sync.
unsafe impl Sync for Recording {}

/// Bumped whenever some stream's completed sequence advances (host waits), so the
/// engine prunes completed recordings only when there can be any.
static COMPLETIONS: AtomicU64 = AtomicU64::new(0);

/// The current completion count (see `COMPLETIONS`).
pub(crate) fn completions() -> u64 {
    COMPLETIONS.load(Ordering::Acquire)
}

impl Recording {
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    pub(crate) fn device(&self) -> &Device {
        // SAFETY: see the field.
        unsafe { &*self.device }
    }

    /// The capture this recording was made in, if any.
    pub(crate) fn capture_id(&self) -> Option<u64> {
        self.capture_id.map(NonZeroU64::get)
    }

    pub(crate) fn known_complete(&self) -> bool {
        self.capture_id.is_none() && self.pool.completed.load(Ordering::Acquire) >= self.seq
    }

    /// True when this recording was made inside a graph capture.
    pub fn in_capture(&self) -> bool {
        self.capture_id.is_some()
    }

    /// Refuses a host-side use of a recording made inside a capture, and aborts
    /// that capture.
    fn reject_if_captured(&self, op: &str) -> Result<()> {
        match self.capture_id() {
            Some(cid) => {
                crate::capture::poison(cid, op);
                Err(Error::new(
                    ErrorCode::CaptureUnsupported,
                    format!("{op} is not allowed on an event recorded during a capture"),
                ))
            }
            None => Ok(()),
        }
    }

    /// True once the recorded work completed. Polls the driver; refused for a
    /// recording made inside a capture.
    pub fn query(&self) -> Result<bool> {
        self.reject_if_captured("event query")?;
        if self.known_complete() {
            return Ok(true);
        }
        let done = self.pool.device.backend.event_query(self.raw)?;
        if done {
            self.pool.complete_through(self.seq);
        }
        Ok(done)
    }

    /// Blocks the host until the recorded work completed.
    pub fn synchronize(&self) -> Result<()> {
        self.reject_if_captured("event synchronize")?;
        self.wait_complete()?;
        self.pool.peek_deferred()
    }

    /// Blocks until the recorded work completed; ignores deferred callback errors.
    pub(crate) fn wait_complete(&self) -> Result<()> {
        if !self.known_complete() {
            self.pool.device.backend.event_synchronize(self.raw)?;
            self.pool.complete_through(self.seq);
        }
        Ok(())
    }

    pub fn elapsed_ms(&self, end: &Recording) -> Result<f32> {
        if !self.timing || !end.timing {
            return Err(Error::invalid_argument(
                "elapsed time needs two events recorded with SLUICE_EVENT_TIMING",
            ));
        }
        self.pool.device.backend.event_elapsed_ms(self.raw, end.raw)
    }
}

/// A recording and its reference count. Nodes are recycled with their event: the
/// pool keeps unreferenced nodes and hands them out again, so recording allocates
/// nothing once the pool is warm.
#[doc(hidden)]
#[repr(C, align(64))]
pub struct RecNode {
    refs: AtomicUsize,
    rec: Recording,
}

impl Drop for RecNode {
    fn drop(&mut self) {
        self.rec.pool.device.backend.event_destroy(self.rec.raw);
    }
}

/// A shared reference to one recording (like `Arc<Recording>`). When the last
/// reference drops, the event goes back to its stream's pool.
pub struct RecRef(NonNull<RecNode>);

// SAFETY: the node is shared through an atomic count; Recording is Send + Sync.
unsafe impl Send for RecRef {}
// SAFETY: as above.
unsafe impl Sync for RecRef {}

impl RecRef {
    fn node(&self) -> &RecNode {
        // SAFETY: the node lives while a reference to it exists.
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::Deref for RecRef {
    type Target = Recording;
    fn deref(&self) -> &Recording {
        &self.node().rec
    }
}

impl Clone for RecRef {
    fn clone(&self) -> Self {
        self.node().refs.fetch_add(1, Ordering::Relaxed);
        RecRef(self.0)
    }
}

impl RecRef {
    /// Drops one reference; returns the node when it was the last.
    #[inline(always)]
    fn unref(self) -> Option<Box<RecNode>> {
        let p = self.0;
        std::mem::forget(self);
        // SAFETY: this reference kept the node alive until now.
        let refs = &unsafe { p.as_ref() }.refs;
        if refs.fetch_sub(1, Ordering::Release) != 1 {
            return None;
        }
        // Acquires the other references' drops: a load, not a fence, which
        // ThreadSanitizer does not model (std's `Arc` does the same under it).
        refs.load(Ordering::Acquire);
        // SAFETY: the last reference; the node came from Box::into_raw in `record`.
        Some(unsafe { Box::from_raw(p.as_ptr()) })
    }

    /// Another reference to the node, already counted by `record_in`'s `refs`.
    ///
    /// # Safety
    /// The caller accounts for every reference made this way in that count.
    #[inline(always)]
    pub(crate) unsafe fn dup_counted(&self) -> RecRef {
        RecRef(self.0)
    }
}

/// Returns an unreferenced node to its pool's free list, or destroys its event
/// when the stream is gone.
fn recycle(node: Box<RecNode>) {
    // SAFETY: the node holds the pool; the guard is dropped before the node.
    let pool = unsafe { &*Arc::as_ptr(&node.rec.pool) };
    let mut inner = pool.inner.lock();
    if inner.closed {
        drop(inner);
        drop(node);
    } else {
        inner.free_list(node.rec.timing).push(node);
    }
}

impl Drop for RecRef {
    fn drop(&mut self) {
        if let Some(node) = RecRef(self.0).unref() {
            recycle(node);
        }
    }
}

/// Publication of an op's recording while the recording stream's pool lock is
/// still held: recordings that die there go straight back to that pool's free list;
/// nodes of other pools are recycled after the lock is released.
pub(crate) struct Publish<'a> {
    pool: *const EventPool,
    inner: Option<ObjGuard<'a, PoolInner>>,
    /// Inline for a few nodes: publishing allocates nothing.
    /// Dropped by hand ([`Publish::recycle_others`]): the common publication has
    /// none and pays no drop.
    others: std::mem::ManuallyDrop<smallvec::SmallVec<[Box<RecNode>; 4]>>,
    /// The last reference released, held back with `held_extra` more to the same
    /// node: an op's objects usually all drop the same earlier recording, and one
    /// `fetch_sub` then counts them all.
    held: Option<RecRef>,
    held_extra: u32,
}

impl<'a> Publish<'a> {
    #[inline(always)]
    pub(crate) fn new(stream: &'a Stream, inner: ObjGuard<'a, PoolInner>) -> Self {
        Publish {
            pool: Arc::as_ptr(&stream.pool),
            inner: Some(inner),
            others: std::mem::ManuallyDrop::new(smallvec::SmallVec::new()),
            held: None,
            held_extra: 0,
        }
    }

    /// Publication without the push lock: dead nodes are recycled at the end.
    #[inline(always)]
    pub(crate) fn unlocked() -> Self {
        Publish {
            pool: std::ptr::null(),
            inner: None,
            others: std::mem::ManuallyDrop::new(smallvec::SmallVec::new()),
            held: None,
            held_extra: 0,
        }
    }

    /// Drops a replaced reference (counted with the ones before it to the same
    /// node, dropped at the latest when the publication ends).
    #[inline(always)]
    pub(crate) fn release(&mut self, r: RecRef) {
        if let Some(h) = &self.held {
            if h.0 == r.0 {
                std::mem::forget(r);
                self.held_extra += 1;
                return;
            }
        }
        self.flush_held();
        self.held = Some(r);
    }

    /// Drops the references held back by [`Publish::release`].
    #[inline(always)]
    fn flush_held(&mut self) {
        let Some(r) = self.held.take() else { return };
        let extra = std::mem::replace(&mut self.held_extra, 0);
        if extra != 0 {
            // Leaves at least the one `r` holds.
            r.node().refs.fetch_sub(extra as usize, Ordering::Release);
        }
        self.release_now(r);
    }

    #[inline(always)]
    fn release_now(&mut self, r: RecRef) {
        let Some(node) = r.unref() else { return };
        match &mut self.inner {
            Some(inner) if std::ptr::eq(Arc::as_ptr(&node.rec.pool), self.pool) => {
                inner.free_list(node.rec.timing).push(node)
            }
            _ => self.others.push(node),
        }
    }
}

impl Publish<'_> {
    #[cold]
    fn recycle_others(&mut self) {
        for node in self.others.drain(..) {
            recycle(node);
        }
        // SAFETY: dropped once, here, at the end of the publication.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.others) };
    }
}

impl Drop for Publish<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.flush_held();
        drop(self.inner.take());
        if !self.others.is_empty() || self.others.spilled() {
            self.recycle_others();
        }
    }
}

// SAFETY: a Box round trip through a non-null pointer.
unsafe impl crate::handle::Shared for RecRef {
    type Target = RecNode;
    fn into_raw(self) -> *const RecNode {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }
    unsafe fn from_raw(p: *const RecNode) -> Self {
        // SAFETY: p came from into_raw, so it is non-null.
        RecRef(unsafe { NonNull::new_unchecked(p.cast_mut()) })
    }
}

impl Stream {
    /// Records a pooled event whose node starts with `refs` references and adds
    /// `op_waits` to the stream's wait count. The caller holds the push lock, so
    /// that recordings released while publishing go back to the free list without
    /// taking it again.
    #[inline(always)]
    pub(crate) fn record_in(
        &self,
        inner: &mut PoolInner,
        timing: bool,
        refs: usize,
        op_waits: u64,
    ) -> Result<RecRef> {
        let backend = &self.device.backend;
        let capture_id = self.capture_id();
        inner.op_waits += op_waits;
        let mut node = match inner.free_list(timing).pop() {
            Some(n) => n,
            None => {
                self.stats.events_created.fetch_add(1, Ordering::Relaxed);
                Box::new(RecNode {
                    refs: AtomicUsize::new(0),
                    rec: Recording {
                        pool: self.pool.clone(),
                        raw: backend.event_create(timing)?,
                        seq: 0,
                        stream_id: self.id,
                        device: Arc::as_ptr(&self.device),
                        capture_id: None,
                        timing,
                    },
                })
            }
        };
        if let Err(e) = self.device.backend.event_record(node.rec.raw, self.raw) {
            inner.free_list(timing).push(node);
            return Err(e);
        }
        inner.seq += 1;
        node.rec.seq = inner.seq;
        node.rec.capture_id = capture_id.and_then(NonZeroU64::new);
        *node.refs.get_mut() = refs;
        // SAFETY: Box::into_raw is never null.
        Ok(RecRef(unsafe {
            NonNull::new_unchecked(Box::into_raw(node))
        }))
    }
}

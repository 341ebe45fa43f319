//! Streams and their event pools.
//!
//! Each stream owns a pool of events. Recording takes an event from the pool and
//! wraps it in an `Arc<Recording>` with the stream's next sequence number. The event
//! goes back to the pool only when the last `Arc` drops, so nothing can wait on a
//! recycled event by mistake (MXNet's 64-slot ring ABA cannot happen).

use crate::backend::HostFn;
use crate::device::{next_id, Device};
use crate::error::{Error, ErrorCode, Result};
use crate::graph::Capture;
use crate::objlock::{ObjGuard, ObjLock};
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Per-stream counters, for tests and tuning.
#[derive(Default, Debug)]
pub struct StreamStats {
    /// `cuStreamWaitEvent`s other than those of library ops (foreign ops, explicit
    /// event waits); [`Stream::waits`] gives the total.
    pub waits: AtomicU64,
    /// Events created (pool misses).
    pub events_created: AtomicU64,
    /// Host synchronisations done by `SLUICE_ENGINE=sync`.
    pub engine_syncs: AtomicU64,
}

/// The part of a stream that recordings keep alive: the pool and the clock.
#[repr(C, align(64))]
pub(crate) struct EventPool {
    pub(crate) stream_id: u64,
    /// Highest sequence known complete through a host wait (used to prune, never polled).
    pub(crate) completed: AtomicU64,
    /// Guards the sequence counter and the free lists, so that sequence order
    /// equals recording order on the stream.
    inner: ObjLock<PoolInner>,
    pub(crate) device: Arc<Device>,
    /// Errors reported asynchronously (host callbacks), returned at the next sync.
    pub(crate) deferred: Mutex<Option<Error>>,
}

impl EventPool {
    /// Returns and clears the stream's deferred error (stream sync points).
    pub(crate) fn take_deferred(&self) -> Result<()> {
        match self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reports the stream's deferred error without clearing it (event and
    /// sync-object waits), so the stream's own next sync still sees it.
    pub(crate) fn peek_deferred(&self) -> Result<()> {
        match self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

pub(crate) struct PoolInner {
    seq: u64,
    /// Waits inserted by library ops, counted when their event is recorded (under
    /// this lock, so the hot path adds no atomic of its own).
    op_waits: u64,
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
    fn close(&self) {
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
    fn complete_through(&self, seq: u64) {
        if self.completed.fetch_max(seq, Ordering::AcqRel) < seq {
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
                crate::graph::poison(cid, op);
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
        if unsafe { p.as_ref() }.refs.fetch_sub(1, Ordering::Release) != 1 {
            return None;
        }
        std::sync::atomic::fence(Ordering::Acquire);
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
#[allow(clippy::vec_box)] // the boxed nodes go back to free lists as they are
pub(crate) struct Publish<'a> {
    pool: *const EventPool,
    inner: Option<ObjGuard<'a, PoolInner>>,
    others: Vec<Box<RecNode>>,
}

impl<'a> Publish<'a> {
    #[inline(always)]
    pub(crate) fn new(stream: &'a Stream, inner: ObjGuard<'a, PoolInner>) -> Self {
        Publish {
            pool: Arc::as_ptr(&stream.pool),
            inner: Some(inner),
            others: Vec::new(),
        }
    }

    /// Drops a replaced reference.
    #[inline(always)]
    pub(crate) fn release(&mut self, r: RecRef) {
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
    }
}

impl Drop for Publish<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        drop(self.inner.take());
        if !self.others.is_empty() {
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

// The fields every op reads come first, in one cache line of their own.
#[repr(C, align(64))]
pub struct Stream {
    pub(crate) raw: u64,
    pub id: u64,
    pub(crate) pool: Arc<EventPool>,
    pub(crate) device: Arc<Device>,
    /// Fast check for "is this stream capturing"; the capture itself is in `capture`.
    pub(crate) capturing: AtomicBool,
    /// True on the stream that began the current capture.
    capture_origin: AtomicBool,
    owned: bool,
    /// What `raw()` exports: the caller's handle for adopted streams.
    exported: u64,
    pub stats: StreamStats,
    pub(crate) capture: Mutex<Option<Arc<Capture>>>,
    /// Label of the most recent labelled operation, for fault reports.
    label: Mutex<Option<Arc<str>>>,
    /// Freed device blocks (size, address) reusable in this stream's order.
    block_cache: Mutex<Vec<(usize, u64)>>,
    block_cache_limit: std::sync::atomic::AtomicUsize,
}

/// Bounds of a stream's cache of freed device blocks.
pub(crate) const BLOCK_CACHE_MAX_BLOCKS: usize = 16;
pub(crate) const BLOCK_CACHE_MAX_BYTES: usize = 64 << 20;

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream #{}", self.id)
    }
}

/// `SLUICE_STREAM_NON_BLOCKING`: the stream does not synchronise with the legacy default stream.
pub const STREAM_NON_BLOCKING: u32 = 1;

impl Stream {
    fn wrap(device: &Arc<Device>, raw: u64, exported: u64, owned: bool) -> Arc<Stream> {
        let id = next_id();
        let s = Arc::new(Stream {
            device: device.clone(),
            raw,
            exported,
            owned,
            id,
            pool: Arc::new(EventPool {
                device: device.clone(),
                stream_id: id,
                inner: ObjLock::new(PoolInner {
                    seq: 0,
                    op_waits: 0,
                    free: FreeNodes::EMPTY,
                    free_timing: FreeNodes::EMPTY,
                    closed: false,
                }),
                completed: AtomicU64::new(0),
                deferred: Mutex::new(None),
            }),
            stats: StreamStats::default(),
            capturing: AtomicBool::new(false),
            capture: Mutex::new(None),
            capture_origin: AtomicBool::new(false),
            label: Mutex::new(None),
            block_cache: Mutex::new(Vec::new()),
            block_cache_limit: std::sync::atomic::AtomicUsize::new(BLOCK_CACHE_MAX_BYTES),
        });
        device.register_stream(&s);
        s
    }

    /// Creates a stream. `flags` is a set of `STREAM_*` bits; the priority is
    /// clamped into the device's range, as CUDA does.
    pub fn create(device: &Arc<Device>, flags: u32, priority: i32) -> Result<Arc<Stream>> {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(Error::invalid_argument(format!(
                "unknown stream flags 0x{:x}",
                flags & !STREAM_NON_BLOCKING
            )));
        }
        let raw = device
            .backend
            .stream_create(flags & STREAM_NON_BLOCKING != 0, priority)?;
        Ok(Stream::wrap(device, raw, raw, true))
    }

    /// Adopts a foreign stream without owning it; destroying the sluice stream
    /// leaves the foreign one alone.
    pub fn wrap_external(device: &Arc<Device>, raw: u64) -> Result<Arc<Stream>> {
        let adopted = device.backend.stream_adopt_external(raw)?;
        Ok(Stream::wrap(device, adopted, raw, false))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The `CUstream` (an opaque pointer on host) for foreign work. For an adopted
    /// stream this is the caller's handle, not the backend's own reference.
    #[allow(clippy::misnamed_getters)]
    pub fn raw(&self) -> u64 {
        self.exported
    }

    pub fn is_owned(&self) -> bool {
        self.owned
    }

    pub fn set_label(&self, label: Option<&str>) {
        *self.label.lock().unwrap_or_else(|p| p.into_inner()) = label.map(Arc::from);
    }

    fn describe(&self) -> String {
        match &*self.label.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(l) => format!("stream #{} (last operation '{l}')", self.id),
            None => format!("stream #{}", self.id),
        }
    }

    #[inline(always)]
    pub fn is_capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    /// The capture this stream takes part in, if any.
    #[inline(always)]
    pub(crate) fn current_capture(&self) -> Option<Arc<Capture>> {
        if !self.is_capturing() {
            return None;
        }
        self.capture_slow()
    }

    #[cold]
    fn capture_slow(&self) -> Option<Arc<Capture>> {
        self.capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_capture_origin(&self, on: bool) {
        self.capture_origin.store(on, Ordering::Release);
    }

    pub(crate) fn is_capture_origin(&self) -> bool {
        self.capture_origin.load(Ordering::Acquire)
    }

    /// Sequence number of the newest recording: also the number of events recorded.
    pub fn last_seq(&self) -> u64 {
        self.push_lock().seq
    }

    #[inline(always)]
    pub(crate) fn capture_id(&self) -> Option<u64> {
        if !self.is_capturing() {
            return None;
        }
        self.capture_id_slow()
    }

    #[cold]
    fn capture_id_slow(&self) -> Option<u64> {
        self.capture_slow().map(|c| c.id)
    }

    /// Fails with `CaptureUnsupported` when the stream is capturing.
    pub(crate) fn reject_in_capture(&self, op: &str) -> Result<()> {
        if let Some(cap) = self.current_capture() {
            cap.ctl().poisoned.get_or_insert_with(|| op.to_string());
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                format!("{op} is not allowed while {self:?} is capturing a graph"),
            ));
        }
        Ok(())
    }

    fn take_deferred(&self) -> Result<()> {
        self.pool.take_deferred().map_err(|e| self.fault(e))
    }

    /// Maps a driver error seen at a sync point to a report naming this stream.
    fn fault(&self, e: Error) -> Error {
        e.context(self.describe())
    }

    /// Records a pooled event at the current end of the stream.
    #[inline(always)]
    pub fn record(&self, timing: bool) -> Result<RecRef> {
        let mut push = self.push_lock();
        self.record_in(&mut push, timing, 1, 0)
    }

    /// The stream's push lock (the event pool's lock). Everything sluice enqueues on
    /// the stream is enqueued under it, one op's waits, work and recording together.
    /// The CUDA driver does not keep stream order when one thread launches a graph
    /// on a stream while another enqueues on it (docs/decisions.md, "Stream order
    /// and graph launches"). Lock order: sync objects, then one push lock.
    #[inline(always)]
    pub(crate) fn push_lock(&self) -> ObjGuard<'_, PoolInner> {
        self.pool.inner.lock()
    }

    /// Runs `enqueue` (which pushes work on this stream) under the push lock.
    #[inline(always)]
    pub(crate) fn push<R>(&self, enqueue: impl FnOnce() -> Result<R>) -> Result<R> {
        let _push = self.push_lock();
        enqueue()
    }

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
        if let Err(e) = self.drv_event_record(node.rec.raw) {
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

    /// Records `event` on this stream (the op path's driver call).
    #[inline(always)]
    fn drv_event_record(&self, event: u64) -> Result<()> {
        self.device.backend.event_record(event, self.raw)
    }

    /// Launches a kernel on this stream (the op path's driver call).
    ///
    /// # Safety
    /// As for [`crate::backend::Backend::launch_kernel`].
    #[inline(always)]
    pub(crate) unsafe fn drv_launch_kernel(
        &self,
        func: u64,
        dims: crate::backend::LaunchDims,
        args: *mut *mut std::ffi::c_void,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            self.device
                .backend
                .launch_kernel(func, dims, args, self.raw)
        }
    }

    /// Waits inserted on this stream: by the engine and by explicit event waits.
    pub fn waits(&self) -> u64 {
        let op = self.pool.inner.lock().op_waits;
        self.stats.waits.load(Ordering::Relaxed) + op
    }

    /// Makes this stream wait on a recording, with no host block. Waiting on an event
    /// recorded inside a capture forks this stream into that capture, or joins it back.
    #[inline(always)]
    pub fn wait_event(self: &Arc<Self>, rec: &Recording) -> Result<()> {
        self.wait(rec)?;
        crate::graph::note_wait(self, rec);
        Ok(())
    }

    /// Makes this stream wait on a recording, with no host block.
    #[inline(always)]
    pub(crate) fn wait(&self, rec: &Recording) -> Result<()> {
        self.push(|| self.wait_pushed(rec))?;
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes this stream wait on a recording; the caller holds the push lock and
    /// counts the wait.
    #[inline(always)]
    pub(crate) fn wait_pushed(&self, rec: &Recording) -> Result<()> {
        self.device.same_device(rec.device(), "the event")?;
        self.device.backend.stream_wait_event(self.raw, rec.raw)
    }

    /// True when all work enqueued so far completed.
    pub fn query(&self) -> Result<bool> {
        self.reject_in_capture("stream query")?;
        self.take_deferred()?;
        self.device
            .backend
            .stream_query(self.raw)
            .map_err(|e| self.fault(e))
    }

    /// Blocks until all work enqueued so far completed; reports deferred errors.
    pub fn synchronize(&self) -> Result<()> {
        self.reject_in_capture("stream synchronize")?;
        let seq = self.last_seq();
        self.device
            .backend
            .stream_synchronize(self.raw)
            .map_err(|e| self.fault(e))?;
        self.pool.complete_through(seq);
        self.take_deferred()
    }

    /// Enqueues a host function in stream order. It must not call CUDA.
    pub fn launch_host_fn(&self, f: HostFn) -> Result<()> {
        self.push(|| self.push_host_fn(f))
    }

    /// [`Stream::launch_host_fn`] for a caller holding the push lock.
    pub(crate) fn push_host_fn(&self, f: HostFn) -> Result<()> {
        self.device.backend.launch_host_fn(self.raw, f)
    }

    /// A host-function body that runs a C callback and stores a failure as a
    /// deferred error of this stream.
    pub(crate) fn callback_job(&self, call: impl Fn() -> i32 + Send + Sync + 'static) -> HostFn {
        let pool = self.pool.clone();
        Box::new(move || {
            let rc = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&call));
            // In a graph replay, report on the stream that launched the graph.
            let target = REPLAY_TARGET
                .with(|t| t.borrow().clone())
                .unwrap_or_else(|| pool.clone());
            let id = target.stream_id;
            let err = match rc {
                Ok(0) => None,
                Ok(code) => Some(Error::new(
                    ErrorCode::CallbackFailed,
                    format!("host callback on stream #{id} returned {code}"),
                )),
                Err(_) => Some(Error::new(
                    ErrorCode::CallbackFailed,
                    format!("host callback on stream #{id} panicked"),
                )),
            };
            if let Some(e) = err {
                target
                    .deferred
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            }
        })
    }
}

thread_local! {
    /// While a worker replays a graph: the launching stream's pool, which receives
    /// the errors of replayed host callbacks. Set and cleared by that stream's own
    /// host functions around the launch; never seen by callers.
    static REPLAY_TARGET: std::cell::RefCell<Option<Arc<EventPool>>> =
        const { std::cell::RefCell::new(None) };
}

impl Stream {
    /// Enqueues host functions around a graph launch so that replayed callbacks
    /// report their failures on this stream. The caller holds the push lock.
    pub(crate) fn around_replay(&self, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let pool = self.pool.clone();
        self.push_host_fn(Box::new(move || {
            REPLAY_TARGET.with(|t| *t.borrow_mut() = Some(pool.clone()))
        }))?;
        let r = launch();
        self.push_host_fn(Box::new(|| REPLAY_TARGET.with(|t| *t.borrow_mut() = None)))?;
        r
    }

    /// Takes a cached block of exactly `size` bytes, freed earlier in this stream's order.
    pub(crate) fn take_block(&self, size: usize) -> Option<u64> {
        let mut c = self.block_cache.lock().unwrap_or_else(|p| p.into_inner());
        let i = c.iter().position(|b| b.0 == size)?;
        Some(c.swap_remove(i).1)
    }

    /// Keeps a block whose free is ordered on this stream; false when the cache is full.
    pub(crate) fn cache_block(&self, size: usize, addr: u64) -> bool {
        let mut c = self.block_cache.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: usize = c.iter().map(|b| b.0).sum();
        let limit = self.block_cache_limit.load(Ordering::Relaxed);
        if c.len() >= BLOCK_CACHE_MAX_BLOCKS || bytes + size > limit {
            return false;
        }
        c.push((size, addr));
        true
    }

    /// Sets the byte bound of the block cache (0 disables it) and trims it.
    pub fn set_block_cache_limit(&self, bytes: usize) -> Result<()> {
        self.block_cache_limit.store(bytes, Ordering::Relaxed);
        self.trim_block_cache()
    }

    /// Returns every cached block to the driver's pool, in stream order.
    pub fn trim_block_cache(&self) -> Result<()> {
        let blocks =
            std::mem::take(&mut *self.block_cache.lock().unwrap_or_else(|p| p.into_inner()));
        self.push(|| {
            for (_, addr) in blocks {
                self.device.backend.mem_free_async(addr, self.raw)?;
            }
            Ok(())
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.trim_block_cache();
        self.pool.close();
        if self.owned {
            self.device.backend.stream_destroy(self.raw);
        } else {
            self.device.backend.stream_release_external(self.raw);
        }
    }
}

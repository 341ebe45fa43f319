//! Streams: creation and adoption, the push lock under which everything is
//! enqueued, waits and records, host synchronisation, labels and deferred errors.
//! A stream's recordings and their event pool are in [`crate::event`].

use crate::backend::HostFn;
use crate::capture::CaptureSlot;
use crate::device::{next_id, Device};
use crate::error::{Error, ErrorCode, Result};
use crate::event::{EventPool, PoolInner, RecRef, Recording};
use crate::memory::block_cache::BlockCache;
use crate::objlock::ObjGuard;
use crate::trace::{self, OpKind, Waited};
use std::sync::atomic::{AtomicU64, Ordering};
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

// The fields every op reads come first, in one cache line of their own.
#[repr(C, align(64))]
pub struct Stream {
    pub(crate) raw: u64,
    pub id: u64,
    pub(crate) pool: Arc<EventPool>,
    pub(crate) device: Arc<Device>,
    owned: bool,
    /// Its slot number, unique among live streams (given back on drop); its reader
    /// slot in every sync object is this modulo `sync::READER_SLOTS`.
    slot_number: u32,
    /// What `raw()` exports: the caller's handle for adopted streams.
    exported: u64,
    /// The capture this stream takes part in, if any (its `active` flag, which
    /// every op reads, ends the first cache line).
    pub(crate) capture: CaptureSlot,
    pub stats: StreamStats,
    /// Label of the most recent labelled operation, for fault reports.
    label: Mutex<Option<Arc<str>>>,
    /// Bumped by every `set_label`: traced ops read the label only when it moved.
    label_version: AtomicU64,
    /// Freed device blocks (size, address) reusable in this stream's order.
    pub(crate) block_cache: BlockCache,
}

// The capture flag that every op reads shares the first line with the fields above.
const _: () = assert!(std::mem::offset_of!(Stream, capture) < 64);

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
        let slot_number = crate::sync::take_slot_number();
        let s = Arc::new(Stream {
            slot_number,
            device: device.clone(),
            raw,
            exported,
            owned,
            id,
            pool: EventPool::new(device, id),
            stats: StreamStats::default(),
            capture: CaptureSlot::default(),
            label: Mutex::new(None),
            label_version: AtomicU64::new(0),
            block_cache: BlockCache::default(),
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
    ///
    /// A raw stream that another live sluice stream is capturing is refused: the
    /// driver would capture the new handle's work while its tracking took it as
    /// run (see `capture::capture_begin`).
    pub fn wrap_external(device: &Arc<Device>, raw: u64) -> Result<Arc<Stream>> {
        if let Some(s) = device.stream_on_raw(raw, 0, |s| s.is_capturing()) {
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                format!("the raw stream of {s:?} is capturing a graph: wrap it after the capture"),
            ));
        }
        let adopted = device.backend.stream_adopt_external(raw)?;
        Ok(Stream::wrap(device, adopted, raw, false))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The reader slot this stream reads sync objects through.
    #[inline(always)]
    pub(crate) fn reader_slot(&self) -> usize {
        self.slot_number as usize % crate::sync::READER_SLOTS
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
        self.label_version.fetch_add(1, Ordering::Release);
    }

    /// How many times the label was set (read by traced ops).
    pub(crate) fn label_version(&self) -> u64 {
        self.label_version.load(Ordering::Acquire)
    }

    /// The stream's label, if set.
    pub fn label(&self) -> Option<Arc<str>> {
        self.label.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn describe(&self) -> String {
        match &*self.label.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(l) => format!("stream #{} (last operation '{l}')", self.id),
            None => format!("stream #{}", self.id),
        }
    }

    /// Sequence number of the newest recording: also the number of events recorded.
    pub fn last_seq(&self) -> u64 {
        self.push_lock().seq
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
        let obs = trace::observe();
        let rec = self.record_in(&mut push, timing, 1, 0)?;
        if obs.tracing() {
            trace::op_done(
                &mut push,
                self,
                obs,
                OpKind::Record,
                Waited::None,
                Some(&rec),
            );
        }
        Ok(rec)
    }

    /// The stream's push lock (the event pool's lock). Everything sluice enqueues on
    /// the stream is enqueued under it, one op's waits, work and recording together.
    /// The CUDA driver does not keep stream order when one thread launches a graph
    /// on a stream while another enqueues on it (docs/decisions.md, "Stream order
    /// and graph launches"). Lock order: sync objects, then one push lock (a
    /// capture's end alone holds several, in stream id order: `capture_end`).
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

    /// Launches a kernel on this stream (the op path's driver call).
    ///
    /// # Safety
    /// As for [`crate::backend::ModuleApi::launch_kernel`].
    #[inline(always)]
    pub(crate) unsafe fn drv_launch_kernel(
        &self,
        func: u64,
        dims: crate::backend::LaunchDims,
        programmatic: bool,
        args: *mut *mut std::ffi::c_void,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            self.device
                .backend
                .launch_kernel(func, dims, programmatic, args, self.raw)
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
        crate::capture::check_wait(self, rec)?;
        crate::capture::wait(self, rec)
    }

    /// Makes this stream wait on a recording, with no host block.
    #[inline(always)]
    pub(crate) fn wait(&self, rec: &Recording) -> Result<()> {
        let mut push = self.push_lock();
        self.wait_counted(&mut push, rec)
    }

    /// As `wait`, with the push lock already held.
    #[inline(always)]
    pub(crate) fn wait_counted(&self, push: &mut PoolInner, rec: &Recording) -> Result<()> {
        let obs = trace::observe();
        self.wait_pushed(rec)?;
        // Counted under the lock it already holds: no atomic.
        push.op_waits += 1;
        if obs.tracing() {
            let kind = OpKind::WaitEvent;
            trace::op_done(push, self, obs, kind, Waited::One(rec), None);
        }
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

    /// Like `synchronize`, but a stream capturing a graph is skipped (`Ok`) rather
    /// than refused, and its capture is left alone (`Device::wait_all`).
    pub(crate) fn synchronize_unless_capturing(&self) -> Result<()> {
        // Checked and recorded under the push lock, which a capture's begin (and a
        // fork's wait) also takes: a capture that another thread begins meanwhile is
        // neither synchronized on (an error) nor invalidated by it. The wait itself
        // runs with no lock held.
        let end = {
            let mut push = self.push_lock();
            if self.is_capturing() || self.device.backend.capture_active(self.raw)? {
                return Ok(());
            }
            self.record_in(&mut push, false, 1, 0)?
        };
        end.wait_complete().map_err(|e| self.fault(e))?;
        self.take_deferred()
    }

    /// Blocks until all work enqueued so far completed; reports deferred errors.
    pub fn synchronize(&self) -> Result<()> {
        self.reject_in_capture("stream synchronize")?;
        self.synchronize_now()
    }

    fn synchronize_now(&self) -> Result<()> {
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
            // In a graph replay, report on the stream that launched the graph. A
            // callback queued directly reports on its own stream, also when it runs
            // inside another handle's replay bracket on a shared worker (host,
            // `wrap_external`).
            let replay = crate::backend::in_graph_replay()
                .then(|| REPLAY_TARGET.with(|t| t.borrow().clone()))
                .flatten();
            let target = replay.as_ref().unwrap_or(&pool);
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
                target.deferred.report(e);
            }
        })
    }
}

thread_local! {
    /// While a worker replays a graph: the launching stream's pool, which receives
    /// the errors of replayed host callbacks (those that run as graph nodes,
    /// `backend::in_graph_replay`). Set and cleared by that stream's own host
    /// functions around the launch (`around_replay`); never seen by callers.
    static REPLAY_TARGET: std::cell::RefCell<Option<Arc<EventPool>>> =
        const { std::cell::RefCell::new(None) };
}

impl Stream {
    /// Enqueues host functions around a graph launch so that replayed callbacks
    /// report their failures on this stream. The caller holds the push lock.
    ///
    /// Handles that share a raw stream (`wrap_external`) share its worker on host,
    /// and each has its own push lock: the bracket is enqueued under its raw
    /// stream's bracket lock too, so that another handle's bracket cannot open or
    /// close between this one's halves.
    pub(crate) fn around_replay(&self, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let bracket = bracket_lock(self.raw());
        let pool = self.pool.clone();
        self.push_host_fn(Box::new(move || {
            REPLAY_TARGET.with(|t| *t.borrow_mut() = Some(pool.clone()))
        }))?;
        let launched = launch();
        let cleared =
            self.push_host_fn(Box::new(|| REPLAY_TARGET.with(|t| *t.borrow_mut() = None)));
        drop(bracket);
        launched?;
        if let Err(e) = cleared {
            // The graph is queued but its op will not be recorded: it completes
            // before the error returns, so that nothing races its writes.
            let _ = self.device.backend.stream_synchronize(self.raw);
            return Err(e);
        }
        Ok(())
    }
}

/// Takes a dropped stream out of its device's list as the drop ends (unwinding
/// too), after its final mark was listed.
struct Unregister<'a>(&'a Stream);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.device.unregister_stream(self.0);
    }
}

/// The lock that keeps one replay bracket's enqueues together on raw stream `raw`
/// (one of a few stripes, shared by every handle of that raw stream). Taken under a
/// push lock and held across the bracket's backend calls only, which take the
/// backend's own locks, never a push lock or another stripe.
fn bracket_lock(raw: u64) -> std::sync::MutexGuard<'static, ()> {
    const STRIPES: usize = 16;
    static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];
    // The raw handles are pointers: drop their alignment bits.
    let i = ((raw >> 6) ^ (raw >> 12)) as usize % STRIPES;
    LOCKS[i].lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _last = Unregister(self);
        let _ = self.trim_block_cache();
        self.pool.close();
        self.retire_counts();
        trace::stream_gone(self.id);
        self.device.retire_stream(self.raw, &self.pool.deferred);
        if self.owned {
            self.device.backend.stream_destroy(self.raw);
        } else {
            self.device.backend.stream_release_external(self.raw);
        }
        crate::sync::give_slot_number(self.slot_number);
    }
}

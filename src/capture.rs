//! Graph capture: which streams take part in a capture, the operations it refuses,
//! and the capture's own copy of the dependency state of every object it touches
//! (captured ops are ordered among themselves there and never change the objects'
//! real state). Ending a capture yields a [`Graph`].

use crate::backend::CaptureMode;
use crate::device::next_id;
use crate::engine;
use crate::error::{Error, ErrorCode, Result};
use crate::event::{RecRef, Recording};
use crate::graph::{Graph, KeepAlive};
use crate::stream::Stream;
use crate::sync::{Access, ObjRef, SyncObject, SyncState};
use crate::trace::{self, OpKind, Waited};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

/// A stream's part in captures.
#[derive(Default)]
// `active` first: the stream keeps it on the line of the fields every op reads.
#[repr(C)]
pub(crate) struct CaptureSlot {
    /// Fast check for "is this stream capturing"; the capture itself is `current`.
    active: AtomicBool,
    /// True on the stream that began the current capture.
    origin: AtomicBool,
    current: Mutex<Option<Arc<Capture>>>,
    /// A recording made outside the capture just before the stream joined it:
    /// everything the stream ran before the capture precedes it.
    entry: Mutex<Option<RecRef>>,
}

impl CaptureSlot {
    /// Joins `cap` after the recording `entry`; the caller holds the stream's
    /// push lock, so that an op that took the real path and then takes the lock
    /// sees the stream capturing.
    fn join(&self, cap: Arc<Capture>, entry: RecRef) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(cap);
        *self.entry.lock().unwrap_or_else(|p| p.into_inner()) = Some(entry);
        self.active.store(true, Ordering::Release);
    }

    /// Leaves the capture; the caller holds the stream's push lock (as `join`),
    /// so that an op that checked its route under that lock finished inside the
    /// capture, and one that takes the lock later finds the stream out of it.
    /// Returns the capture and the entry recording, for the caller to drop once it
    /// has let go of the push lock: dropping a recording may take it.
    #[must_use]
    fn leave(&self) -> (Option<Arc<Capture>>, Option<RecRef>) {
        let cap = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.active.store(false, Ordering::Release);
        let entry = self.entry.lock().unwrap_or_else(|p| p.into_inner()).take();
        (cap, entry)
    }
}

impl Stream {
    #[inline(always)]
    pub fn is_capturing(&self) -> bool {
        self.capture.active.load(Ordering::Acquire)
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
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_capture_origin(&self, on: bool) {
        self.capture.origin.store(on, Ordering::Release);
    }

    pub(crate) fn is_capture_origin(&self) -> bool {
        self.capture.origin.load(Ordering::Acquire)
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

    /// A recording that follows all of this stream's work outside captures: a new
    /// one, or while the stream captures, the one made as it joined the capture.
    /// A fresh allocation's point, or a foreign op's work enqueued before the
    /// capture, is before it.
    pub(crate) fn mark_outside_capture(&self) -> Result<RecRef> {
        let mut push = self.push_lock();
        if self.is_capturing() {
            if let Some(m) = &*self.capture.entry.lock().unwrap_or_else(|p| p.into_inner()) {
                return Ok(m.clone());
            }
        }
        self.record_in(&mut push, false, 1, 0)
    }

    /// Under the push lock: an op routed as captured (or not) finds the stream
    /// so, or fails with nothing enqueued (another thread forked the stream into
    /// a capture, by a wait on a captured event, or ended its capture, after the op
    /// was routed).
    #[inline(always)]
    pub(crate) fn check_routed(&self, captured: bool) -> Result<()> {
        if self.is_capturing() == captured {
            return Ok(());
        }
        Err(self.routed_apart(captured))
    }

    #[cold]
    #[inline(never)]
    fn routed_apart(&self, captured: bool) -> Error {
        Error::new(
            ErrorCode::InvalidState,
            format!(
                "{self:?} {} a graph capture on another thread while this op was issued on \
                 it; nothing was enqueued (order the {} and the op on one thread)",
                if captured { "left" } else { "joined" },
                if captured { "capture's end" } else { "fork" }
            ),
        )
    }

    /// Fails with `CaptureUnsupported` when the stream is capturing.
    pub(crate) fn reject_in_capture(&self, op: &str) -> Result<()> {
        if let Some(cap) = self.current_capture() {
            cap.poison(op);
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                format!("{op} is not allowed while {self:?} is capturing a graph"),
            ));
        }
        Ok(())
    }
}

/// State shared by every stream taking part in one capture.
pub struct Capture {
    pub id: u64,
    /// Each touched object with the capture's own copy of its dependency state:
    /// captured ops order themselves against each other there and never touch the
    /// objects' real state, which ops outside the capture keep using.
    touched: Mutex<Vec<Touched>>,
    /// Set under `touched` as the end releases the objects: an op routed into the
    /// capture that takes `touched` after that adds no entry (nothing would
    /// release it) and fails as one that finds its stream out of the capture.
    released: AtomicBool,
    ctl: Mutex<CaptureCtl>,
}

struct Touched {
    obj: Arc<SyncObject>,
    /// Recordings of the captured ops only.
    shadow: SyncState,
    written: bool,
}

impl Capture {
    pub(crate) fn new() -> Arc<Capture> {
        let c = Arc::new(Capture {
            id: next_id(),
            touched: Mutex::new(Vec::new()),
            released: AtomicBool::new(false),
            ctl: Mutex::new(CaptureCtl::default()),
        });
        captures()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(c.id, Arc::downgrade(&c));
        c
    }

    fn touched(&self) -> std::sync::MutexGuard<'_, Vec<Touched>> {
        self.touched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `touched` for an op on `stream` routed into this capture, unless the end
    /// has released the objects since the route was read: then the stream has
    /// left the capture, and the op fails with nothing enqueued (`check_routed`).
    fn touched_for_op(&self, stream: &Stream) -> Result<std::sync::MutexGuard<'_, Vec<Touched>>> {
        let t = self.touched();
        if self.released.load(Ordering::Relaxed) {
            return Err(stream.routed_apart(true));
        }
        Ok(t)
    }

    /// The index of `obj`'s entry, made on its first captured access: the object is
    /// marked as used by this capture and its memory is kept for the graph.
    fn entry(&self, t: &mut Vec<Touched>, obj: ObjRef<'_>) -> usize {
        if let Some(i) = t.iter().position(|x| x.obj.id == obj.id) {
            return i;
        }
        if let Some(mem) = obj.owner.get().and_then(|w| w.upgrade()) {
            self.ctl().keep.push(mem);
        }
        obj.exclusive().state().captures += 1;
        t.push(Touched {
            // Alive: borrowed from an `Arc` for the call (a foreign op's end passes
            // only objects it holds a reference to).
            obj: obj.to_arc().expect("a captured op's object has an Arc"),
            shadow: SyncState::default(),
            written: false,
        });
        t.len() - 1
    }

    /// The entries of an op's accesses, and what the op waits for among the
    /// captured ops of other streams.
    fn prepare(
        &self,
        t: &mut Vec<Touched>,
        stream: &Stream,
        set: &[Access<'_>],
    ) -> (Vec<usize>, engine::Waits) {
        let idx: Vec<usize> = set.iter().map(|a| self.entry(t, a.obj())).collect();
        let mut need = engine::Waits::new();
        for (a, &i) in set.iter().zip(&idx) {
            engine::waits_for(&t[i].shadow, stream.id, a.write(), &mut need);
        }
        (idx, need)
    }

    /// A tracked op issued on a stream taking part in this capture.
    pub(crate) fn run_op(
        &self,
        stream: &Stream,
        kind: OpKind<'_>,
        set: &[Access<'_>],
        enqueue: impl FnOnce() -> Result<()>,
        keep: bool,
    ) -> Result<Option<RecRef>> {
        let mut t = self.touched_for_op(stream)?;
        let (idx, need) = self.prepare(&mut t, stream, set);
        let me = stream.id;
        let r = engine::push_op(
            stream,
            true,
            kind,
            &need,
            set.len(),
            keep,
            enqueue,
            |rec, publish| publish_shadows(&mut t, set, &idx, me, rec, publish),
        );
        match &r {
            Ok(_) => self.note_joins(&need),
            Err(e) => self.op_failed(kind, e),
        }
        drop(t);
        r
    }

    /// A captured op waited on `need`: each forked stream whose work it waited on
    /// is joined back up to that work, as by an explicit event wait. (A fork still
    /// takes an event: ops outside the capture use the objects' real state.)
    fn note_joins(&self, need: &engine::Waits) {
        let mut ctl = None;
        for rec in need.recordings() {
            let ctl = ctl.get_or_insert_with(|| self.ctl());
            if let Some(f) = ctl.forks.iter_mut().find(|f| f.0.id == rec.stream_id()) {
                f.1 = f.1.max(rec.seq);
            }
        }
    }

    /// An op of this capture failed: the graph would silently lack it, so ending
    /// the capture must fail.
    #[cold]
    fn op_failed(&self, kind: OpKind<'_>, e: &Error) {
        self.poison(&format!("{} ({e})", op_name(kind)));
    }

    /// `op_begin` on a stream taking part in this capture.
    pub(crate) fn op_begin(
        &self,
        stream: &Stream,
        set: &[Access<'_>],
        kind: OpKind<'_>,
    ) -> Result<()> {
        let mut t = self.touched_for_op(stream)?;
        let (_, need) = self.prepare(&mut t, stream, set);
        let mut push = stream.push_lock();
        stream.check_routed(true)?;
        let obs = trace::observe();
        let waits = engine::issue_waits(stream, &need)?;
        self.note_joins(&need);
        if obs.on() {
            trace::op_done(&mut push, stream, obs, kind, Waited::Set(&need), None);
        }
        stream
            .stats
            .waits
            .fetch_add(waits, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// `op_end` on a stream taking part in this capture.
    pub(crate) fn op_end(&self, stream: &Stream, set: &[Access<'_>]) -> Result<()> {
        let mut t = self.touched_for_op(stream)?;
        let idx: Vec<usize> = set.iter().map(|a| self.entry(&mut t, a.obj())).collect();
        let me = stream.id;
        engine::push_op(
            stream,
            true,
            OpKind::ForeignEnd,
            &engine::Waits::new(),
            set.len(),
            false,
            || Ok(()),
            |rec, publish| publish_shadows(&mut t, set, &idx, me, rec, publish),
        )?;
        Ok(())
    }

    /// The union of the captured ops' read and write sets (a write wins).
    pub(crate) fn access_sets(&self) -> (Vec<Arc<SyncObject>>, Vec<Arc<SyncObject>>) {
        let t = self.touched();
        let reads = t
            .iter()
            .filter(|x| !x.written)
            .map(|x| x.obj.clone())
            .collect();
        let writes = t
            .iter()
            .filter(|x| x.written)
            .map(|x| x.obj.clone())
            .collect();
        (reads, writes)
    }

    /// Unmarks the touched objects and drops the captured recordings. The objects'
    /// real state was never changed by the capture, so nothing is rolled back.
    pub(crate) fn release_objects(&self) {
        let t = {
            let mut t = self.touched();
            self.released.store(true, Ordering::Relaxed);
            std::mem::take(&mut *t)
        };
        for x in &t {
            let mut ex = x.obj.exclusive();
            let st = ex.state();
            st.captures = st.captures.saturating_sub(1);
        }
    }
}

/// What a capture shares beyond the sync bookkeeping.
#[derive(Default)]
pub(crate) struct CaptureCtl {
    /// Streams that joined by waiting on a captured event: (stream, latest joined-back seq).
    pub(crate) forks: Vec<(Arc<Stream>, u64)>,
    /// The first operation rejected during the capture; end reports it.
    pub(crate) poisoned: Option<String>,
    /// Set by `capture_end` as it takes the forks: a fork's wait that comes later
    /// does not join.
    pub(crate) ended: bool,
    /// Device frees requested during the capture, done after it ends.
    pub(crate) deferred_frees: Vec<(Arc<Stream>, u64, Vec<RecRef>)>,
    /// Memory of the buffers the captured ops use.
    pub(crate) keep: KeepAlive,
    /// The capture recorded host callbacks (host backend only).
    pub(crate) callbacks: bool,
}

impl Capture {
    /// Records the first operation rejected during the capture (its end reports it).
    fn poison(&self, op: &str) {
        let first = {
            let mut c = self.ctl();
            let first = c.poisoned.is_none();
            c.poisoned.get_or_insert_with(|| op.to_string());
            first
        };
        if first {
            crate::log::warn(|| {
                format!(
                    "capture #{} poisoned: {op} was rejected; ending the capture will fail",
                    self.id
                )
            });
        }
    }

    pub(crate) fn ctl(&self) -> std::sync::MutexGuard<'_, CaptureCtl> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An untracked op failed on `stream`: poisons its capture, if any.
#[cold]
pub(crate) fn op_failed(stream: &Stream, kind: OpKind<'_>, e: &Error) {
    if let Some(cap) = stream.current_capture() {
        cap.op_failed(kind, e);
    }
}

/// What a refused op was, for the capture's error.
#[cold]
fn op_name(kind: OpKind<'_>) -> String {
    match kind {
        OpKind::Copy(..) => "a copy".into(),
        OpKind::Memset(_) => "a memset".into(),
        OpKind::Launch(f) => format!("the launch of '{}'", f.name),
        OpKind::HostFn => "a host callback".into(),
        OpKind::GraphLaunch(_) => "a graph launch".into(),
        OpKind::ForeignBegin(what) => format!("'{what}'"),
        OpKind::ForeignEnd => "an op end".into(),
        OpKind::Record => "an event record".into(),
        OpKind::WaitEvent => "an event wait".into(),
    }
}

/// Parses a C capture mode: 0 relaxed (default), 1 thread-local, 2 global.
pub fn capture_mode(v: u32) -> Result<CaptureMode> {
    CaptureMode::from_u32(v)
        .ok_or_else(|| Error::invalid_argument(format!("unknown capture mode {v}")))
}

/// Publishes `rec`, recorded on stream `me` with one reference per object, into the
/// capture's copies of the accessed objects' states (`idx`: their entries).
fn publish_shadows(
    t: &mut [Touched],
    set: &[Access<'_>],
    idx: &[usize],
    me: u64,
    rec: &RecRef,
    publish: &mut crate::event::Publish<'_>,
) {
    for (a, &i) in set.iter().zip(idx) {
        let x = &mut t[i];
        x.written |= a.write();
        // SAFETY: one of the references counted per object.
        engine::publish_into(
            &mut x.shadow,
            me,
            a.write(),
            unsafe { rec.dup_counted() },
            publish,
        );
    }
}

/// Begins capturing `stream`. Ops issued on it (and on streams that fork from it by
/// waiting on its captured events) are recorded into a graph, not run.
pub fn capture_begin(stream: &Arc<Stream>, mode: CaptureMode) -> Result<()> {
    if stream.is_capturing() {
        return Err(Error::new(
            ErrorCode::InvalidState,
            format!("{stream:?} is already capturing"),
        ));
    }
    // Two sluice handles on one raw stream (`sluice_stream_wrap_external`) track
    // their work apart; the driver would capture the other handle's work too, which
    // its tracking would take as run, and waits on it would order nothing.
    if let Some(other) = stream
        .device
        .stream_on_raw(stream.raw(), stream.id, |_| true)
    {
        return Err(Error::new(
            ErrorCode::InvalidState,
            format!(
                "{stream:?} shares its raw stream with {other:?} \
                 (sluice_stream_wrap_external): capture on a raw stream with one handle"
            ),
        ));
    }
    let mut push = stream.push_lock();
    let entry = stream.record_in(&mut push, false, 1, 0)?;
    if let Err(e) = stream.device.backend.capture_begin(stream.raw, mode) {
        drop(push);
        drop(entry);
        return Err(e);
    }
    trace::capture_mark(stream, true, 0, true);
    stream.capture.join(Capture::new(), entry);
    stream.set_capture_origin(true);
    Ok(())
}

/// Refuses a wait that no capture can order, before it reaches a backend: on a
/// recording made in a capture that has ended (it stands for no work that will run),
/// or from a stream in one capture on a recording of another. The driver refuses
/// both too (`CUDA_ERROR_INVALID_VALUE`, `CUDA_ERROR_STREAM_CAPTURE_MERGE`:
/// `tools/driver-probes/captured_event_wait.c`). A refused wait poisons the waiting
/// stream's capture, as any refused op does.
#[inline(always)]
pub(crate) fn check_wait(stream: &Stream, rec: &Recording) -> Result<()> {
    match rec.capture_id() {
        None => Ok(()),
        Some(cid) => check_capture_wait(stream, cid),
    }
}

#[cold]
fn check_capture_wait(stream: &Stream, cid: u64) -> Result<()> {
    let mine = stream.current_capture();
    let refusal = match (live_capture(cid), &mine) {
        (None, _) => format!(
            "the event was recorded in capture #{cid}, which has ended: it stands for no \
             work that will run, so {stream:?} cannot wait on it (record it again outside \
             a capture)"
        ),
        (Some(_), Some(mine)) if mine.id != cid => format!(
            "{stream:?} takes part in capture #{}, and the event was recorded in capture \
             #{cid}: a wait cannot join two captures",
            mine.id
        ),
        _ => return Ok(()),
    };
    if let Some(mine) = mine {
        mine.poison("a stream wait on an event of another capture");
    }
    Err(Error::new(ErrorCode::InvalidState, refusal))
}

/// `stream` waits on `rec`: a plain wait, or on a captured recording a fork into
/// its capture or a join back.
#[inline(always)]
pub(crate) fn wait(stream: &Arc<Stream>, rec: &Recording) -> Result<()> {
    match rec.capture_id() {
        None => stream.wait(rec),
        Some(cid) => capture_wait(stream, rec, cid),
    }
}

#[cold]
fn capture_wait(stream: &Arc<Stream>, rec: &Recording, cid: u64) -> Result<()> {
    // Checked and waited under the push lock (and, for a fork, under `ctl`), so
    // that the capture cannot end between the check and the driver's wait: a wait
    // on an event of a capture that ended meanwhile never reaches the driver,
    // which is not safe against it (a crash on cuda).
    let mut push = stream.push_lock();
    if stream.is_capturing() {
        // A capture cannot end while a participant's push lock is held.
        if stream.current_capture().is_some_and(|c| c.id == cid) {
            stream.wait_counted(&mut push, rec)?;
            join_back(stream, rec, cid);
            return Ok(());
        }
        // In another capture since the check: refused as the check refuses it,
        // under the push lock, so that the stream cannot leave that capture first.
        return check_capture_wait(stream, cid);
    }
    let Some(cap) = live_capture(cid) else {
        // Ended since the check (a capture never comes back): refused as the check
        // refuses it.
        return check_capture_wait(stream, cid);
    };
    // Fork: the driver moves this stream into the capture. Under the push lock
    // with the entry recording before it, so that no op routed outside the
    // capture lands in it unnoticed (`check_routed`).
    let entry = stream.record_in(&mut push, false, 1, 0)?;
    let mut ctl = cap.ctl();
    let waited = if ctl.ended {
        // The end has taken its participants: it would not collect this stream.
        Err(Error::new(
            ErrorCode::InvalidState,
            format!(
                "capture #{cid} ended while {stream:?} waited on one of its events: the \
                 wait orders nothing"
            ),
        ))
    } else {
        stream.wait_counted(&mut push, rec)
    };
    if let Err(e) = waited {
        drop(ctl);
        drop(push);
        drop(entry);
        return Err(e);
    }
    // Joined under `ctl`: an end that takes the forks after this takes this one too.
    ctl.forks.push((stream.clone(), 0));
    stream.capture.join(cap.clone(), entry);
    drop(ctl);
    Ok(())
}

/// A stream in a capture waited on `rec`: remember the newest of the source
/// stream's recordings waited on.
fn join_back(stream: &Stream, rec: &Recording, cid: u64) {
    let Some(cap) = live_capture(cid) else { return };
    if !stream.is_capturing() {
        return;
    }
    let mut ctl = cap.ctl();
    if let Some(f) = ctl.forks.iter_mut().find(|f| f.0.id == rec.stream_id()) {
        f.1 = f.1.max(rec.seq);
    }
}

fn captures() -> &'static Mutex<HashMap<u64, std::sync::Weak<Capture>>> {
    static LIVE: OnceLock<Mutex<HashMap<u64, std::sync::Weak<Capture>>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Marks capture `id` as aborted by the rejected operation `op`.
pub(crate) fn poison(id: u64, op: &str) {
    if let Some(c) = live_capture(id) {
        c.poison(op);
    }
}

/// Marks every live capture whose ops touched object `obj` as aborted by `op`.
#[cold]
pub(crate) fn poison_users(obj: u64, op: &str) {
    let live: Vec<Arc<Capture>> = captures()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter_map(|w| w.upgrade())
        .collect();
    for c in live {
        if c.touched().iter().any(|x| x.obj.id == obj) {
            c.poison(op);
        }
    }
}

fn live_capture(id: u64) -> Option<Arc<Capture>> {
    captures()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .and_then(|w| w.upgrade())
}

/// Called when the last handle to `stream` goes: a capture it began can no longer be
/// ended by the caller, so it is ended here and its graph discarded. Otherwise the
/// stream stays capturing while buffers keep it alive, and `wait_all` fails for good.
pub(crate) fn abort_on_destroy(stream: &Arc<Stream>) {
    if stream.is_capturing() && stream.is_capture_origin() {
        let r = capture_end(stream);
        crate::log::warn(|| {
            format!(
                "{stream:?} was destroyed while capturing; the capture was ended ({})",
                if r.is_ok() {
                    "graph discarded"
                } else {
                    "it had failed"
                }
            )
        });
    }
}

/// Ends the capture begun on `stream` and returns its graph. Every forked stream
/// must have been joined back. On any failure the capture is ended, its sync
/// state rolled back, and the streams are usable again.
pub fn capture_end(stream: &Arc<Stream>) -> Result<Arc<Graph>> {
    let cap = match stream.current_capture() {
        Some(c) if stream.is_capture_origin() => c,
        Some(_) => {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("{stream:?} joined a capture; end it on the stream that began it"),
            ))
        }
        None => {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("{stream:?} is not capturing"),
            ))
        }
    };
    // Marked ended first: from here on no stream forks into the capture (a fork
    // joins under `ctl` unless it is ended), so its participants are known.
    let forked: Vec<Arc<Stream>> = {
        let mut ctl = cap.ctl();
        ctl.ended = true;
        ctl.forks.iter().map(|f| f.0.clone()).collect()
    };
    let mut parts: Vec<&Arc<Stream>> = std::iter::once(stream).chain(&forked).collect();
    parts.sort_unstable_by_key(|s| s.id);
    parts.dedup_by_key(|s| s.id);
    // Every participant's push lock is held from the check of the forks' joins until
    // each has left, as a stream joins a capture under its push lock: an op routed
    // into the capture (`check_routed`) either finished inside it before the end
    // (and counts in the joins checked below) or, taking the lock after the end,
    // finds its stream out of it and enqueues nothing. Lock order: these push
    // locks in stream id order, then `ctl` (an op's begin and a fork's wait take
    // `ctl` under their push lock). This is the one place that holds several
    // push locks; nowhere does a thread wait for one while holding another (a
    // recording of another pool is dropped after the lock goes, `event::Publish`),
    // so the id order cannot deadlock. Sync objects and a capture's `touched`,
    // which come before a push lock, are taken only after these go.
    let held: Vec<_> = parts.iter().map(|s| s.push_lock()).collect();
    let (forks, poisoned, frees, keep, callbacks) = {
        let mut ctl = cap.ctl();
        (
            std::mem::take(&mut ctl.forks),
            ctl.poisoned.take(),
            std::mem::take(&mut ctl.deferred_frees),
            std::mem::take(&mut ctl.keep),
            ctl.callbacks,
        )
    };
    let seq_of = |id: u64| parts.iter().position(|p| p.id == id).map(|i| held[i].seq);
    let unjoined: Vec<u64> = forks
        .iter()
        .filter(|(s, joined)| seq_of(s.id).is_some_and(|seq| seq > *joined))
        .map(|(s, _)| s.id)
        .collect();
    let ended = stream.device.backend.capture_end(stream.raw);
    let ok = ended.is_ok() && unjoined.is_empty() && poisoned.is_none();
    trace::capture_mark(stream, false, cap.id, ok);
    // Whatever happened, every participant leaves the capture.
    let left: Vec<_> = parts.iter().map(|s| s.capture.leave()).collect();
    stream.set_capture_origin(false);
    drop(held);
    drop(left);
    captures()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&cap.id);
    let (reads, writes) = cap.access_sets();
    cap.release_objects();
    for (home, addr, recs) in frees {
        home.free_block(addr, &recs);
    }
    let discard = |raw: u64| stream.device.backend.graph_destroy(raw);
    if !unjoined.is_empty() {
        if let Ok(raw) = ended {
            discard(raw);
        }
        let ids: Vec<String> = unjoined.iter().map(|i| format!("stream #{i}")).collect();
        return Err(Error::new(
            ErrorCode::CaptureFailed,
            format!(
                "capture on {stream:?} has forked stream(s) not joined back: {} (record an event on each and make the origin stream wait on it before ending)",
                ids.join(", ")
            ),
        ));
    }
    if let Some(op) = poisoned {
        if let Ok(raw) = ended {
            discard(raw);
        }
        return Err(Error::new(
            ErrorCode::CaptureFailed,
            format!("capture on {stream:?} was aborted: {op} was rejected during the capture"),
        ));
    }
    let raw = ended.map_err(|e| e.context(format!("ending capture on {stream:?}")))?;
    Ok(Arc::new(Graph {
        device: stream.device.clone(),
        raw,
        reads,
        writes,
        keep,
        callbacks,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::memory::Buffer;
    use crate::stream::STREAM_NON_BLOCKING;

    /// A thread that routes an op into a capture (`current_capture`) and takes the
    /// capture's `touched` only after another thread's `capture_end` released the
    /// objects: the op must fail without leaving its object counted as used by a
    /// live capture, which would refuse every later host wait on it.
    #[test]
    fn an_op_routed_into_a_capture_released_meanwhile_leaves_no_count() {
        let dev = Device::open_default().unwrap();
        let s = Stream::create(&dev, STREAM_NON_BLOCKING, 0).unwrap();
        let b = Buffer::alloc(&s, 64).unwrap();
        crate::ops::memset(&s, &b, 0, 1, 64).unwrap();
        capture_begin(&s, CaptureMode::Relaxed).unwrap();
        // What the op's thread holds between its route and `touched`.
        let routed = s.current_capture().unwrap();
        drop(capture_end(&s).unwrap());
        let set = [Access::new(ObjRef::new(&b.sync), true)];
        let r = routed.run_op(&s, OpKind::Memset(64), &set, || Ok(()), false);
        assert_eq!(r.err().map(|e| e.code), Some(ErrorCode::InvalidState));
        drop(routed);
        b.sync
            .wait_write()
            .expect("a host wait on the buffer after the capture ended");
    }
}

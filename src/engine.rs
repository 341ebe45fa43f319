//! The dependency engine (MXNet's async engine): how an operation on stream S with
//! read set R and write set W is ordered.
//! - Begin: for r in R, S waits on r's writer unless it is on S or S already has a
//!   reader entry (which came after that writer, since writes clear readers); for w
//!   in W, S waits on w's writer and every reader not on S. Waits are deduplicated per
//!   source stream (newest only) and skip work known complete. The host never blocks.
//! - End: one event is recorded on S; reads replace S's reader entry, writes clear
//!   the readers and become the writer.
//!
//! Library ops (copies, launches, callbacks, graph launches) do both while holding
//! the objects' locks, taken in id order, and the stream's push lock, so they are
//! atomic with respect to each other. Foreign ops ([`ForeignOp`]) wait at begin and
//! publish at end.

use crate::c_enum::c_enum;
use crate::error::{Error, ErrorCode, Result};
use crate::event::{PoolInner, Publish, RecRef, Recording};
use crate::inline::Small;
use crate::objlock::ObjGuard;
use crate::stream::Stream;
use crate::sync::{
    Access, AccessSet, ObjRef, OwnedAccessSet, SlotState, SyncCore, SyncObject, SyncState,
    OWNED_INLINE,
};
use crate::trace::{self, Obs, OpKind, Waited};
use smallvec::SmallVec;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

c_enum! {
    /// Engine modes, seen by C as `SLUICE_ENGINE_*`.
    pub enum EngineMode: "SLUICE_ENGINE_" {
        /// Engine mode: ops only enqueue work (the default).
        Async = 0 => ASYNC,
        /// Engine mode: the host synchronises the stream after every tracked op (debugging).
        Sync = 1 => SYNC,
    }
}

/// The engine mode as a `u8`; `MODE_UNSET` until first read from `SLUICE_ENGINE`
/// or set (a plain static, so every op reads one byte).
static MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
const MODE_UNSET: u8 = u8::MAX;

#[cold]
fn mode_from_env() -> u8 {
    let m = match std::env::var("SLUICE_ENGINE").as_deref() {
        Ok("sync") => EngineMode::Sync,
        _ => EngineMode::Async,
    } as u8;
    // A mode set meanwhile wins.
    match MODE.compare_exchange(MODE_UNSET, m, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => m,
        Err(now) => now,
    }
}

/// The process-wide engine mode (from `SLUICE_ENGINE`, default async).
#[inline(always)]
pub fn engine_mode() -> EngineMode {
    let m = match MODE.load(Ordering::Relaxed) {
        MODE_UNSET => mode_from_env(),
        m => m,
    };
    if m == EngineMode::Sync as u8 {
        EngineMode::Sync
    } else {
        EngineMode::Async
    }
}

pub fn set_engine_mode(mode: EngineMode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

/// The recordings an op must wait on, newest per source stream. The pointers stay
/// valid while the objects they were read from stay locked and unchanged.
pub(crate) struct Waits {
    recs: Small<NonNull<Recording>, 4>,
    /// Recordings made while collecting, kept alive until the waits are issued.
    temps: Vec<RecRef>,
    /// Waits left out because a newer one of the same stream covers them.
    dedup: u32,
    /// Conflicts left out because stream order covers them.
    same: u32,
}

impl Waits {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Waits {
            recs: Small::new(),
            temps: Vec::new(),
            dedup: 0,
            same: 0,
        }
    }

    /// The recordings to wait on.
    pub(crate) fn recordings(&self) -> impl Iterator<Item = &Recording> {
        // SAFETY: every stored pointer is still valid (see the type's doc).
        self.recs.iter().map(|p| unsafe { p.as_ref() })
    }

    pub(crate) fn deduplicated(&self) -> u64 {
        self.dedup as u64
    }

    pub(crate) fn same_stream(&self) -> u64 {
        self.same as u64
    }

    /// Adds `rec` unless an equal-or-newer one from its stream is there.
    #[inline(always)]
    fn add(&mut self, rec: &Recording) {
        // SAFETY: every stored pointer is still valid (see the type's doc).
        let get = |p: &NonNull<Recording>| unsafe { p.as_ref() };
        match self
            .recs
            .iter_mut()
            .find(|r| get(r).stream_id() == rec.stream_id())
        {
            Some(r) if get(r).seq >= rec.seq => self.dedup += 1,
            Some(r) => {
                *r = NonNull::from(rec);
                self.dedup += 1;
            }
            None => self.recs.push(NonNull::from(rec)),
        }
    }

    /// Adds a recording made while collecting.
    fn add_temp(&mut self, rec: RecRef) {
        let p = NonNull::from(&*rec);
        self.temps.push(rec);
        // SAFETY: the node behind `p` is kept alive by `temps`.
        self.add(unsafe { p.as_ref() });
    }
}

/// The objects of a set, held in the set's (id) order: a read through the
/// stream's reader slot when it can (bit `i` of `fast`), otherwise exclusively
/// (see [`SyncObject`]); released on drop.
struct Locked<'s, 'a> {
    set: &'s [Access<'a>],
    /// The stream's reader slot.
    slot: usize,
    /// Bit i: access i is held through the reader slot only.
    fast: u64,
}

/// One access as held: through the stream's reader slot (the state may only be
/// read), or exclusively.
enum Held<'a> {
    Slot {
        st: &'a SyncState,
        slot: &'a mut SlotState,
    },
    Exclusive {
        obj: &'a SyncCore,
        st: &'a mut SyncState,
    },
}

impl<'s, 'a> Locked<'s, 'a> {
    #[inline(always)]
    fn new(set: &'s [Access<'a>], stream: &Stream) -> Self {
        let slot = stream.reader_slot();
        let me = stream.id;
        let mut fast = 0u64;
        for (i, a) in set.iter().enumerate() {
            let obj = a.obj();
            if !a.write() && i < 64 && obj.try_read_slot(slot, me) {
                fast |= 1 << i;
            } else {
                // A read marks the stream's slot in use: it publishes there.
                obj.lock_exclusive((!a.write()).then_some(slot));
            }
        }
        Locked { set, slot, fast }
    }

    /// The set held through the stream's reader slot alone, when every access is a
    /// read that [`SyncObject::try_read_slot`] can take; otherwise None, with
    /// nothing held. Never waits, so it may be called with the push lock held.
    #[inline(always)]
    fn try_slots(set: &'s [Access<'a>], stream: &Stream) -> Option<Self> {
        if set.len() > 64 {
            return None;
        }
        let slot = stream.reader_slot();
        let me = stream.id;
        for (i, a) in set.iter().enumerate() {
            if a.write() || !a.obj().try_read_slot(slot, me) {
                for taken in &set[..i] {
                    // SAFETY: taken by `try_read_slot` above.
                    unsafe { taken.obj().unlock_slot(slot) };
                }
                return None;
            }
        }
        let fast = if set.len() == 64 {
            u64::MAX
        } else {
            (1u64 << set.len()) - 1
        };
        Some(Locked { set, slot, fast })
    }

    /// Access `i` as held. Each index is taken once at a time.
    #[inline(always)]
    fn held(&self, i: usize) -> Held<'a> {
        let obj: &'a SyncCore = {
            let r = self.set[i].obj();
            // SAFETY: the object lives for 'a (ObjRef's contract).
            unsafe { &*(&*r as *const SyncCore) }
        };
        if i < 64 && self.fast & (1 << i) != 0 {
            // SAFETY: the slot is held; exclusive holders (the only writers of the
            // state) must take it first.
            Held::Slot {
                st: unsafe { obj.state.get_shared() },
                slot: unsafe { obj.slot(self.slot) },
            }
        } else {
            // SAFETY: held exclusively; each object appears once in a set.
            Held::Exclusive {
                obj,
                st: unsafe { obj.state.get() },
            }
        }
    }

    /// Publishes `rec`, recorded on stream `me` with one reference per object, into
    /// every held object.
    #[inline(always)]
    fn publish(&self, me: u64, rec: &RecRef, publish: &mut Publish<'_>) {
        for (i, a) in self.set.iter().enumerate() {
            // SAFETY: the reference is one of those counted per object.
            let r = unsafe { rec.dup_counted() };
            match self.held(i) {
                Held::Slot { slot, .. } => publish_slot(slot, r, publish),
                // SAFETY: held exclusively.
                Held::Exclusive { obj, st } => unsafe {
                    publish_exclusive(obj, st, self.slot, me, a.write(), r, publish)
                },
            }
        }
    }
}

impl Drop for Locked<'_, '_> {
    /// Lets go of the objects. An orphaned object (its last `Arc` gone) on which
    /// the holder closed the last open foreign op is freed once let go of (only
    /// an exclusive hold can see one: no slot reader takes an orphaned object).
    #[inline(always)]
    fn drop(&mut self) {
        let mut orphans: SmallVec<[NonNull<SyncCore>; 2]> = SmallVec::new();
        for (i, a) in self.set.iter().enumerate() {
            let obj = a.obj();
            // SAFETY: held since `new`, in the way `fast` says.
            unsafe {
                if i < 64 && self.fast & (1 << i) != 0 {
                    obj.unlock_slot(self.slot);
                } else {
                    if obj.last_op_closed() {
                        orphans.push(NonNull::from(&*obj));
                    }
                    obj.unlock_exclusive();
                }
            }
        }
        for core in orphans {
            // SAFETY: orphaned (no `Arc` left) with no op counted open any more, and
            // let go of: nothing else can reach it, and only one holder can see its
            // last open count closed.
            unsafe { SyncCore::free(core) };
        }
    }
}

/// Publishes a read recording into the slot of its stream: it replaces the stream's
/// entry unless that entry is newer (a foreign op's end records before it takes the
/// object, so a newer read of the same stream may be there already, and it covers
/// this one).
#[inline(always)]
fn publish_slot(slot: &mut SlotState, rec: RecRef, publish: &mut Publish<'_>) {
    slot.publications = slot.publications.wrapping_add(1);
    match &mut slot.reader {
        Some(old) if old.seq > rec.seq => publish.release(rec),
        Some(old) => publish.release(std::mem::replace(old, rec)),
        None => slot.reader = Some(rec),
    }
}

/// [`publish_into`] for an object held exclusively, with its reader slots: a write
/// clears every reader entry (the slots keep their owners); a read goes to the
/// stream's slot `slot`, which the stream takes over (the entry of a previous owner
/// moves to the state's readers, the stream's own entry there moves in).
///
/// # Safety
/// `obj` is held exclusively and `st` is its state.
#[inline(always)]
unsafe fn publish_exclusive(
    obj: &SyncCore,
    st: &mut SyncState,
    slot: usize,
    me: u64,
    write: bool,
    rec: RecRef,
    publish: &mut Publish<'_>,
) {
    st.version = st.version.wrapping_add(1);
    if write {
        st.writes = st.writes.wrapping_add(1);
        while let Some(old) = st.readers.pop() {
            publish.release(old);
        }
        // SAFETY: held exclusively.
        unsafe {
            obj.for_each_slot(|s| {
                if let Some(old) = s.reader.take() {
                    publish.release(old);
                }
            })
        };
        if let Some(old) = st.writer.replace(rec) {
            publish.release(old);
        }
    } else {
        // SAFETY: held exclusively; a read marked the slot in use when it took the object.
        let s = unsafe { obj.slot(slot) };
        if s.owner != me {
            if let Some(old) = s.reader.take() {
                st.readers.push(old);
            }
            s.owner = me;
            if let Some(at) = st.readers.iter().position(|r| r.stream_id() == me) {
                s.reader = Some(st.readers.swap_remove(at));
            }
        }
        publish_slot(s, rec, publish);
    }
}

/// [`waits_for`] for an object held exclusively, with its reader slots.
///
/// # Safety
/// `obj` is held exclusively and `st` is its state.
#[inline(always)]
unsafe fn waits_for_exclusive(
    obj: &SyncCore,
    st: &SyncState,
    me: u64,
    write: bool,
    need: &mut Waits,
) {
    if write {
        waits_for(st, me, true, need);
        // SAFETY: held exclusively.
        unsafe {
            obj.for_each_slot(|s| {
                if let Some(r) = &s.reader {
                    if r.stream_id() != me {
                        need.add(r);
                    } else {
                        need.same += 1;
                    }
                }
            })
        };
    } else if let Some(w) = st.writer.as_ref() {
        // A reader entry of `me` (in the state or in a slot) came after the writer,
        // since writes clear every entry.
        let mut mine = st.readers.iter().any(|r| r.stream_id() == me);
        if !mine {
            // SAFETY: held exclusively.
            unsafe {
                obj.for_each_slot(|s| {
                    mine |= s.reader.as_ref().is_some_and(|r| r.stream_id() == me)
                })
            };
        }
        if w.stream_id() != me && !mine {
            need.add(w);
        } else {
            need.same += 1;
        }
    }
}

/// [`waits_for`] for a read held through the stream's own slot: the writer, unless
/// it is on `me` or `me` has a reader entry (in its slot, which it owns).
#[inline(always)]
fn waits_for_slot(st: &SyncState, slot: &SlotState, me: u64, need: &mut Waits) {
    if let Some(w) = st.writer.as_ref() {
        if w.stream_id() != me && slot.reader.is_none() {
            need.add(w);
        } else {
            need.same += 1;
        }
    }
}

/// Adds to `need` what an op on stream `me` waits for before accessing an object in
/// state `st`: for a write, the writer and every reader of other streams; for a
/// read, the writer of another stream, unless `me` already has a reader entry (it
/// was published after that writer, since writes clear the readers). Conflicts that
/// stream order covers are counted in `need.same`.
#[inline(always)]
pub(crate) fn waits_for(st: &SyncState, me: u64, write: bool, need: &mut Waits) {
    if write {
        for r in st.writer.iter().chain(st.readers.iter()) {
            if r.stream_id() != me {
                need.add(r);
            } else {
                need.same += 1;
            }
        }
    } else if let Some(w) = st.writer.as_ref() {
        if w.stream_id() != me && !st.readers.iter().any(|r| r.stream_id() == me) {
            need.add(w);
        } else {
            need.same += 1;
        }
    }
}

/// Publishes `rec`, recorded on stream `me` after an access, into `st`: a write
/// clears the readers and becomes the writer; a read replaces `me`'s reader entry.
/// Replaced references go to `publish`.
#[inline(always)]
pub(crate) fn publish_into(
    st: &mut SyncState,
    me: u64,
    write: bool,
    rec: RecRef,
    publish: &mut Publish<'_>,
) {
    st.version = st.version.wrapping_add(1);
    if write {
        st.writes = st.writes.wrapping_add(1);
        while let Some(old) = st.readers.pop() {
            publish.release(old);
        }
        if let Some(old) = st.writer.replace(rec) {
            publish.release(old);
        }
    } else {
        match st.readers.iter_mut().find(|x| x.stream_id() == me) {
            // A foreign op's end records before it locks the objects: a newer read of
            // the same stream may be there already, and it covers this one.
            Some(slot) if slot.seq > rec.seq => publish.release(rec),
            Some(slot) => publish.release(std::mem::replace(slot, rec)),
            None => st.readers.push(rec),
        }
    }
}

/// Drops the recordings of an object held exclusively that are known complete
/// (through a host wait), when some stream's completion advanced since the last
/// look. Every reader was recorded after the writer it saw, so a completed reader
/// means a completed writer too.
///
/// # Safety
/// `obj` is held exclusively and `st` is its state.
#[inline(always)]
unsafe fn prune(obj: &SyncCore, st: &mut SyncState) {
    let completions = crate::event::completions();
    if st.pruned_at != completions {
        st.pruned_at = completions;
        let before = st.readers.len();
        st.readers.retain(|r| !r.known_complete());
        let mut dropped = st.readers.len() < before;
        // SAFETY: held exclusively.
        unsafe {
            obj.for_each_slot(|s| {
                if s.reader.as_ref().is_some_and(|r| r.known_complete()) {
                    s.reader = None;
                    dropped = true;
                }
            })
        };
        if dropped || st.writer.as_ref().is_some_and(|w| w.known_complete()) {
            st.writer = None;
        }
    }
}

/// Collects the recordings `stream` must wait on before the op's accesses.
#[inline(always)]
fn collect_waits(stream: &Stream, locked: &Locked<'_, '_>, need: &mut Waits) -> Result<()> {
    let me = stream.id;
    for (i, a) in locked.set.iter().enumerate() {
        let (obj, st) = match locked.held(i) {
            Held::Slot { st, slot } => {
                // No fresh allocation and nothing to prune (`try_read_slot`).
                waits_for_slot(st, slot, me, need);
                continue;
            }
            Held::Exclusive { obj, st } => (obj, st),
        };
        if let Some(home) = &st.alloc_on {
            if home.id != me && !home.is_capturing() {
                // Order this first foreign use after the allocation point.
                let rec = home.record(false)?;
                match &st.writer {
                    None => st.writer = Some(rec),
                    Some(_) => need.add_temp(rec),
                }
                st.alloc_on = None;
            } else if home.id == me && a.write() {
                st.alloc_on = None;
            }
        }
        // SAFETY: held exclusively.
        unsafe {
            prune(obj, st);
            waits_for_exclusive(obj, st, me, a.write(), need);
        }
    }
    Ok(())
}

/// Issues the waits; the states they were collected from are still locked.
/// Returns how many were issued; the caller counts them.
#[inline(always)]
pub(crate) fn issue_waits(stream: &Stream, need: &Waits) -> Result<u64> {
    for (i, r) in need.recs.iter().enumerate() {
        // SAFETY: collected under the locks the caller still holds.
        if let Err(e) = stream.wait_pushed(unsafe { r.as_ref() }) {
            stream.stats.waits.fetch_add(i as u64, Ordering::Relaxed);
            return Err(e);
        }
    }
    Ok(need.recs.len() as u64)
}

/// The part of an op that touches the stream, under its push lock so that the
/// op's waits, its work and its recording are contiguous on the stream: issues the
/// waits, runs `enqueue`, records one event with one reference per object (plus one
/// when `keep`), and hands it to `publish_all` with the push lock still held. The
/// trace switch is read once, here: when it is on, an out-of-line copy runs.
#[inline(always)]
pub(crate) fn push_op(
    stream: &Stream,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    let push = stream.push_lock();
    let obs = trace::observe();
    if obs.on() {
        return push_op_observed(
            stream,
            push,
            obs,
            kind,
            need,
            objects,
            keep,
            enqueue,
            publish_all,
        );
    }
    push_op_with(
        stream,
        push,
        Obs::OFF,
        kind,
        need,
        objects,
        keep,
        enqueue,
        publish_all,
    )
}

#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn push_op_observed(
    stream: &Stream,
    push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    push_op_with(
        stream,
        push,
        obs,
        kind,
        need,
        objects,
        keep,
        enqueue,
        publish_all,
    )
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn push_op_with(
    stream: &Stream,
    mut push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    let waits = issue_waits(stream, need)?;
    let dev = if obs.tracing() {
        trace::device_begin(stream)
    } else {
        0
    };
    let refs = objects + keep as usize;
    let enqueued = enqueue();
    if dev != 0 {
        // Before the op's recording, so nothing waiting on it runs before the end.
        trace::device_end(stream, dev, kind, enqueued.is_ok(), Some(push.seq + 1));
    }
    // A match, not `and_then`: a closure here is not always inlined.
    let recorded = match enqueued {
        Ok(()) => match stream.record_in(&mut push, false, refs, waits) {
            Ok(r) => Ok(r),
            Err(e) => Err(unrecorded(stream, e)),
        },
        Err(e) => Err(e),
    };
    let rec = match recorded {
        Ok(r) => r,
        Err(e) => {
            stream.stats.waits.fetch_add(waits, Ordering::Relaxed);
            return Err(e);
        }
    };
    if obs.on() {
        trace::op_done(&mut push, stream, obs, kind, Waited::Set(need), Some(&rec));
    }
    let mut publish = Publish::new(stream, push);
    publish_all(&rec, &mut publish);
    if keep {
        Ok(Some(rec))
    } else {
        // `objects` references went to the objects; this one was never counted.
        std::mem::forget(rec);
        Ok(None)
    }
}

/// The op was enqueued but its recording failed, so nothing can wait for it: it
/// is waited for on the host before the error returns (a capture is poisoned instead).
#[cold]
#[inline(never)]
fn unrecorded(stream: &Stream, e: Error) -> Error {
    if !stream.is_capturing() {
        let _ = stream.device.backend.stream_synchronize(stream.raw);
    }
    e
}

#[inline(always)]
fn after_op(stream: &Stream) -> Result<()> {
    if engine_mode() == EngineMode::Sync && !stream.is_capturing() {
        stream.stats.engine_syncs.fetch_add(1, Ordering::Relaxed);
        stream.synchronize()?;
    }
    Ok(())
}

/// Runs one tracked op atomically: waits, `enqueue`, one recording, publication.
/// With no objects there is nothing to order or publish, so nothing is recorded.
/// `kind` names the op in traces and counts its bytes.
#[inline(always)]
pub fn run_op(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    run_op_inner(stream, kind, set, enqueue, false).map(drop)
}

/// [`run_op`], also returning the op's recording (None when nothing was recorded).
#[inline(always)]
pub fn run_op_recorded(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<Option<RecRef>> {
    run_op_inner(stream, kind, set, enqueue, true)
}

/// An op with no objects: only its work, under the push lock.
#[inline(always)]
fn push_untracked(
    stream: &Stream,
    kind: OpKind<'_>,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let push = stream.push_lock();
    let obs = trace::observe();
    if obs.on() {
        return push_untracked_observed(stream, push, obs, kind, enqueue);
    }
    enqueue()
}

#[cold]
#[inline(never)]
fn push_untracked_observed(
    stream: &Stream,
    mut push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let dev = if obs.tracing() {
        trace::device_begin(stream)
    } else {
        0
    };
    let enqueued = enqueue();
    if dev != 0 {
        trace::device_end(stream, dev, kind, enqueued.is_ok(), None);
    }
    enqueued?;
    if obs.on() {
        trace::op_done(&mut push, stream, obs, kind, Waited::None, None);
    }
    Ok(())
}

#[inline(always)]
fn run_op_inner(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
    keep: bool,
) -> Result<Option<RecRef>> {
    if set.is_empty() {
        if let Err(e) = push_untracked(stream, kind, enqueue) {
            crate::capture::op_failed(stream, kind, &e);
            return Err(e);
        }
        after_op(stream)?;
        return Ok(None);
    }
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return cap.run_op(stream, kind, set, enqueue, keep);
        }
    }
    let me = stream.id;
    let rec = {
        let locked = Locked::new(set, stream);
        let mut need = Waits::new();
        collect_waits(stream, &locked, &mut need)?;
        push_op(
            stream,
            kind,
            &need,
            set.len(),
            keep,
            enqueue,
            |rec, publish| locked.publish(me, rec, publish),
        )?
    };
    after_op(stream)?;
    Ok(rec)
}

/// What a foreign op saw of each object at begin, in the order of its access set.
#[derive(Clone, Copy)]
pub(crate) struct SeenState {
    version: u64,
    writes: u64,
    /// The op counts as open on the object (`open_reads` / `open_writes`).
    open: bool,
}

/// Inline for as many objects as an [`OwnedAccessSet`].
pub(crate) type Seen = Small<SeenState, OWNED_INLINE>;

/// Everything published into an object held exclusively, as one number: the
/// state's `version` plus every slot's `publications` (each only grows, so the sum
/// changes whenever anything is published).
///
/// # Safety
/// `obj` is held exclusively and `st` is its state.
#[inline(always)]
unsafe fn version_exclusive(obj: &SyncCore, st: &SyncState) -> u64 {
    let mut v = st.version;
    // SAFETY: held exclusively.
    unsafe { obj.for_each_slot(|s| v = v.wrapping_add(s.publications)) };
    v
}

impl SeenState {
    /// What a foreign op sees of access `i` of `locked` at begin.
    fn of(held: &Held<'_>) -> SeenState {
        let (version, writes) = match held {
            // Reads compare `writes` only.
            Held::Slot { st, .. } => (0, st.writes),
            // SAFETY: held exclusively.
            Held::Exclusive { obj, st } => (unsafe { version_exclusive(obj, st) }, st.writes),
        };
        SeenState {
            version,
            writes,
            open: false,
        }
    }

    /// True when publishing a recording `seq` of stream `me` into the object keeps
    /// the engine's bookkeeping true although it was recorded without holding the
    /// object: for a read, no write was published since begin (a pruned writer is
    /// complete; a newer reader entry of the same stream is kept by
    /// [`publish_slot`], since it covers this read); for a write, nothing was
    /// published since begin.
    fn still_current(&self, held: &Held<'_>, write: bool) -> bool {
        match held {
            Held::Slot { st, .. } => st.writes == self.writes,
            // SAFETY: held exclusively.
            Held::Exclusive { obj, st } if write => {
                (unsafe { version_exclusive(obj, st) }) == self.version
            }
            Held::Exclusive { st, .. } => st.writes == self.writes,
        }
    }
}

/// Open foreign reads and writes of a held object (reads: none known when held
/// through a slot; only a write needs them, and writes are held exclusively).
fn open_counts(held: &Held<'_>) -> (u32, u32) {
    match held {
        Held::Slot { st, .. } => (0, st.open_writes),
        Held::Exclusive { obj, st } => {
            let mut reads = st.open_reads;
            // SAFETY: held exclusively.
            unsafe { obj.for_each_slot(|s| reads = reads.saturating_add(s.open_reads)) };
            (reads, st.open_writes)
        }
    }
}

/// The open count of access `write` on a held object: reads are counted in the
/// slot `slot` of the op's stream, writes in the state.
#[inline(always)]
fn open_count<'h>(held: &'h mut Held<'_>, slot: usize, write: bool) -> &'h mut u32 {
    match held {
        Held::Slot { slot: s, .. } => &mut s.open_reads,
        Held::Exclusive { st, .. } if write => &mut st.open_writes,
        // SAFETY: held exclusively; a read marked the slot in use when it took the object.
        Held::Exclusive { obj, .. } => unsafe { &mut obj.slot(slot).open_reads },
    }
}

/// Begins a foreign op: issues the waits for its accesses (with the objects
/// held, so the waits are ordered against library ops on them). Writes what it
/// saw of each object to `seen` (empty on entry), for [`op_end`]. `kind` names it in traces. With
/// `track_open`, the op counts as open on its objects until [`op_end`], and a
/// conflicting foreign op still open on one of them is an `InvalidState` error:
/// two such ops cannot be ordered (neither has a recording yet).
#[inline(always)]
pub(crate) fn op_begin(
    stream: &Stream,
    set: &[Access<'_>],
    kind: OpKind<'_>,
    track_open: bool,
    seen: &mut Seen,
) -> Result<()> {
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return cap.op_begin(stream, set, kind);
        }
    }
    let locked = Locked::new(set, stream);
    if track_open {
        for (i, a) in locked.set.iter().enumerate() {
            let (reads, writes) = open_counts(&locked.held(i));
            if writes > 0 || (a.write() && reads > 0) {
                return Err(open_conflict(a, writes > 0));
            }
        }
    }
    let mut need = Waits::new();
    collect_waits(stream, &locked, &mut need)?;
    let obs = trace::observe();
    let waits = if need.recs.is_empty() && !obs.on() {
        0 // nothing to enqueue: no push lock
    } else {
        let mut push = stream.push_lock();
        let waits = issue_waits(stream, &need)?;
        if obs.on() {
            trace::op_done(&mut push, stream, obs, kind, Waited::Set(&need), None);
        }
        waits
    };
    if waits != 0 {
        stream.stats.waits.fetch_add(waits, Ordering::Relaxed);
    }
    for (i, a) in locked.set.iter().enumerate() {
        let mut held = locked.held(i);
        let mut s = SeenState::of(&held);
        if track_open {
            s.open = true;
            *open_count(&mut held, locked.slot, a.write()) += 1;
        }
        seen.push(s);
    }
    Ok(())
}

#[cold]
fn open_conflict(a: &Access<'_>, open_writes: bool) -> Error {
    let (mine, theirs) = (
        if a.write() { "write" } else { "read" },
        if open_writes { "writes" } else { "reads" },
    );
    Error::new(
        ErrorCode::InvalidState,
        format!(
            "sync object #{} is {theirs} by a foreign op that is still open; this op would {mine} it, \
             and two open foreign ops cannot be ordered: end the first (sluice_op_end) before \
             beginning the second",
            a.obj().id
        ),
    )
}

/// Marks the op closed on a held object.
fn close_open(held: &mut Held<'_>, slot: usize, write: bool, seen: &SeenState) {
    if seen.open {
        let n = open_count(held, slot, write);
        *n = n.saturating_sub(1);
    }
}

/// Marks the op closed on its objects when it will not publish through the locked
/// block of [`op_end`].
#[cold]
fn close_open_locked(stream: &Stream, set: &[Access<'_>], seen: &[SeenState]) {
    if seen.len() != set.len() || !seen.iter().any(|s| s.open) {
        return;
    }
    let locked = Locked::new(set, stream);
    for (i, (a, s)) in locked.set.iter().zip(seen).enumerate() {
        close_open(&mut locked.held(i), locked.slot, a.write(), s);
    }
}

/// Ends a foreign op: records one event, then takes the objects and publishes it
/// when every object is still as the op saw it at begin (see
/// [`SeenState::still_current`]), so that no object is held across the driver
/// call (a newer reader entry of this stream stays: it covers this read).
/// Otherwise (a write was published on an object it read, or anything on an object
/// it wrote, while it was open) the first recording is dropped and the op waits for
/// what changed, records again and publishes with the objects held throughout, as
/// library ops do.
#[inline(always)]
pub(crate) fn op_end(stream: &Stream, set: &[Access<'_>], seen: &[SeenState]) -> Result<()> {
    if set.is_empty() {
        return after_op(stream);
    }
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return op_end_captured(stream, &cap, set, seen);
        }
    }
    let me = stream.id;
    let rec = {
        let mut push = stream.push_lock();
        let obs = trace::observe();
        let rec = match stream.record_in(&mut push, false, set.len(), 0) {
            Ok(r) => r,
            Err(e) => {
                drop(push);
                close_open_locked(stream, set, seen);
                return Err(e);
            }
        };
        if obs.on() {
            let kind = OpKind::ForeignEnd;
            trace::op_done(&mut push, stream, obs, kind, Waited::None, Some(&rec));
        }
        // The common case, reads that the stream's reader slots alone can take
        // and that saw no write since begin: publish with the push lock still held
        // (the slots are only tried, never waited for, so the lock order does not
        // matter), and the recordings it replaces go straight back to the pool.
        if seen.len() == set.len() {
            if let Some(locked) = Locked::try_slots(set, stream) {
                let mut current = true;
                for (i, s) in seen.iter().enumerate() {
                    // Reads only: `still_current` compares the state's `writes`.
                    current &= s.still_current(&locked.held(i), false);
                }
                if current {
                    let mut publish = Publish::new(stream, push);
                    for (i, s) in seen.iter().enumerate() {
                        if let Held::Slot { slot, .. } = locked.held(i) {
                            if s.open {
                                slot.open_reads = slot.open_reads.saturating_sub(1);
                            }
                            // SAFETY: one of the references counted per object.
                            publish_slot(slot, unsafe { rec.dup_counted() }, &mut publish);
                        }
                    }
                    // Its `set.len()` references went to the objects.
                    std::mem::forget(rec);
                    drop(publish);
                    drop(locked);
                    return after_op(stream);
                }
            }
        }
        rec
    };
    {
        let locked = Locked::new(set, stream);
        let mut current = seen.len() == set.len();
        if current {
            for (i, (a, s)) in locked.set.iter().zip(seen).enumerate() {
                let mut held = locked.held(i);
                close_open(&mut held, locked.slot, a.write(), s);
                current &= s.still_current(&held, a.write());
            }
        }
        if current {
            locked.publish(me, &rec, &mut Publish::unlocked());
        } else {
            for _ in 0..set.len() {
                // SAFETY: each of the references the recording was made with.
                drop(unsafe { rec.dup_counted() });
            }
        }
        // Its `set.len()` references went to the objects or were dropped.
        std::mem::forget(rec);
        if !current {
            let mut need = Waits::new();
            for (i, a) in locked.set.iter().enumerate() {
                match locked.held(i) {
                    Held::Slot { st, slot } => waits_for_slot(st, slot, me, &mut need),
                    // SAFETY: held exclusively.
                    Held::Exclusive { obj, st } => unsafe {
                        waits_for_exclusive(obj, st, me, a.write(), &mut need)
                    },
                }
            }
            push_op(
                stream,
                OpKind::ForeignEnd,
                &need,
                set.len(),
                false,
                || Ok(()),
                |rec, publish| locked.publish(me, rec, publish),
            )?;
        }
    }
    after_op(stream)
}

/// [`op_end`] on a capturing stream. The op may have been begun outside the
/// capture and counted open on its objects, which then keeps them alive; closing
/// it may free an orphaned one, so the capture records the objects that still have
/// an `Arc`, through references of its own (the others are destroyed: nothing can
/// name them any more).
#[cold]
fn op_end_captured(
    stream: &Stream,
    cap: &crate::capture::Capture,
    set: &[Access<'_>],
    seen: &[SeenState],
) -> Result<()> {
    let kept: Vec<(Arc<SyncObject>, bool)> = set
        .iter()
        .filter_map(|a| a.obj().to_arc().map(|o| (o, a.write())))
        .collect();
    close_open_locked(stream, set, seen);
    let mut live: AccessSet<'_> = AccessSet::with_capacity(kept.len());
    for (o, write) in &kept {
        live.push(ObjRef::new(o), *write);
    }
    live.normalize();
    cap.op_end(stream, &live)?;
    after_op(stream)
}

/// An open foreign op: work the caller enqueues on the stream itself, between
/// [`ForeignOp::begin`] and [`ForeignOp::end`], ordered like a library op. Dropping
/// it without `end` ends it.
pub struct ForeignOp {
    stream: Arc<Stream>,
    /// Its accesses, normalised once at begin. While the op is open its objects
    /// live by its open counts, or by references the set keeps (see
    /// [`OwnedAccessSet`]).
    set: OwnedAccessSet,
    /// What the op saw at begin, in the order of `set`.
    seen: Seen,
    ended: AtomicBool,
}

/// Memory for one [`ForeignOp`], reused from op to op by the C ABI (see
/// [`ForeignOp::begin_in`]).
pub(crate) type OpMemory = Box<MaybeUninit<ForeignOp>>;

impl ForeignOp {
    /// Makes `stream` wait, on the device, for every conflicting earlier op on other
    /// streams. An object in both `reads` and `writes` counts as written.
    pub fn begin(
        stream: &Arc<Stream>,
        reads: Vec<Arc<SyncObject>>,
        writes: Vec<Arc<SyncObject>>,
    ) -> Result<ForeignOp> {
        // SAFETY: `reads` and `writes` keep the objects alive until `open` has
        // counted the op open on them or kept them.
        let set = unsafe { OwnedAccessSet::borrowed(crate::sync::access_set_n(&reads, &writes)) };
        let mut op = ForeignOp::unopened(stream.clone(), set);
        op.open()?;
        Ok(op)
    }

    /// [`ForeignOp::begin`] on a set made by [`OwnedAccessSet::borrowed`] (whose
    /// objects the caller keeps alive during this call), in `mem` (a C handle owns
    /// the box): the memory of the thread's last ended op when there is one, so
    /// that a begin/end pair allocates nothing. On failure the memory comes back.
    pub(crate) fn begin_in(
        mut mem: OpMemory,
        stream: Arc<Stream>,
        set: OwnedAccessSet,
    ) -> std::result::Result<Box<ForeignOp>, (Error, OpMemory)> {
        mem.write(ForeignOp::unopened(stream, set));
        // SAFETY: written just above.
        let mut op = unsafe { mem.assume_init() };
        match op.open() {
            Ok(()) => Ok(op),
            Err(e) => Err((e, recycle(op))),
        }
    }

    /// Ends a boxed op ([`ForeignOp::end`]; the box is owned, so the `ended` flag
    /// needs no atomic swap) and gives back its memory for a later
    /// [`ForeignOp::begin_in`].
    pub(crate) fn end_into(mut op: Box<ForeignOp>) -> (Result<()>, OpMemory) {
        let ended = if std::mem::replace(op.ended.get_mut(), true) {
            Err(already_ended())
        } else {
            op_end(&op.stream, op.set.get(), &op.seen)
        };
        (ended, recycle(op))
    }

    /// An op not begun yet: marked ended, so that dropping it does nothing.
    fn unopened(stream: Arc<Stream>, set: OwnedAccessSet) -> ForeignOp {
        ForeignOp {
            stream,
            set,
            seen: Seen::new(),
            ended: AtomicBool::new(true),
        }
    }

    /// Issues the op's waits; from here on it is open. Its objects are alive
    /// (the caller's borrow) until it is counted open on them; an op that is not
    /// (begun in a capture) keeps a reference to each.
    fn open(&mut self) -> Result<()> {
        let kind = OpKind::ForeignBegin(&"op begin");
        op_begin(&self.stream, self.set.get(), kind, true, &mut self.seen)?;
        let counted = self.seen.len() == self.set.get().len() && self.seen.iter().all(|s| s.open);
        if !counted {
            self.set.keep();
        }
        *self.ended.get_mut() = false;
        Ok(())
    }

    /// The stream the foreign work goes on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// Records one event on the stream and publishes it to every object.
    pub fn end(&self) -> Result<()> {
        if self.ended.swap(true, Ordering::AcqRel) {
            return Err(already_ended());
        }
        op_end(&self.stream, self.set.get(), &self.seen)
    }
}

#[cold]
fn already_ended() -> Error {
    Error::new(ErrorCode::InvalidState, "the foreign op has already ended")
}

/// Drops a boxed op in place (ending it if it is open) and returns its memory.
fn recycle(op: Box<ForeignOp>) -> OpMemory {
    let raw = Box::into_raw(op);
    // SAFETY: the op is dropped once, in place; its memory stays allocated, owned
    // by the new box, which treats it as uninitialised.
    unsafe {
        std::ptr::drop_in_place(raw);
        Box::from_raw(raw.cast::<MaybeUninit<ForeignOp>>())
    }
}

impl Drop for ForeignOp {
    fn drop(&mut self) {
        if !*self.ended.get_mut() {
            let _ = self.end();
        }
    }
}

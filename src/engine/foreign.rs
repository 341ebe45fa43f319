//! Foreign ops: the caller's own work between `op_begin` (waits) and `op_end`
//! (one recording, published to every object).

use crate::error::{Error, ErrorCode, Result};
use crate::event::Publish;
use crate::inline::Small;
use crate::stream::Stream;
use crate::sync::{
    Access, AccessSet, ObjRef, OwnedAccessSet, SyncCore, SyncObject, SyncState, OWNED_INLINE,
};
use crate::trace::{self, OpKind, Waited};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::deps::{
    collect_waits, issue_waits, publish_slot, slot_wait, waits_for_exclusive, waits_for_slot, Held,
    Locked, SlotWait, Waits,
};
use super::push::{after_op, push_op, unrecorded};

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
    /// What a foreign op sees of a held object at begin; `open`: it counts as open
    /// there.
    #[inline(always)]
    fn of(held: &Held<'_>, open: bool) -> SeenState {
        let (version, writes) = match held {
            // Reads compare `writes` only.
            Held::Slot { st, .. } => (0, st.writes),
            // SAFETY: held exclusively.
            Held::Exclusive { obj, st } => (unsafe { version_exclusive(obj, st) }, st.writes),
        };
        SeenState {
            version,
            writes,
            open,
        }
    }

    /// A read is still current when no write was published since begin.
    #[inline(always)]
    fn read_current(&self, st: &SyncState) -> bool {
        st.writes == self.writes
    }

    /// True when publishing a recording `seq` of stream `me` into the object keeps
    /// the engine's bookkeeping true although it was recorded without holding the
    /// object: for a read, no write was published since begin (a pruned writer is
    /// complete; a newer reader entry of the same stream is kept by
    /// `publish_slot`, since it covers this read); for a write, nothing was
    /// published since begin.
    fn still_current(&self, held: &Held<'_>, write: bool) -> bool {
        match held {
            Held::Slot { st, .. } => self.read_current(st),
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
    if track_open && begin_on_slots(stream, set, seen) {
        return Ok(());
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
        stream.check_routed(false)?;
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
        // Built in place: a copy of a value patched on the stack stalls the store.
        seen.push(SeenState::of(&held, track_open));
        if track_open {
            *open_count(&mut held, locked.slot, a.write()) += 1;
        }
    }
    Ok(())
}

/// [`op_begin`]'s common case in one pass per object: every access a read that
/// the stream's reader slots alone take ([`Locked::try_slots`]), with no open
/// foreign write and no wait due, and tracing off. Counts the op open and writes
/// `seen`; false with nothing changed otherwise (the general path then decides).
#[inline(always)]
fn begin_on_slots(stream: &Stream, set: &[Access<'_>], seen: &mut Seen) -> bool {
    if trace::observe().on() {
        return false;
    }
    let Some(locked) = Locked::try_slots(set, stream) else {
        return false;
    };
    let me = stream.id;
    for i in 0..set.len() {
        let (st, slot) = locked.slot_held(i);
        if st.open_writes != 0 || matches!(slot_wait(st, slot, me), SlotWait::Due(_)) {
            return false;
        }
    }
    for i in 0..set.len() {
        let (st, slot) = locked.slot_held(i);
        seen.push(SeenState {
            version: 0,
            writes: st.writes,
            open: true,
        });
        slot.open_reads += 1;
    }
    true
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
        if stream.is_capturing() {
            // Forked into a capture on another thread since the check above.
            drop(push);
            if let Some(cap) = stream.current_capture() {
                return op_end_captured(stream, &cap, set, seen);
            }
            push = stream.push_lock();
        }
        let obs = trace::observe();
        let rec = match stream.record_in(&mut push, false, set.len(), 0) {
            Ok(r) => r,
            Err(e) => {
                drop(push);
                // After the host wait: closing the last count may free a buffer
                // whose free waited for this op (see `SyncCore::keep_while_open`).
                let e = unrecorded(stream, e);
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
                let current = (0..set.len()).all(|i| seen[i].read_current(locked.slot_held(i).0));
                if current {
                    let mut publish = Publish::new(stream, push);
                    for (i, s) in seen.iter().enumerate() {
                        let slot = locked.slot_held(i).1;
                        if s.open {
                            slot.open_reads = slot.open_reads.saturating_sub(1);
                        }
                        // SAFETY: one of the references counted per object.
                        publish_slot(slot, unsafe { rec.dup_counted() }, &mut publish);
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
                false,
                OpKind::ForeignEnd,
                &need,
                set.len(),
                false,
                || Ok(()),
                |rec, publish| locked.publish(me, rec, publish),
            )
            // Refused before its record (a wait failed): the op's work is on the
            // stream, unpublished, and its counts are closed, so `locked`'s release
            // may free a buffer kept for it: waited for on the host first, as a
            // failed record is.
            .map_err(|e| unrecorded(stream, e))?;
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
    if seen.len() == set.len() {
        end_begun_outside(stream, set, seen)?;
    } else {
        close_open_locked(stream, set, seen);
    }
    let mut live: AccessSet<'_> = AccessSet::with_capacity(kept.len());
    for (o, write) in &kept {
        live.push(ObjRef::new(o), *write);
    }
    live.normalize();
    cap.op_end(stream, &live)?;
    after_op(stream)
}

/// The real side of an op begun outside the capture its stream is now in: the
/// caller's work enqueued before the capture began ran, and the recording the
/// stream made as it joined the capture follows it, so that recording is
/// published as the op's (work enqueued since then is the graph's).
#[cold]
fn end_begun_outside(stream: &Stream, set: &[Access<'_>], seen: &[SeenState]) -> Result<()> {
    // A failed record (the capture ended meanwhile): the op's work is waited for on
    // the host before its counts close, as for a failed end outside captures.
    let entry = stream
        .mark_outside_capture()
        .map_err(|e| unrecorded(stream, e));
    let locked = Locked::new(set, stream);
    for (i, (a, s)) in locked.set.iter().zip(seen).enumerate() {
        close_open(&mut locked.held(i), locked.slot, a.write(), s);
    }
    let entry = entry?;
    for _ in 0..set.len() {
        // One counted reference per object, for `publish`.
        std::mem::forget(entry.clone());
    }
    locked.publish(stream.id, &entry, &mut Publish::unlocked());
    drop(locked);
    drop(entry);
    Ok(())
}

/// An open foreign op: work the caller enqueues on the stream itself, between
/// [`ForeignOp::begin`] and [`ForeignOp::end`], ordered like a library op. Dropping
/// it without `end` ends it.
///
/// Line-aligned, so that the lines an op touches do not depend on where its memory
/// falls.
#[repr(align(64))]
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
/// [`ForeignOp::begin_filled_in`]).
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

    /// [`ForeignOp::begin`] in `mem` (a C handle owns the box): the memory of the
    /// thread's last ended op when there is one, so that a begin/end pair
    /// allocates nothing. The set is filled in place by `fill` (no copy of it),
    /// then normalised. On failure (`fill`'s or the begin's) the memory comes back.
    ///
    /// # Safety
    /// As for [`OwnedAccessSet::fill`]: the objects `fill` pushes stay alive during
    /// this call.
    #[inline(always)]
    pub(crate) unsafe fn begin_filled_in<'g>(
        mem: OpMemory,
        stream: Arc<Stream>,
        fill: impl FnOnce(&mut AccessSet<'g, OWNED_INLINE>) -> Result<()>,
    ) -> std::result::Result<Box<ForeignOp>, (Error, OpMemory)> {
        let mut op = ForeignOp::write_unopened(mem, stream, OwnedAccessSet::empty());
        // SAFETY: the caller's contract.
        let set: &mut AccessSet<'g, OWNED_INLINE> = unsafe { op.set.fill() };
        if let Err(e) = fill(set) {
            return Err((e, recycle(op)));
        }
        set.normalize();
        match op.open() {
            Ok(()) => Ok(op),
            Err(e) => Err((e, recycle(op))),
        }
    }

    /// An unopened op ([`ForeignOp::unopened`]) written into `mem`.
    #[inline(always)]
    fn write_unopened(
        mut mem: OpMemory,
        stream: Arc<Stream>,
        set: OwnedAccessSet,
    ) -> Box<ForeignOp> {
        // Field by field, in place: a whole `ForeignOp` value (its inline sets) would
        // be built on the stack and copied.
        let p = mem.as_mut_ptr();
        // SAFETY: `p` is valid for writes; every field is written once.
        unsafe {
            std::ptr::addr_of_mut!((*p).stream).write(stream);
            std::ptr::addr_of_mut!((*p).set).write(set);
            std::ptr::addr_of_mut!((*p).seen).write(Seen::new());
            std::ptr::addr_of_mut!((*p).ended).write(AtomicBool::new(true));
        }
        // SAFETY: every field was written just above.
        unsafe { mem.assume_init() }
    }

    /// Ends a boxed op ([`ForeignOp::end`]; the box is owned, so the `ended` flag
    /// needs no atomic swap) and gives back its memory for a later
    /// [`ForeignOp::begin_filled_in`].
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

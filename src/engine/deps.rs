//! What an op waits for before its accesses and what it publishes after them, on
//! each object of its set, and how the set is held (reader slots or exclusively).

use crate::error::Result;
use crate::event::{Publish, RecRef, Recording};
use crate::inline::Small;
use crate::stream::Stream;
use crate::sync::{Access, SlotState, SyncCore, SyncState};
use smallvec::SmallVec;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

/// The recordings an op must wait on, newest per source stream. The pointers stay
/// valid while the objects they were read from stay locked and unchanged.
pub(crate) struct Waits {
    pub(super) recs: Small<NonNull<Recording>, 4>,
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
/// (see [`crate::sync::SyncObject`]); released on drop.
pub(super) struct Locked<'s, 'a> {
    pub(super) set: &'s [Access<'a>],
    /// The stream's reader slot.
    pub(super) slot: usize,
    /// Bit i: access i is held through the reader slot only.
    fast: u64,
}

/// One access as held: through the stream's reader slot (the state may only be
/// read), or exclusively.
pub(super) enum Held<'a> {
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
    pub(super) fn new(set: &'s [Access<'a>], stream: &Stream) -> Self {
        let slot = stream.reader_slot();
        let me = stream.id;
        let mut fast = 0u64;
        for (i, a) in set.iter().enumerate() {
            let obj = a.obj();
            if !a.write() && i < 64 && obj.read_slot_or_wait(slot, me) {
                fast |= 1 << i;
            } else {
                // A read marks the stream's slot in use: it publishes there.
                obj.lock_exclusive((!a.write()).then_some(slot));
            }
        }
        Locked { set, slot, fast }
    }

    /// The set held through the stream's reader slot alone, when every access is a
    /// read that [`SyncCore::try_read_slot`] can take; otherwise None, with
    /// nothing held. Never waits, so it may be called with the push lock held.
    #[inline(always)]
    pub(super) fn try_slots(set: &'s [Access<'a>], stream: &Stream) -> Option<Self> {
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
        let fast = all_bits(set.len());
        Some(Locked { set, slot, fast })
    }

    /// The object of access `i`, alive for 'a.
    #[inline(always)]
    fn core(&self, i: usize) -> &'a SyncCore {
        let r = self.set[i].obj();
        // SAFETY: the object lives for 'a (ObjRef's contract).
        unsafe { &*(&*r as *const SyncCore) }
    }

    /// Access `i` of a set held by [`Locked::try_slots`]: the object's state (read
    /// only) and the stream's slot. Each index is taken once at a time.
    #[inline(always)]
    pub(super) fn slot_held(&self, i: usize) -> (&'a SyncState, &'a mut SlotState) {
        let obj = self.core(i);
        // SAFETY: every slot is held (`try_slots`); exclusive holders (the only
        // writers of the state) must take it first.
        unsafe { (obj.state.get_shared(), obj.slot(self.slot)) }
    }

    /// Access `i` as held. Each index is taken once at a time.
    #[inline(always)]
    pub(super) fn held(&self, i: usize) -> Held<'a> {
        let obj = self.core(i);
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
    pub(super) fn publish(&self, me: u64, rec: &RecRef, publish: &mut Publish<'_>) {
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
    /// the holder closed the last open foreign op is freed once let go of, and the
    /// memory of a buffer freed while such ops were open is dropped (freed, after
    /// every use published by then) once every object is let go of (only an
    /// exclusive hold can see either: no slot reader takes such an object).
    #[inline(always)]
    fn drop(&mut self) {
        let n = self.set.len();
        if (1..=64).contains(&n) && self.fast == all_bits(n) {
            // Every access held through the slot (the common read-only set).
            for a in self.set {
                // SAFETY: held since `new` or `try_slots`.
                unsafe { a.obj().unlock_slot(self.slot) };
            }
            return;
        }
        self.release_mixed();
    }
}

impl Locked<'_, '_> {
    /// [`Drop`] for a set held partly or wholly exclusively.
    #[inline(never)]
    fn release_mixed(&mut self) {
        let mut orphans: SmallVec<[NonNull<SyncCore>; 2]> = SmallVec::new();
        let mut kept = Vec::new();
        for (i, a) in self.set.iter().enumerate() {
            let obj = a.obj();
            // SAFETY: held since `new`, in the way `fast` says.
            unsafe {
                if i < 64 && self.fast & (1 << i) != 0 {
                    obj.unlock_slot(self.slot);
                } else {
                    if obj.last_op_closed() {
                        orphans.push(NonNull::from(&*obj));
                    } else if let Some(k) = obj.take_kept() {
                        kept.extend(k);
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
        // Buffers freed while foreign ops were open: freed now, ordered after
        // everything published (the ops' ends included). Their drops take objects.
        drop(kept);
    }
}

/// Publishes a read recording into the slot of its stream: it replaces the stream's
/// entry unless that entry is newer (a foreign op's end records before it takes the
/// object, so a newer read of the same stream may be there already, and it covers
/// this one).
#[inline(always)]
pub(super) fn publish_slot(slot: &mut SlotState, rec: RecRef, publish: &mut Publish<'_>) {
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
    if write {
        // SAFETY: held exclusively.
        unsafe {
            obj.for_each_slot(|s| {
                if let Some(old) = s.reader.take() {
                    publish.release(old);
                }
            })
        };
        publish_into(st, me, true, rec, publish);
    } else {
        st.version = st.version.wrapping_add(1);
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
pub(super) unsafe fn waits_for_exclusive(
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
/// it is on `me`, `me` has a reader entry (in its slot, which it owns), or it is
/// known complete (the slot path does not prune; see [`SyncCore::try_read_slot`]).
#[inline(always)]
pub(super) fn waits_for_slot(st: &SyncState, slot: &SlotState, me: u64, need: &mut Waits) {
    match slot_wait(st, slot, me) {
        SlotWait::Due(w) => need.add(w),
        SlotWait::SameStream => need.same += 1,
        SlotWait::None => {}
    }
}

/// What a read through the stream's own slot waits for (see [`waits_for_slot`]).
pub(super) enum SlotWait<'r> {
    None,
    /// A conflict that stream order covers.
    SameStream,
    Due(&'r Recording),
}

#[inline(always)]
pub(super) fn slot_wait<'r>(st: &'r SyncState, slot: &SlotState, me: u64) -> SlotWait<'r> {
    match st.writer.as_ref() {
        // The slot (a line the stream owns) first: the writer's recording and its
        // pool are read only when the stream has no reader entry.
        Some(w) if slot.reader.is_some() || w.stream_id() == me => SlotWait::SameStream,
        Some(w) if !w.known_complete() => SlotWait::Due(w),
        _ => SlotWait::None,
    }
}

/// The mask of the first `n` (at most 64) accesses.
#[inline(always)]
fn all_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
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
pub(super) fn collect_waits(
    stream: &Stream,
    locked: &Locked<'_, '_>,
    need: &mut Waits,
) -> Result<()> {
    let me = stream.id;
    for (i, a) in locked.set.iter().enumerate() {
        let (obj, st) = match locked.held(i) {
            Held::Slot { st, slot } => {
                // No fresh allocation (`try_read_slot`).
                waits_for_slot(st, slot, me, need);
                continue;
            }
            Held::Exclusive { obj, st } => (obj, st),
        };
        if let Some(home) = &st.alloc_on {
            if home.id != me {
                // This first foreign use follows the allocation point; the op's
                // own publication then orders later ones.
                if let Some(rec) = st.order_after_alloc()? {
                    need.add_temp(rec);
                }
                st.alloc_on = None;
            } else if a.write() {
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

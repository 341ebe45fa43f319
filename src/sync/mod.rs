//! Sync objects: the dependency record of one buffer or of foreign memory (at most
//! one writer recording and one reader recording per stream), the host waits on
//! them; the access sets that ops declare are in `access.rs`. How an op waits and publishes is in
//! [`crate::engine`].

use crate::device::next_id;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::objlock::ObjLock;
use crate::stream::Stream;
use smallvec::SmallVec;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Reader slots per sync object. A stream reads through slot
/// `Stream::reader_slot % READER_SLOTS`; live streams get the smallest free slot
/// numbers, so up to this many live streams never share a slot.
pub(crate) const READER_SLOTS: usize = 16;

const _: () = assert!(READER_SLOTS <= 32);

/// How long a read waits for an exclusive holder to let go before it queues for
/// the object exclusively itself (see [`SyncCore::read_slot_or_wait`]): spins,
/// then yields.
const SLOT_WAIT_SPINS: u32 = 4096;

/// Why a read did not take its stream's reader slot.
enum SlotMiss {
    /// Held exclusively (or being taken): the slot may be free again soon.
    Busy,
    /// The read needs the object exclusively.
    Exclusive,
}

// The fields a slot reader reads come first: with the object's id, `used`,
// `slots` and the lock word they fill the object's first cache line.
#[derive(Clone, Default)]
#[repr(C)]
pub(crate) struct SyncState {
    pub(crate) writer: Option<RecRef>,
    /// A fresh stream-ordered allocation: valid only in this stream's order until
    /// the first write on it or the first use on another stream.
    pub(crate) alloc_on: Option<Arc<Stream>>,
    /// Bumped by every published write (a foreign read compares it instead of
    /// reading the writer's recording).
    pub(crate) writes: u64,
    /// Foreign ops open now (begun, not ended) that write / read the object (open
    /// reads of a real object are counted in its reader slots instead).
    pub(crate) open_writes: u32,
    pub(crate) open_reads: u32,
    /// `stream::completions()` when completed recordings were last pruned (by an
    /// exclusive holder only).
    pub(crate) pruned_at: u64,
    /// Bumped by every publication made with the object held exclusively (foreign
    /// ops compare it, plus the slots' `publications`, between begin and end).
    pub(crate) version: u64,
    /// How many live captures' ops touched this object; each capture keeps its
    /// ops' recordings in its own copy of the state.
    pub(crate) captures: u32,
    /// Reader entries of streams that own no reader slot of the object (on a real
    /// object; a capture's shadow state keeps every reader here).
    pub(crate) readers: SmallVec<[RecRef; 2]>,
}

impl SyncState {
    /// Orders a use after the allocation point of memory valid in its home
    /// stream's order (`alloc_on`): with no writer yet, a recording past that point
    /// (`Stream::mark_outside_capture`) becomes the writer and the point is passed;
    /// otherwise it is returned, a further recording to wait on, and the caller
    /// decides whether its use passes the point.
    pub(crate) fn order_after_alloc(&mut self) -> Result<Option<RecRef>> {
        let Some(home) = &self.alloc_on else {
            return Ok(None);
        };
        let rec = home.mark_outside_capture()?;
        if self.writer.is_none() {
            self.writer = Some(rec);
            self.alloc_on = None;
            return Ok(None);
        }
        Ok(Some(rec))
    }
}

/// One stream's part of an object's readers, on a cache line of its own: the
/// stream's reader entry and its open foreign reads. A reader whose stream owns the
/// slot locks only the slot; see [`SyncObject`].
#[derive(Default)]
pub(crate) struct SlotState {
    /// The stream whose reader entry lives here (0: none). While a stream owns a
    /// slot, its reader entry is here, never in `SyncState::readers`.
    pub(crate) owner: u64,
    pub(crate) reader: Option<RecRef>,
    /// Open foreign reads counted here (by any stream whose slot number maps here).
    pub(crate) open_reads: u32,
    /// Bumped by every publication into this slot (see `SyncState::version`).
    pub(crate) publications: u64,
}

/// Its lock is taken only by `try_lock` (readers) and `lock_spin` (exclusive
/// holders), never parked on, so it is released with a plain store.
#[repr(C, align(64))]
pub(crate) struct ReaderSlot {
    pub(crate) lock: ObjLock<SlotState>,
}

/// A per-object dependency record: stands for a buffer, or for foreign memory.
///
/// Locking (issue 17): `state` holds the writer, the counters and the readers of
/// streams without a slot; each reader slot holds one stream's reader entry. An
/// op *reads* the object through its stream's slot alone when the stream owns it
/// and nothing else needs changing (no fresh allocation): it
/// locks the slot (a line no other thread writes), reads `state` without locking
/// it, and publishes into the slot. Everything else holds the object
/// *exclusively*: the `state` lock, then every slot in `used`, in slot order.
/// Bits of `used` are set only under the `state` lock and never cleared, so an
/// exclusive holder locks every slot that any reader can be using, and `state` is
/// written only while no slot reader is inside. A slot reader that finds the
/// `state` lock taken lets its slot go and waits for the holder to finish
/// (writers do not starve; see [`SyncCore::read_slot_or_wait`]).
//
// Lifetime (issue 17): the state lives in a [`SyncCore`], an allocation of its own
// that the `Arc<SyncObject>` points to. An open foreign op counted open on the
// object (its reads in the reader slots, its writes in the state) holds no `Arc`
// reference: the core is freed by the last of the `Arc` (its drop frees the core
// when nothing is open, and otherwise marks it orphaned) and the open ops (the op
// end that closes the last open count of an orphaned core frees it). See
// docs/decisions.md, "Open reads keep their object alive through the reader slot".
pub struct SyncObject {
    core: NonNull<SyncCore>,
}

// SAFETY: the core is `Sync` and `Send` (its fields are locks and atomics, and
// values reached only under them) and is reached only through shared references.
unsafe impl Send for SyncObject {}
// SAFETY: as above.
unsafe impl Sync for SyncObject {}

/// The object's state (see [`SyncObject`]); reached through `Arc<SyncObject>`'s
/// `Deref`, or by an open op through the pointer in its access set.
// The id, `slots`, `used` and the slot path's part of the state share the first
// cache line; each slot has its own.
#[repr(C, align(64))]
pub struct SyncCore {
    pub id: u64,
    /// The reader slots, allocated by the exclusive hold that sets the first bit
    /// of `used` (an object nobody reads has none); null while `used` is 0.
    slots: AtomicPtr<[ReaderSlot; READER_SLOTS]>,
    /// Reader slots that may hold anything (bit i: slot i).
    used: AtomicU32,
    /// Set, with the object held exclusively, when the last `Arc<SyncObject>` went
    /// while foreign ops were still counted open: the op end that closes the last
    /// of them frees the core. No slot reader takes an orphaned core.
    orphaned: AtomicBool,
    /// Set, with the object held exclusively, when its buffer was freed while
    /// foreign ops were counted open on it: the op end that closes the last of
    /// them drops what `kept` holds (see [`SyncCore::keep_while_open`]). No slot
    /// reader takes such a core either.
    free_deferred: AtomicBool,
    pub(crate) state: ObjLock<SyncState>,
    /// The memory this object stands for, if sluice owns it (kept alive by graphs).
    pub(crate) owner: OnceLock<std::sync::Weak<dyn std::any::Any + Send + Sync>>,
    /// The `Arc` that owns the core, for a counted reference from an access
    /// ([`ObjRef::to_arc`]); it cannot be upgraded once the core is orphaned.
    arc: std::sync::Weak<SyncObject>,
    /// The memory of a buffer freed while foreign ops were open on this object,
    /// kept until the last of them ends (`free_deferred`).
    kept: Mutex<Vec<Box<dyn Send>>>,
}

impl Drop for SyncCore {
    fn drop(&mut self) {
        let p = *self.slots.get_mut();
        if !p.is_null() {
            // SAFETY: allocated by `Box::into_raw` in `lock_exclusive`, freed once.
            drop(unsafe { Box::from_raw(p) });
        }
        #[cfg(debug_assertions)]
        LIVE_CORES.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::ops::Deref for SyncObject {
    type Target = SyncCore;
    #[inline(always)]
    fn deref(&self) -> &SyncCore {
        // SAFETY: the core lives at least as long as this `Arc`'s value (it is
        // freed by this value's drop, or later).
        unsafe { self.core.as_ref() }
    }
}

impl Drop for SyncObject {
    /// The last `Arc` is gone: frees the core, unless foreign ops are still counted
    /// open on it; then it is orphaned, and the last of those ops frees it.
    fn drop(&mut self) {
        let core = &**self;
        core.lock_exclusive(None);
        // SAFETY: held exclusively.
        let open = unsafe { core.open_ops() };
        if open != 0 {
            core.orphaned.store(true, Ordering::Relaxed);
        }
        // SAFETY: taken just above.
        unsafe { core.unlock_exclusive() };
        if open == 0 {
            // SAFETY: no `Arc` is left and no op is open on the core: nothing can
            // reach it any more (every other reference is borrowed from an `Arc`
            // or counted open).
            unsafe { SyncCore::free(self.core) };
        }
    }
}

/// Sync object cores allocated and not freed (debug builds only; for tests).
#[cfg(debug_assertions)]
static LIVE_CORES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The number of sync object states allocated and not yet freed, in debug builds
/// (None in release builds). For leak tests.
#[doc(hidden)]
pub fn live_sync_cores() -> Option<usize> {
    #[cfg(debug_assertions)]
    return Some(LIVE_CORES.load(Ordering::Relaxed));
    #[cfg(not(debug_assertions))]
    None
}

// Exclusive holds taken by each thread (debug builds only; for tests).
#[cfg(debug_assertions)]
thread_local! {
    static EXCLUSIVE_HOLDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has held a sync object exclusively, in debug builds
/// (None in release builds). For tests of the slot path.
#[doc(hidden)]
pub fn exclusive_holds_on_this_thread() -> Option<u64> {
    #[cfg(debug_assertions)]
    return Some(EXCLUSIVE_HOLDS.with(|c| c.get()));
    #[cfg(not(debug_assertions))]
    None
}

/// Stream slot numbers in use, and those given back (the smallest is reused first).
static SLOT_NUMBERS: Mutex<(u32, Vec<u32>)> = Mutex::new((0, Vec::new()));

/// A slot number for a new stream: the smallest one no live stream has.
pub(crate) fn take_slot_number() -> u32 {
    let mut g = SLOT_NUMBERS.lock().unwrap_or_else(|p| p.into_inner());
    let (next, free) = &mut *g;
    match free.iter().enumerate().min_by_key(|(_, n)| **n) {
        Some((i, _)) => free.swap_remove(i),
        None => {
            *next += 1;
            *next - 1
        }
    }
}

/// Gives back a stream's slot number (the stream is gone).
pub(crate) fn give_slot_number(n: u32) {
    let mut g = SLOT_NUMBERS.lock().unwrap_or_else(|p| p.into_inner());
    g.1.push(n);
}

/// The object held exclusively (see [`SyncObject`]); released on drop.
pub(crate) struct Exclusive<'a> {
    obj: &'a SyncCore,
}

impl Exclusive<'_> {
    pub(crate) fn state(&mut self) -> &mut SyncState {
        // SAFETY: held exclusively.
        unsafe { self.obj.state.get() }
    }

    /// Every reader entry: those of `state` and those of the slots.
    pub(crate) fn readers(&self) -> Vec<RecRef> {
        // SAFETY: held exclusively.
        let st = unsafe { self.obj.state.get_shared() };
        let mut v: Vec<RecRef> = st.readers.to_vec();
        // SAFETY: held exclusively.
        unsafe { self.obj.for_each_slot(|s| v.extend(s.reader.clone())) };
        v
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // SAFETY: taken in `SyncObject::exclusive`.
        unsafe { self.obj.unlock_exclusive() }
    }
}

impl std::fmt::Debug for SyncCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sync object #{}", self.id)
    }
}

impl std::fmt::Debug for SyncObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl SyncObject {
    pub fn new() -> Arc<SyncObject> {
        Self::with_state(SyncState::default())
    }

    fn with_state(state: SyncState) -> Arc<SyncObject> {
        Arc::new_cyclic(|arc| {
            #[cfg(debug_assertions)]
            LIVE_CORES.fetch_add(1, Ordering::Relaxed);
            let core = Box::new(SyncCore {
                id: next_id(),
                state: ObjLock::new(state),
                used: AtomicU32::new(0),
                orphaned: AtomicBool::new(false),
                free_deferred: AtomicBool::new(false),
                slots: AtomicPtr::new(std::ptr::null_mut()),
                owner: OnceLock::new(),
                arc: arc.clone(),
                kept: Mutex::new(Vec::new()),
            });
            SyncObject {
                // SAFETY: from a box, so not null.
                core: unsafe { NonNull::new_unchecked(Box::into_raw(core)) },
            }
        })
    }

    /// A sync object for memory just allocated in `stream`'s order.
    pub(crate) fn allocated_on(stream: &Arc<Stream>) -> Arc<SyncObject> {
        Self::with_state(SyncState {
            alloc_on: Some(stream.clone()),
            ..SyncState::default()
        })
    }
}

impl SyncCore {
    /// Frees the core.
    ///
    /// # Safety
    /// Nothing can reach the core any more: its `Arc` is gone and no foreign op
    /// is counted open on it. Called once.
    pub(crate) unsafe fn free(core: NonNull<SyncCore>) {
        // SAFETY: allocated by `Box::into_raw` in `SyncObject::with_state`; the
        // caller's contract.
        drop(unsafe { Box::from_raw(core.as_ptr()) });
    }

    /// Foreign ops counted open on the object: reads in the state and the slots,
    /// writes in the state.
    ///
    /// # Safety
    /// The caller holds the object exclusively.
    pub(crate) unsafe fn open_ops(&self) -> u32 {
        // SAFETY: held exclusively.
        let st = unsafe { self.state.get_shared() };
        let mut n = st.open_reads.saturating_add(st.open_writes);
        // SAFETY: held exclusively.
        unsafe { self.for_each_slot(|s| n = n.saturating_add(s.open_reads)) };
        n
    }

    /// True when the core is orphaned and no op is counted open on it any more:
    /// the caller, which closed the last open count, frees it once it has let go
    /// of it.
    ///
    /// # Safety
    /// The caller holds the object exclusively.
    #[inline(always)]
    pub(crate) unsafe fn last_op_closed(&self) -> bool {
        // SAFETY: the caller's contract.
        self.orphaned.load(Ordering::Relaxed) && unsafe { self.open_ops() } == 0
    }

    /// Keeps `make()`'s value (the memory of a buffer being freed, which its drop
    /// frees) while foreign ops are counted open on the object: their work is on
    /// their streams already but becomes known only when they end and publish, so
    /// the op end that closes the last of them drops it, after publishing (see
    /// [`SyncCore::take_kept`]). False, with `make` not called, when no op is open.
    pub(crate) fn keep_while_open(&self, make: impl FnOnce() -> Box<dyn Send>) -> bool {
        let _held = self.exclusive();
        // SAFETY: held exclusively.
        if unsafe { self.open_ops() } == 0 {
            return false;
        }
        let kept = make();
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(kept);
        // Seen by every slot reader after this hold: none takes the core now, so
        // every open op closes its count with the object held exclusively.
        self.free_deferred.store(true, Ordering::Relaxed);
        true
    }

    /// What [`SyncCore::keep_while_open`] kept, once no foreign op is counted open
    /// any more: the caller, which closed the last open count, drops it after
    /// letting go of every object it holds.
    ///
    /// # Safety
    /// The caller holds the object exclusively.
    #[inline(always)]
    pub(crate) unsafe fn take_kept(&self) -> Option<Vec<Box<dyn Send>>> {
        // SAFETY: the caller's contract.
        if !self.free_deferred.load(Ordering::Relaxed) || unsafe { self.open_ops() } != 0 {
            return None;
        }
        self.free_deferred.store(false, Ordering::Relaxed);
        Some(std::mem::take(
            &mut *self.kept.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    /// Holds the object exclusively: the state's lock, then every slot in use.
    /// `slot`: a reader slot to mark in use first (the caller will read through it).
    #[inline(always)]
    pub(crate) fn lock_exclusive(&self, slot: Option<usize>) {
        #[cfg(debug_assertions)]
        let _ = EXCLUSIVE_HOLDS.try_with(|c| c.set(c.get() + 1));
        self.state.lock_raw();
        if let Some(i) = slot {
            let bit = 1u32 << i;
            // Bits change only under the state's lock (held): a plain check.
            if self.used.load(Ordering::Relaxed) & bit == 0 {
                self.mark_used(bit);
            }
        }
        let mut m = self.used.load(Ordering::Relaxed);
        while m != 0 {
            self.slot_lock(m.trailing_zeros() as usize).lock_spin();
            m &= m - 1;
        }
    }

    /// Sets `bit` in `used` (the first bit allocates the slots). Under the state's lock.
    #[cold]
    fn mark_used(&self, bit: u32) {
        if self.slots.load(Ordering::Relaxed).is_null() {
            let slots: Box<[ReaderSlot; READER_SLOTS]> =
                Box::new(std::array::from_fn(|_| ReaderSlot {
                    lock: ObjLock::new(SlotState::default()),
                }));
            self.slots.store(Box::into_raw(slots), Ordering::Relaxed);
        }
        // Release: a slot reader that sees the bit also sees the slots and the state
        // written by every holder before this one.
        self.used.fetch_or(bit, Ordering::AcqRel);
    }

    /// Slot `i`'s lock. Its bit in `used` is set, and seen by the caller through
    /// the state's lock or an acquire load of `used`.
    #[inline(always)]
    fn slot_lock(&self, i: usize) -> &ObjLock<SlotState> {
        // SAFETY: a set bit means the slots were allocated (before the bit was set,
        // which the caller saw); they live as long as the object.
        unsafe { &(*self.slots.load(Ordering::Relaxed))[i].lock }
    }

    /// Releases what [`SyncObject::lock_exclusive`] took.
    ///
    /// # Safety
    /// The caller holds the object exclusively.
    #[inline(always)]
    pub(crate) unsafe fn unlock_exclusive(&self) {
        // Unchanged since the lock: bits are set only under the state's lock.
        let mut m = self.used.load(Ordering::Relaxed);
        while m != 0 {
            // SAFETY: locked by `lock_exclusive`.
            unsafe {
                self.slot_lock(m.trailing_zeros() as usize)
                    .unlock_unparked()
            };
            m &= m - 1;
        }
        // SAFETY: locked by `lock_exclusive`.
        unsafe { self.state.unlock() };
    }

    /// Holds the object exclusively until the guard drops (off the op path).
    pub(crate) fn exclusive(&self) -> Exclusive<'_> {
        self.lock_exclusive(None);
        Exclusive { obj: self }
    }

    /// Takes reader slot `i` for a read by stream `me`, when the read can go through
    /// the slot alone: `me` owns the slot, no exclusive holder is there or waiting,
    /// the object is no fresh allocation and it is neither orphaned nor keeping a
    /// freed buffer's memory (an op closing its count there must see whether it
    /// was the last). Never waits.
    ///
    /// Completed recordings are pruned only by exclusive holders: a slot reader
    /// skips a writer known complete instead (`waits_for_slot`). Requiring a prune
    /// here sent every reader of a shared object to the exclusive path after each
    /// host wait anywhere, where they queued behind each other (issue 17).
    #[inline(always)]
    pub(crate) fn try_read_slot(&self, i: usize, me: u64) -> bool {
        self.take_slot(i, me).is_ok()
    }

    /// [`SyncCore::try_read_slot`]; when an exclusive holder is there, waits
    /// (bounded) for it to let go and tries again, rather than queueing for the
    /// object exclusively: readers that queue keep each other on the exclusive path
    /// long after the holder has gone. A caller that holds earlier objects of its
    /// set keeps the lock order (any holder of this object took those first).
    /// False: the read takes the object exclusively.
    #[inline(always)]
    pub(crate) fn read_slot_or_wait(&self, i: usize, me: u64) -> bool {
        match self.take_slot(i, me) {
            Ok(()) => true,
            Err(SlotMiss::Exclusive) => false,
            Err(SlotMiss::Busy) => self.read_slot_after_waiting(i, me),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_slot_after_waiting(&self, i: usize, me: u64) -> bool {
        for spin in 0..SLOT_WAIT_SPINS {
            if spin < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            if self.state.is_locked() {
                continue;
            }
            match self.take_slot(i, me) {
                Ok(()) => return true,
                Err(SlotMiss::Exclusive) => return false,
                Err(SlotMiss::Busy) => {}
            }
        }
        false
    }

    #[inline(always)]
    fn take_slot(&self, i: usize, me: u64) -> Result<(), SlotMiss> {
        // Acquire: pairs with the fetch_or in `lock_exclusive`.
        if self.used.load(Ordering::Acquire) & (1u32 << i) == 0 {
            return Err(SlotMiss::Exclusive);
        }
        let slot = self.slot_lock(i);
        if !slot.try_lock() {
            return Err(SlotMiss::Busy);
        }
        let miss = if self.state.is_locked() {
            Some(SlotMiss::Busy)
        } else {
            // SAFETY: the slot is held, so no exclusive holder writes the state (it
            // must take this slot first); the slot's own state is ours.
            let ok = !self.orphaned.load(Ordering::Relaxed)
                && !self.free_deferred.load(Ordering::Relaxed)
                && unsafe { self.state.get_shared() }.alloc_on.is_none()
                && unsafe { slot.get() }.owner == me;
            (!ok).then_some(SlotMiss::Exclusive)
        };
        match miss {
            None => Ok(()),
            Some(m) => {
                // SAFETY: taken just above.
                unsafe { slot.unlock_unparked() };
                Err(m)
            }
        }
    }

    /// Releases reader slot `i`.
    ///
    /// # Safety
    /// The caller holds it through [`SyncObject::try_read_slot`].
    #[inline(always)]
    pub(crate) unsafe fn unlock_slot(&self, i: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.slot_lock(i).unlock_unparked() }
    }

    /// The state of reader slot `i`.
    ///
    /// # Safety
    /// The caller holds the slot (alone, or the object exclusively).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slot(&self, i: usize) -> &mut SlotState {
        // SAFETY: the caller's contract.
        unsafe { self.slot_lock(i).get() }
    }

    /// Runs `f` on every slot in use.
    ///
    /// # Safety
    /// The caller holds the object exclusively.
    #[inline(always)]
    pub(crate) unsafe fn for_each_slot(&self, mut f: impl FnMut(&mut SlotState)) {
        let mut m = self.used.load(Ordering::Relaxed);
        while m != 0 {
            // SAFETY: every slot in `used` is held (the caller's contract).
            f(unsafe { self.slot_lock(m.trailing_zeros() as usize).get() });
            m &= m - 1;
        }
    }

    /// Number of reader entries (at most one per stream).
    pub fn reader_count(&self) -> usize {
        self.exclusive().readers().len()
    }

    pub fn has_writer(&self) -> bool {
        self.exclusive().state().writer.is_some()
    }

    fn pending(&self, include_readers: bool, op: &str) -> Result<Vec<RecRef>> {
        let mut ex = self.exclusive();
        let st = ex.state();
        if st.captures != 0 {
            drop(ex);
            crate::capture::poison_users(self.id, op);
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                format!("{op} on {self:?} is not allowed while a capturing stream uses it"),
            ));
        }
        let mut v: Vec<RecRef> = Vec::new();
        // Memory valid in its home stream's order (a DLPack import's `ready_on`):
        // a host read follows that stream's work up to here.
        v.extend(st.order_after_alloc()?);
        v.extend(st.writer.iter().cloned());
        if include_readers {
            v.extend(ex.readers());
        }
        Ok(v)
    }

    /// A recording after this memory's allocation point in its home stream's
    /// order, while it has one no use has ordered yet.
    pub(crate) fn alloc_point(&self) -> Option<RecRef> {
        let home = self.exclusive().state().alloc_on.clone()?;
        home.mark_outside_capture().ok()
    }

    /// Blocks until the last writer's work completed.
    pub fn wait_read(&self) -> Result<()> {
        for r in self.pending(false, "host wait_read")? {
            r.synchronize()?;
        }
        Ok(())
    }

    /// Blocks until the last writer's and every reader's work completed.
    pub fn wait_write(&self) -> Result<()> {
        for r in self.pending(true, "host wait_write")? {
            r.synchronize()?;
        }
        Ok(())
    }

    /// All outstanding recordings (writer and readers), for frees.
    pub(crate) fn outstanding(&self) -> Vec<RecRef> {
        let mut ex = self.exclusive();
        let mut v = ex.readers();
        v.extend(ex.state().writer.iter().cloned());
        v
    }
}

mod access;
pub use access::*;

#[cfg(test)]
mod layout {
    use super::*;

    #[test]
    fn the_slot_paths_fields_share_the_first_line() {
        let o = SyncObject::new();
        let base = &**o as *const SyncCore as usize;
        // SAFETY: only addresses are taken.
        let st = unsafe { o.state.get_shared() };
        for (name, at) in [
            ("used", &o.used as *const _ as usize),
            ("orphaned", &o.orphaned as *const _ as usize),
            ("free_deferred", &o.free_deferred as *const _ as usize),
            ("slots", &o.slots as *const _ as usize),
            ("writer", &st.writer as *const _ as usize),
            ("alloc_on", &st.alloc_on as *const _ as usize),
            ("writes", &st.writes as *const _ as usize),
            ("open_writes", &st.open_writes as *const _ as usize),
        ] {
            assert!(at - base < 64, "{name} at offset {}", at - base);
        }
    }
}

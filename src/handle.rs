//! Generational handle tables: `u64` handles that name a shared object (`Arc<T>`,
//! or a recycled [`crate::stream::RecRef`]).
//!
//! Bits: `[tag:8][generation:24][index:32]`. The tag names the table (so a stream
//! handle passed as an event is rejected), the generation rejects stale handles, and
//! 0 is never valid.
//!
//! Lookups take no lock and write no shared memory. Slots live in segments that
//! never move; each has a state word `[generation:24][live:1]` and a pointer. A
//! lookup pins the thread ([`crate::epoch`]), reads the state, the pointer and the
//! state again (a changed state means the entry went away: stale). `remove` clears
//! the live bit, waits until lookups that may have read the slot are done (none,
//! usually) and hands the table's reference to the caller, so the object is
//! dropped in the destroying call. The free list is a tagged lock-free stack.

use crate::epoch;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const GEN_MASK: u64 = 0xff_ffff;
const LIVE: u64 = 1 << 31;
/// Slots in segment 0; segment k holds `SEG0 << k` slots.
const SEG0_LOG: u32 = 6;
const SEG0: usize = 1 << SEG0_LOG;
const SEGMENTS: usize = 26;

/// A pointer type a table can hold: converts to and from one raw pointer. Tables
/// of shared objects hold `Arc`s (cloned by [`HandleTable::get`]); a token table
/// may hold a `Box`, owned by the handle alone.
///
/// # Safety
/// `from_raw(into_raw(p))` must give back `p`, and the pointee must stay valid
/// while that raw pointer is owned.
pub unsafe trait Shared {
    type Target;
    fn into_raw(self) -> *const Self::Target;
    /// # Safety
    /// `p` came from `into_raw` and is owned by the caller.
    unsafe fn from_raw(p: *const Self::Target) -> Self;
}

// SAFETY: Box's own raw round trip.
unsafe impl<T> Shared for Box<T> {
    type Target = T;
    fn into_raw(self) -> *const T {
        Box::into_raw(self)
    }
    unsafe fn from_raw(p: *const T) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Box::from_raw(p.cast_mut()) }
    }
}

// SAFETY: Arc's own raw round trip.
unsafe impl<T> Shared for Arc<T> {
    type Target = T;
    fn into_raw(self) -> *const T {
        Arc::into_raw(self)
    }
    unsafe fn from_raw(p: *const T) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Arc::from_raw(p) }
    }
}

#[repr(align(64))]
struct Slot<P: Shared> {
    state: AtomicU64,
    value: AtomicPtr<P::Target>,
    /// Next free index + 1 (0: none) while the slot is on the free list.
    next_free: AtomicU32,
}

/// `repr(C)` and line-aligned, so that `tag` and the first segments share one cache
/// line: a lookup reads both, and Rust's own field order and the static's placement
/// put them on two. The words that inserts and removes write (`free_head`, `next`)
/// lie lines after.
#[repr(C, align(64))]
pub struct HandleTable<P: Shared> {
    tag: u8,
    /// False for tables of single-use tokens, whose entries are only ever removed:
    /// no lookup can hold one, so `remove` need not wait for lookups.
    borrowed: bool,
    segments: [AtomicPtr<Slot<P>>; SEGMENTS],
    /// Free list head: `[tag:32][index + 1:32]`; the tag changes on every update,
    /// so a stale compare-exchange cannot succeed (no ABA).
    free_head: AtomicU64,
    /// Indexes handed out so far.
    next: AtomicUsize,
    /// Serialises segment allocation only.
    grow: Mutex<()>,
    _owns: PhantomData<P>,
}

// SAFETY: the table hands out `P`s across threads; it is as thread-safe as `P`.
unsafe impl<P: Shared + Send + Sync> Sync for HandleTable<P> {}
// SAFETY: as above.
unsafe impl<P: Shared + Send + Sync> Send for HandleTable<P> {}

/// A slot index taken out of a table by [`HandleTable::remove_reserving`]: its
/// slot is not live and not on the free list, so its holder alone may fill it
/// ([`HandleTable::insert_reserved`]) or give it back ([`HandleTable::give_back`]).
/// Neither `Clone` nor `Copy`: one index, used once.
#[derive(Debug)]
pub struct Reserved(usize);

/// The index of a slot whose generation is spent: never reused.
const RETIRED: usize = usize::MAX;

impl Reserved {
    #[inline(always)]
    fn into_index(self) -> usize {
        self.0
    }
}

/// Why a handle did not resolve.
#[derive(Debug, PartialEq, Eq)]
pub enum Stale {
    Null,
    WrongType,
    Dead,
}

/// A borrowed table entry: the object cannot be dropped by the table while this
/// lives (the thread stays pinned). Keep it short-lived.
pub struct Borrowed<'a, P: Shared> {
    value: ManuallyDrop<P>,
    _pin: epoch::Guard,
    _table: PhantomData<&'a ()>,
}

impl<P: Shared> Deref for Borrowed<'_, P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.value
    }
}

fn segment_of(index: usize) -> (usize, usize) {
    let j = index + SEG0;
    let k = (usize::BITS - 1 - j.leading_zeros() - SEG0_LOG) as usize;
    (k, j - (SEG0 << k))
}

impl<P: Shared> HandleTable<P> {
    /// A table (const, so that a table can be a plain `static`: the op path then
    /// reads no initialisation state before it).
    pub const fn new(tag: u8) -> Self {
        Self::with_lookups(tag, true)
    }

    /// A table whose entries are only inserted and removed, never looked up (tokens
    /// such as open ops): removing one does not wait for other threads' lookups.
    pub const fn new_tokens(tag: u8) -> Self {
        Self::with_lookups(tag, false)
    }

    const fn with_lookups(tag: u8, borrowed: bool) -> Self {
        HandleTable {
            tag,
            borrowed,
            segments: [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS],
            free_head: AtomicU64::new(0),
            next: AtomicUsize::new(0),
            grow: Mutex::new(()),
            _owns: PhantomData,
        }
    }

    #[inline(always)]
    fn split(&self, bits: u64) -> Result<(usize, u64), Stale> {
        if bits == 0 {
            return Err(Stale::Null);
        }
        if (bits >> 56) as u8 != self.tag {
            return Err(Stale::WrongType);
        }
        Ok(((bits & 0xffff_ffff) as usize, (bits >> 32) & GEN_MASK))
    }

    #[inline(always)]
    fn slot(&self, index: usize) -> Option<&Slot<P>> {
        let (k, off) = segment_of(index);
        let seg = self.segments.get(k)?.load(Ordering::Acquire);
        if seg.is_null() {
            return None;
        }
        // SAFETY: segment k holds SEG0 << k slots and lives as long as the table.
        Some(unsafe { &*seg.add(off) })
    }

    /// The slot for a fresh index; allocates its segment on first use.
    #[inline(always)]
    fn slot_for_insert(&self, index: usize) -> &Slot<P> {
        let (k, off) = segment_of(index);
        let mut seg = self.segments[k].load(Ordering::Acquire);
        if seg.is_null() {
            seg = self.grow_segment(k);
        }
        // SAFETY: as in `slot`.
        unsafe { &*seg.add(off) }
    }

    /// Segment `k`, allocated by the first caller.
    #[cold]
    fn grow_segment(&self, k: usize) -> *mut Slot<P> {
        let _g = self.grow.lock().unwrap_or_else(|p| p.into_inner());
        let mut seg = self.segments[k].load(Ordering::Acquire);
        if seg.is_null() {
            let slots: Box<[Slot<P>]> = (0..SEG0 << k)
                .map(|_| Slot {
                    state: AtomicU64::new(0),
                    value: AtomicPtr::new(std::ptr::null_mut()),
                    next_free: AtomicU32::new(0),
                })
                .collect();
            seg = Box::into_raw(slots).cast::<Slot<P>>();
            self.segments[k].store(seg, Ordering::Release);
        }
        seg
    }

    /// Pops a free index, or hands out a fresh one.
    fn take_index(&self) -> usize {
        let mut h = self.free_head.load(Ordering::Acquire);
        while h as u32 != 0 {
            let index = (h as u32 - 1) as usize;
            let next = self
                .slot(index)
                .map_or(0, |s| s.next_free.load(Ordering::Relaxed));
            let new = ((h >> 32).wrapping_add(1) << 32) | next as u64;
            match self
                .free_head
                .compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return index,
                Err(now) => h = now,
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        assert!(
            segment_of(i).0 < SEGMENTS && i < u32::MAX as usize,
            "handle table full"
        );
        i
    }

    fn push_free(&self, index: usize, slot: &Slot<P>) {
        let mut h = self.free_head.load(Ordering::Acquire);
        loop {
            slot.next_free.store(h as u32, Ordering::Relaxed);
            let new = ((h >> 32).wrapping_add(1) << 32) | (index as u64 + 1);
            match self
                .free_head
                .compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => h = now,
            }
        }
    }

    pub fn insert(&self, value: P) -> u64 {
        let index = self.take_index();
        self.insert_into(index, value)
    }

    /// Inserts `value` at an index taken out of the table's free list by
    /// [`HandleTable::remove_reserving`] (no shared free-list head is touched).
    /// The index must come from this table.
    #[inline(always)]
    pub fn insert_reserved(&self, index: Reserved, value: P) -> u64 {
        match index.into_index() {
            RETIRED => self.insert(value),
            i => self.insert_into(i, value),
        }
    }

    /// Puts an index kept by [`HandleTable::remove_reserving`] back on the free
    /// list. The index must come from this table.
    pub fn give_back(&self, index: Reserved) {
        let i = index.into_index();
        if i == RETIRED {
            return;
        }
        if let Some(slot) = self.slot(i) {
            self.push_free(i, slot);
        }
    }

    /// Writes `value` into the slot of `index`, which no one else holds (fresh, or
    /// taken off the free list, or reserved), and makes it live.
    #[inline(always)]
    fn insert_into(&self, index: usize, value: P) -> u64 {
        let raw = value.into_raw().cast_mut();
        let slot = self.slot_for_insert(index);
        slot.value.store(raw, Ordering::Release);
        // A fresh slot (generation 0) starts at generation 1; a reused one had its
        // generation advanced by `remove`. Only insert and remove write the word.
        let generation = match (slot.state.load(Ordering::Relaxed) >> 32) & GEN_MASK {
            0 => 1,
            g => g,
        };
        slot.state
            .store((generation << 32) | LIVE, Ordering::Release);
        ((self.tag as u64) << 56) | (generation << 32) | index as u64
    }

    /// Borrows the object named by `bits` without cloning it.
    #[inline(always)]
    pub fn borrow(&self, bits: u64) -> Result<Borrowed<'_, P>, Stale> {
        let pin = epoch::pin();
        let p = self.lookup(bits)?;
        Ok(Borrowed {
            // SAFETY: read while live and pinned, so the object is not dropped before
            // the pin ends; ManuallyDrop keeps the table's reference.
            value: ManuallyDrop::new(unsafe { P::from_raw(p) }),
            _pin: pin,
            _table: PhantomData,
        })
    }

    /// The object named by `bits`, valid while the caller's pin lasts.
    #[inline(always)]
    pub fn get_pinned<'g>(
        &'g self,
        _pin: &'g epoch::Guard,
        bits: u64,
    ) -> Result<&'g P::Target, Stale> {
        // SAFETY: read while live and pinned: the table drops its reference only
        // after every pin that saw the entry has ended.
        self.lookup(bits).map(|p| unsafe { &*p })
    }

    /// The entry's pointer, if `bits` names a live entry. The caller is pinned.
    #[inline(always)]
    fn lookup(&self, bits: u64) -> Result<*const P::Target, Stale> {
        debug_assert!(epoch::is_pinned());
        debug_assert!(self.borrowed, "a token table is never looked up");
        let (index, generation) = self.split(bits)?;
        let slot = self.slot(index).ok_or(Stale::Dead)?;
        let s = slot.state.load(Ordering::SeqCst);
        if s & LIVE == 0 || (s >> 32) & GEN_MASK != generation {
            return Err(Stale::Dead);
        }
        let p = slot.value.load(Ordering::Acquire);
        // The pointer belongs to this generation only if the state did not change.
        if slot.state.load(Ordering::SeqCst) != s {
            return Err(Stale::Dead);
        }
        Ok(p)
    }

    pub fn get(&self, bits: u64) -> Result<P, Stale>
    where
        P: Clone,
    {
        self.get_pinned_clone(&epoch::pin(), bits)
    }

    /// [`HandleTable::get`] under the caller's pin (one pin for several lookups).
    #[inline(always)]
    pub fn get_pinned_clone(&self, _pin: &epoch::Guard, bits: u64) -> Result<P, Stale>
    where
        P: Clone,
    {
        let p = self.lookup(bits)?;
        // SAFETY: read while live and pinned, so the object is not dropped before
        // the clone; ManuallyDrop keeps the table's reference.
        Ok((*ManuallyDrop::new(unsafe { P::from_raw(p) })).clone())
    }

    /// Runs `f` on the object without cloning it. `f` must not remove this entry.
    #[inline(always)]
    pub fn with<R>(&self, bits: u64, f: impl FnOnce(&P) -> R) -> Result<R, Stale> {
        let b = self.borrow(bits)?;
        Ok(f(&b))
    }

    /// Removes the entry and returns a reference to its object. The table's own
    /// reference is dropped once no lookup can still be using it.
    pub fn remove(&self, bits: u64) -> Result<P, Stale> {
        let (p, index) = self.remove_reserving(bits)?;
        self.give_back(index);
        Ok(p)
    }

    /// [`HandleTable::remove`], keeping the slot's index off the free list for the
    /// caller, who reuses it ([`HandleTable::insert_reserved`]) or gives it back
    /// ([`HandleTable::give_back`]). A thread that ends and begins ops in turn so
    /// reuses one slot, and writes no line that other threads' inserts write.
    #[inline(always)]
    pub fn remove_reserving(&self, bits: u64) -> Result<(P, Reserved), Stale> {
        let (index, generation) = self.split(bits)?;
        let slot = self.slot(index).ok_or(Stale::Dead)?;
        let mut s = slot.state.load(Ordering::SeqCst);
        loop {
            if s & LIVE == 0 || (s >> 32) & GEN_MASK != generation {
                return Err(Stale::Dead);
            }
            // A slot whose generation is spent keeps it, dead, and is never reused:
            // a wrap would bring its first handle back to life (64 bytes per 2^24
            // reuses of one slot).
            let next_gen = (generation + 1).min(GEN_MASK);
            match slot.state.compare_exchange_weak(
                s,
                next_gen << 32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let p = slot.value.load(Ordering::Acquire);
        // Lookups that read the slot before the unlink finish before this returns.
        // Removing while pinned could wait on a thread that waits on this one.
        debug_assert!(!epoch::is_pinned(), "handle removed inside a lookup");
        if self.borrowed {
            epoch::synchronize();
        }
        let reserved = Reserved(if generation == GEN_MASK {
            RETIRED
        } else {
            index
        });
        // SAFETY: the table's reference, taken out once (the CAS above succeeded once).
        Ok((unsafe { P::from_raw(p) }, reserved))
    }

    /// Number of live entries (for leak tests).
    pub fn len(&self) -> usize {
        (0..self.next.load(Ordering::Acquire))
            .filter(|&i| {
                self.slot(i)
                    .is_some_and(|s| s.state.load(Ordering::Acquire) & LIVE != 0)
            })
            .count()
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<P: Shared> Drop for HandleTable<P> {
    fn drop(&mut self) {
        for (k, seg) in self.segments.iter_mut().enumerate() {
            let seg = *seg.get_mut();
            if seg.is_null() {
                continue;
            }
            // SAFETY: allocated in slot_for_insert with exactly SEG0 << k slots.
            let slots =
                unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(seg, SEG0 << k)) };
            for s in slots.iter() {
                let p = s.value.load(Ordering::Relaxed);
                // Removed entries were handed out; only live ones are still the table's.
                if s.state.load(Ordering::Relaxed) & LIVE != 0 && !p.is_null() {
                    // SAFETY: the table's own reference, dropped once.
                    drop(unsafe { P::from_raw(p) });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_wrong_type_and_null_are_rejected() {
        let t = HandleTable::new(3);
        let h = t.insert(Arc::new(7));
        assert_eq!(*t.get(h).unwrap(), 7);
        assert_eq!(t.get(0).unwrap_err(), Stale::Null);
        assert_eq!(t.get(h ^ (1 << 56)).unwrap_err(), Stale::WrongType);
        t.remove(h).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.get(h).unwrap_err(), Stale::Dead);
        assert_eq!(t.remove(h).unwrap_err(), Stale::Dead);
        let h2 = t.insert(Arc::new(8));
        assert_ne!(h, h2, "a reused slot gets a new generation");
        assert_eq!(t.get(h).unwrap_err(), Stale::Dead);
        assert_eq!(*t.get(h2).unwrap(), 8);
    }

    /// A slot's generation never wraps: at the last one the slot is retired, so a
    /// handle destroyed 2^24 reuses ago does not come back to life.
    #[test]
    fn a_slot_whose_generation_is_spent_is_never_reused() {
        let t = HandleTable::new(6);
        let first = t.insert(Arc::new(1));
        t.remove(first).unwrap();
        // Skip to the slot's last generations, as 2^24 reuses would.
        let (index, _) = t.split(first).unwrap();
        t.slot(index)
            .unwrap()
            .state
            .store((GEN_MASK - 1) << 32, Ordering::SeqCst);
        let before_last = t.insert(Arc::new(2));
        assert_eq!(t.split(before_last).unwrap(), (index, GEN_MASK - 1));
        let (_, kept) = t.remove_reserving(before_last).unwrap();
        let last = t.insert_reserved(kept, Arc::new(3));
        assert_eq!(t.split(last).unwrap(), (index, GEN_MASK));
        let (_, kept) = t.remove_reserving(last).unwrap();
        let next = t.insert_reserved(kept, Arc::new(4));
        assert_ne!(t.split(next).unwrap().0, index, "a spent slot was reused");
        for stale in [first, before_last, last] {
            assert_eq!(t.get(stale).unwrap_err(), Stale::Dead);
        }
        t.remove(next).unwrap();
        for _ in 0..4 {
            let h = t.insert(Arc::new(5));
            assert_ne!(
                t.split(h).unwrap().0,
                index,
                "the free list gave out a spent slot"
            );
            t.remove(h).unwrap();
        }
    }

    #[test]
    fn forged_index_is_rejected() {
        let t: HandleTable<Arc<i32>> = HandleTable::new(9);
        let forged = (9u64 << 56) | (1 << 32) | 123_456;
        assert_eq!(t.get(forged).unwrap_err(), Stale::Dead);
        let beyond = (9u64 << 56) | (1 << 32) | 0xffff_ffff;
        assert_eq!(t.get(beyond).unwrap_err(), Stale::Dead);
    }

    #[test]
    fn segments_grow_and_entries_survive() {
        let t = HandleTable::new(4);
        let hs: Vec<u64> = (0..5000).map(|i| t.insert(Arc::new(i))).collect();
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(*t.get(*h).unwrap(), i);
        }
        assert_eq!(t.len(), 5000);
        for h in &hs[..2500] {
            t.remove(*h).unwrap();
        }
        assert_eq!(t.len(), 2500);
        assert_eq!(*t.get(hs[4999]).unwrap(), 4999);
    }

    #[test]
    fn remove_waits_for_a_borrow_taken_before_it_then_hands_the_object_over() {
        let t = Arc::new(HandleTable::new(5));
        let obj = Arc::new(42u64);
        let h = t.insert(obj.clone());
        let (borrowed_tx, borrowed_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t2 = t.clone();
        let reader = std::thread::spawn(move || {
            let b = t2.borrow(h).unwrap();
            borrowed_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            assert_eq!(**b, 42, "the borrowed object is intact");
        });
        borrowed_rx.recv().unwrap();
        let t3 = t.clone();
        let remover = std::thread::spawn(move || t3.remove(h).map(|p| *p));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !remover.is_finished(),
            "remove must wait for the earlier borrow"
        );
        assert_eq!(
            t.borrow(h).err(),
            Some(Stale::Dead),
            "but the handle is already dead"
        );
        go_tx.send(()).unwrap();
        reader.join().unwrap();
        assert_eq!(remover.join().unwrap(), Ok(42));
        assert_eq!(
            Arc::strong_count(&obj),
            1,
            "the table's reference was dropped"
        );
        assert_eq!(t.remove(h).err(), Some(Stale::Dead));
    }

    #[test]
    fn a_token_table_removes_without_waiting_for_other_threads_pins() {
        let tokens = HandleTable::new_tokens(5);
        let h = tokens.insert(Arc::new(7u8));
        // Another thread stays pinned (a lookup in some other table) until told.
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _pin = epoch::pin();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        pinned_rx.recv().unwrap();
        let tokens = Arc::new(tokens);
        let t2 = tokens.clone();
        let remover = std::thread::spawn(move || t2.remove(h).map(|p| *p));
        let t0 = std::time::Instant::now();
        while !remover.is_finished() && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let finished = remover.is_finished();
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(finished, "remove must not wait for the other thread's pin");
        assert_eq!(remover.join().unwrap(), Ok(7));
        assert_eq!(
            tokens.remove(h).err(),
            Some(Stale::Dead),
            "removed once only"
        );
    }

    #[test]
    fn a_reserved_slot_is_reused_with_a_new_generation_and_never_twice() {
        let t = HandleTable::new_tokens(4);
        let h1 = t.insert(Box::new(1u32));
        let other = t.insert(Box::new(9u32));
        let (v, r) = t.remove_reserving(h1).unwrap();
        assert_eq!(*v, 1);
        assert_eq!(t.remove_reserving(h1).err(), Some(Stale::Dead));
        // Off the free list: an ordinary insert takes a fresh index.
        let h3 = t.insert(Box::new(3u32));
        assert_ne!(h3 & 0xffff_ffff, h1 & 0xffff_ffff);
        let h2 = t.insert_reserved(r, Box::new(2u32));
        assert_eq!(
            h1 & 0xffff_ffff,
            h2 & 0xffff_ffff,
            "the reserved slot was reused"
        );
        assert_ne!(h1, h2, "with a new generation");
        assert_eq!(
            t.remove(h1).err(),
            Some(Stale::Dead),
            "the old handle stays dead"
        );
        assert_eq!(t.len(), 3);
        // Given back, the slot is on the free list again.
        let (_, r) = t.remove_reserving(h2).unwrap();
        t.give_back(r);
        let h4 = t.insert(Box::new(4u32));
        assert_eq!(h4 & 0xffff_ffff, h1 & 0xffff_ffff);
        assert_eq!(t.remove(h2).err(), Some(Stale::Dead));
        for h in [h3, h4, other] {
            t.remove(h).unwrap();
        }
        assert!(t.is_empty());
    }

    #[test]
    fn a_reused_slot_never_serves_the_old_handle() {
        let t = HandleTable::new(7);
        let h1 = t.insert(Arc::new(1u32));
        t.remove(h1).unwrap();
        let h2 = t.insert(Arc::new(2u32));
        assert_eq!(h1 & 0xffff_ffff, h2 & 0xffff_ffff, "the slot was reused");
        assert_eq!(t.get(h1).err(), Some(Stale::Dead));
        assert_eq!(*t.get(h2).unwrap(), 2);
    }

    #[test]
    fn concurrent_lookups_inserts_and_removes_stay_consistent() {
        let t = Arc::new(HandleTable::new(6));
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..if cfg!(miri) { 300 } else { 20_000u64 } {
                        let v = w * 1_000_000 + i;
                        let h = t.insert(Arc::new(v));
                        assert_eq!(*t.get(h).unwrap(), v);
                        assert_eq!(t.with(h, |p| **p).unwrap(), v);
                        assert_eq!(*t.remove(h).unwrap(), v);
                        assert_eq!(t.get(h).unwrap_err(), Stale::Dead);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert!(t.is_empty());
    }

    #[test]
    fn lookups_racing_removes_of_the_same_handles_see_live_or_stale_only() {
        // Readers hammer a shared set of handles while writers remove and replace
        // them. Every lookup must see the value the handle was created with, or
        // Stale::Dead; every removed object must be dropped exactly once.
        struct Tracked(u64, Arc<AtomicUsize>);
        impl Drop for Tracked {
            fn drop(&mut self) {
                self.1.fetch_add(1, Ordering::SeqCst);
            }
        }
        let t = Arc::new(HandleTable::new(8));
        let drops = Arc::new(AtomicUsize::new(0));
        let handles: Arc<Vec<AtomicU64>> = Arc::new(
            (0..16u64)
                .map(|v| AtomicU64::new(t.insert(Arc::new(Tracked(v, drops.clone())))))
                .collect(),
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let start = Arc::new(std::sync::Barrier::new(4));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (t, handles, stop) = (t.clone(), handles.clone(), stop.clone());
                let start = start.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    start.wait();
                    while seen == 0 || !stop.load(Ordering::SeqCst) {
                        for (i, h) in handles.iter().enumerate() {
                            match t.with(h.load(Ordering::SeqCst), |p| p.0) {
                                Ok(v) => {
                                    assert_eq!(v % 16, i as u64, "a lookup saw another object");
                                    seen += 1;
                                }
                                Err(e) => assert_eq!(e, Stale::Dead),
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut created = 16u64;
        start.wait();
        for round in 0..2000u64 {
            let i = (round % 16) as usize;
            let old = handles[i].load(Ordering::SeqCst);
            let v = t.remove(old).expect("only this thread removes");
            assert_eq!(v.0 % 16, i as u64);
            drop(v);
            let next = 16 * (round + 1) + i as u64;
            handles[i].store(
                t.insert(Arc::new(Tracked(next, drops.clone()))),
                Ordering::SeqCst,
            );
            created += 1;
        }
        stop.store(true, Ordering::SeqCst);
        let seen: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(seen > 0, "the readers ran");
        assert_eq!(
            drops.load(Ordering::SeqCst) as u64,
            created - 16,
            "each removed object dropped once"
        );
        assert_eq!(t.len(), 16);
    }
}

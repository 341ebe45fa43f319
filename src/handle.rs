//! Generational handle tables: `u64` handles that name a shared object (`Arc<T>`,
//! or a recycled [`crate::stream::RecRef`]).
//!
//! Bits: `[tag:8][generation:24][index:32]`. The tag names the table (so a stream
//! handle passed as an event is rejected), the generation rejects stale handles, and
//! 0 is never valid.
//!
//! Lookups take no lock. Slots live in segments that never move; each slot has one
//! atomic state word `[generation:24][live:1][borrows:31]`. A lookup adds a borrow,
//! checks the generation and the live bit, and drops the borrow when done; `remove`
//! clears the live bit and waits for the borrows to drain before handing the object
//! back. Only `insert` and `remove` take the table's mutex (for the free list).

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const GEN_MASK: u64 = 0xff_ffff;
const LIVE: u64 = 1 << 31;
const BORROWS: u64 = LIVE - 1;
/// Slots in segment 0; segment k holds `SEG0 << k` slots.
const SEG0_LOG: u32 = 6;
const SEG0: usize = 1 << SEG0_LOG;
const SEGMENTS: usize = 26;

/// A pointer type a table can hold: converts to and from one raw pointer.
///
/// # Safety
/// `from_raw(into_raw(p))` must give back `p`, and the pointee must stay valid
/// while that raw pointer is owned.
pub unsafe trait Shared: Clone {
    type Target;
    fn into_raw(self) -> *const Self::Target;
    /// # Safety
    /// `p` came from `into_raw` and is owned by the caller.
    unsafe fn from_raw(p: *const Self::Target) -> Self;
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
}

struct Alloc {
    next: usize,
    free: Vec<u32>,
}

pub struct HandleTable<P: Shared> {
    tag: u8,
    segments: [AtomicPtr<Slot<P>>; SEGMENTS],
    alloc: Mutex<Alloc>,
    _owns: PhantomData<P>,
}

// SAFETY: the table hands out `P`s across threads; it is as thread-safe as `P`.
unsafe impl<P: Shared + Send + Sync> Sync for HandleTable<P> {}
// SAFETY: as above.
unsafe impl<P: Shared + Send + Sync> Send for HandleTable<P> {}

/// Why a handle did not resolve.
#[derive(Debug, PartialEq, Eq)]
pub enum Stale {
    Null,
    WrongType,
    Dead,
}

/// A borrowed table entry: the object cannot be removed from the table (and so
/// cannot be dropped by it) until this is dropped. Keep it short-lived.
pub struct Borrowed<'a, P: Shared> {
    state: &'a AtomicU64,
    value: ManuallyDrop<P>,
}

impl<P: Shared> Deref for Borrowed<'_, P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.value
    }
}

impl<P: Shared> std::borrow::Borrow<P> for Borrowed<'_, P> {
    fn borrow(&self) -> &P {
        &self.value
    }
}

impl<P: Shared> Drop for Borrowed<'_, P> {
    fn drop(&mut self) {
        self.state.fetch_sub(1, Ordering::Release);
    }
}

fn segment_of(index: usize) -> (usize, usize) {
    let j = index + SEG0;
    let k = (usize::BITS - 1 - j.leading_zeros() - SEG0_LOG) as usize;
    (k, j - (SEG0 << k))
}

impl<P: Shared> HandleTable<P> {
    pub fn new(tag: u8) -> Self {
        HandleTable {
            tag,
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            alloc: Mutex::new(Alloc {
                next: 0,
                free: Vec::new(),
            }),
            _owns: PhantomData,
        }
    }

    fn split(&self, bits: u64) -> Result<(usize, u64), Stale> {
        if bits == 0 {
            return Err(Stale::Null);
        }
        if (bits >> 56) as u8 != self.tag {
            return Err(Stale::WrongType);
        }
        Ok(((bits & 0xffff_ffff) as usize, (bits >> 32) & GEN_MASK))
    }

    fn slot(&self, index: usize) -> Option<&Slot<P>> {
        let (k, off) = segment_of(index);
        let seg = self.segments.get(k)?.load(Ordering::Acquire);
        if seg.is_null() {
            return None;
        }
        // SAFETY: segment k holds SEG0 << k slots and lives as long as the table.
        Some(unsafe { &*seg.add(off) })
    }

    /// The slot for a new index; allocates its segment on first use (alloc lock held).
    fn slot_for_insert(&self, index: usize) -> &Slot<P> {
        let (k, off) = segment_of(index);
        let mut seg = self.segments[k].load(Ordering::Acquire);
        if seg.is_null() {
            let slots: Box<[Slot<P>]> = (0..SEG0 << k)
                .map(|_| Slot {
                    state: AtomicU64::new(0),
                    value: AtomicPtr::new(std::ptr::null_mut()),
                })
                .collect();
            seg = Box::into_raw(slots).cast::<Slot<P>>();
            self.segments[k].store(seg, Ordering::Release);
        }
        // SAFETY: as in `slot`.
        unsafe { &*seg.add(off) }
    }

    pub fn insert(&self, value: P) -> u64 {
        let raw = value.into_raw().cast_mut();
        let mut a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        let index = match a.free.pop() {
            Some(i) => i as usize,
            None => {
                let i = a.next;
                assert!(
                    segment_of(i).0 < SEGMENTS && i < u32::MAX as usize,
                    "handle table full"
                );
                a.next += 1;
                i
            }
        };
        let slot = self.slot_for_insert(index);
        drop(a);
        slot.value.store(raw, Ordering::Relaxed);
        // A fresh slot (generation 0) starts at generation 1; a reused one had its
        // generation advanced by `remove`. Stray borrows may be counted in the low
        // bits, so the word is only ever changed by adding.
        let s = slot.state.load(Ordering::Relaxed);
        let add = if (s >> 32) & GEN_MASK == 0 {
            (1 << 32) | LIVE
        } else {
            LIVE
        };
        let generation = ((slot.state.fetch_add(add, Ordering::Release) + add) >> 32) & GEN_MASK;
        ((self.tag as u64) << 56) | (generation << 32) | index as u64
    }

    /// Borrows the object named by `bits` without cloning it.
    #[inline]
    pub fn borrow(&self, bits: u64) -> Result<Borrowed<'_, P>, Stale> {
        let (index, generation) = self.split(bits)?;
        let slot = self.slot(index).ok_or(Stale::Dead)?;
        let s = slot.state.fetch_add(1, Ordering::Acquire);
        if s & LIVE == 0 || (s >> 32) & GEN_MASK != generation {
            slot.state.fetch_sub(1, Ordering::Release);
            return Err(Stale::Dead);
        }
        let p = slot.value.load(Ordering::Acquire);
        Ok(Borrowed {
            state: &slot.state,
            // SAFETY: live and borrowed, so `remove` waits before taking the pointer;
            // ManuallyDrop keeps the table's reference.
            value: ManuallyDrop::new(unsafe { P::from_raw(p) }),
        })
    }

    pub fn get(&self, bits: u64) -> Result<P, Stale> {
        self.borrow(bits).map(|b| (*b).clone())
    }

    /// Runs `f` on the object without cloning it. `f` must not remove this entry.
    #[inline]
    pub fn with<R>(&self, bits: u64, f: impl FnOnce(&P) -> R) -> Result<R, Stale> {
        let b = self.borrow(bits)?;
        Ok(f(&b))
    }

    /// Removes the entry; the object lives on while other references hold it.
    pub fn remove(&self, bits: u64) -> Result<P, Stale> {
        let (index, generation) = self.split(bits)?;
        let slot = self.slot(index).ok_or(Stale::Dead)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if s & LIVE == 0 || (s >> 32) & GEN_MASK != generation {
                return Err(Stale::Dead);
            }
            // Generation 0 is skipped so that no live handle has a zero generation.
            let next_gen = ((generation + 1) & GEN_MASK).max(1);
            let new = (next_gen << 32) | (s & BORROWS);
            match slot
                .state
                .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        // Borrows that saw the entry live finish before the pointer is taken.
        let mut spins = 0u32;
        while slot.state.load(Ordering::Acquire) & BORROWS != 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let p = slot.value.swap(std::ptr::null_mut(), Ordering::Acquire);
        self.alloc
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free
            .push(index as u32);
        // SAFETY: the table owned this reference; no borrow can see it any more.
        Ok(unsafe { P::from_raw(p) })
    }

    /// Number of live entries (for leak tests).
    pub fn len(&self) -> usize {
        let a = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        (0..a.next)
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
                if !p.is_null() {
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
    fn remove_waits_for_a_borrow_and_drops_the_table_reference() {
        let t = Arc::new(HandleTable::new(5));
        let obj = Arc::new(42u64);
        let h = t.insert(obj.clone());
        let b = t.borrow(h).unwrap();
        let t2 = t.clone();
        let remover = std::thread::spawn(move || t2.remove(h).map(|p| *p));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!remover.is_finished(), "remove must wait for the borrow");
        assert_eq!(**b, 42);
        drop(b);
        assert_eq!(remover.join().unwrap(), Ok(42));
        assert_eq!(
            Arc::strong_count(&obj),
            1,
            "the table's reference was dropped"
        );
        assert_eq!(t.borrow(h).err(), Some(Stale::Dead));
    }

    #[test]
    fn concurrent_lookups_inserts_and_removes_stay_consistent() {
        let t = Arc::new(HandleTable::new(6));
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
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
}

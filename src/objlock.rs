//! The sync objects' lock: a futex mutex (Drepper's three-state design) whose raw
//! lock and unlock the op path calls directly. An op locks its objects in id order,
//! works on their states and unlocks them all at the end, without a guard per
//! object (guards moved through arrays cost store-forwarding stalls on that path).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

// The word first, so a state placed after it keeps its own field order.
#[repr(C)]
pub(crate) struct ObjLock<T> {
    word: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached while the lock is held.
unsafe impl<T: Send> Sync for ObjLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for ObjLock<T> {}

impl<T> ObjLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        ObjLock {
            word: AtomicU32::new(UNLOCKED),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock; pair with [`ObjLock::unlock`].
    #[inline(always)]
    pub(crate) fn lock_raw(&self) {
        if self
            .word
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    /// Takes the lock if it is free; never waits. Pair a success with
    /// [`ObjLock::unlock`].
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> bool {
        self.word
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// True while some thread holds the lock (a hint: it may change at once).
    #[inline(always)]
    pub(crate) fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != UNLOCKED
    }

    #[cold]
    fn lock_contended(&self) {
        // Ops hold the lock for a few driver calls: spin briefly before sleeping.
        for _ in 0..64 {
            if self.word.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .word
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            std::hint::spin_loop();
        }
        while self.word.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex_wait(&self.word, CONTENDED);
        }
    }

    /// Takes the lock, spinning and then yielding while it is held; never parks.
    /// For locks whose every taker uses this or [`ObjLock::try_lock`], so that
    /// [`ObjLock::unlock_unparked`] may release them with a plain store.
    #[inline(always)]
    pub(crate) fn lock_spin(&self) {
        let mut spins = 0u32;
        while !self.try_lock() {
            while self.word.load(Ordering::Relaxed) != UNLOCKED {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Releases a lock that no thread parks on (see [`ObjLock::lock_spin`]): a
    /// release store, no read-modify-write.
    ///
    /// # Safety
    /// The caller holds it, and every taker of this lock uses `lock_spin` or
    /// `try_lock`.
    #[inline(always)]
    pub(crate) unsafe fn unlock_unparked(&self) {
        self.word.store(UNLOCKED, Ordering::Release);
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The caller holds it (took it with [`ObjLock::lock_raw`]).
    #[inline(always)]
    pub(crate) unsafe fn unlock(&self) {
        if self.word.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            futex_wake_one(&self.word);
        }
    }

    /// The protected value.
    ///
    /// # Safety
    /// The caller holds the lock, and no other reference to the value is live.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get(&self) -> &mut T {
        // SAFETY: exclusive while locked (the caller's contract).
        unsafe { &mut *self.value.get() }
    }

    /// The protected value, shared.
    ///
    /// # Safety
    /// No thread can write the value while the reference is live (the caller holds
    /// something that every writer must take too; see `SyncObject`'s reader slots).
    #[inline(always)]
    pub(crate) unsafe fn get_shared(&self) -> &T {
        // SAFETY: no writer while the reference lives (the caller's contract).
        unsafe { &*self.value.get() }
    }

    /// Locks and returns a guard (for paths off the op path).
    pub(crate) fn lock(&self) -> ObjGuard<'_, T> {
        self.lock_raw();
        ObjGuard { lock: self }
    }
}

pub(crate) struct ObjGuard<'a, T> {
    lock: &'a ObjLock<T>,
}

impl<T> std::ops::Deref for ObjGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held by this guard.
        unsafe { self.lock.get() }
    }
}

impl<T> std::ops::DerefMut for ObjGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: held by this guard.
        unsafe { self.lock.get() }
    }
}

impl<T> Drop for ObjGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken in `lock`.
        unsafe { self.lock.unlock() }
    }
}

#[cfg(target_os = "linux")]
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a live, aligned u32; returns at once if it changed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

#[cfg(target_os = "linux")]
fn futex_wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wait(word: &AtomicU32, expected: u32) {
    if word.load(Ordering::Relaxed) == expected {
        std::thread::yield_now();
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wake_one(_word: &AtomicU32) {}

#[cfg(test)]
mod tests {
    use super::ObjLock;
    use std::sync::Arc;

    #[test]
    fn excludes_other_threads_under_contention() {
        let lock = Arc::new(ObjLock::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..5_000 {
                        let mut g = lock.lock();
                        // A torn read-modify-write would lose increments.
                        let v = *g;
                        std::hint::black_box(&mut *g);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 8 * 5_000);
    }

    #[test]
    fn a_sleeping_waiter_is_woken() {
        let lock = Arc::new(ObjLock::new(false));
        let g = lock.lock();
        let l2 = lock.clone();
        let t = std::thread::spawn(move || *l2.lock());
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(g);
        assert!(!t.join().unwrap());
    }
}

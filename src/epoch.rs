//! Epoch-based protection for the handle tables: a lookup costs no atomic
//! read-modify-write on shared memory.
//!
//! A thread *pins* itself before reading table slots (one `swap` on its own
//! participant word, the first time in a nest of pins) and unpins when the outermost
//! pin ends. After unlinking an entry, `remove` calls [`synchronize`]: it waits
//! until every other thread that was pinned at the unlink has unpinned (usually
//! none is, and nothing waits). The object is then dropped by the caller, in the
//! destroying call, as with a plain `Arc`.
//!
//! Pinned sections are short and never block on another thread: lookups for calls
//! that block (synchronize, host waits, copies to the host) clone and unpin first,
//! and no table entry is removed while pinned.

use crate::hot::HOT;
use crate::tls;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Release, SeqCst},
};
use std::sync::{Arc, Mutex};

// The epoch is `HOT.epoch` (`crate::hot`): even, starts at 2; 0 in a participant word
// means "not pinned".

/// Participant words of the first `SLOTS` threads, scanned without a lock.
const SLOTS: usize = 1024;
/// One cache line each, so that threads pinning at once do not share a line.
#[repr(align(64))]
struct Padded(AtomicU64);
static WORDS: [Padded; SLOTS] = [const { Padded(AtomicU64::new(0)) }; SLOTS];
static CLAIMED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// One past the highest slot ever claimed.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Words of threads beyond the first `SLOTS` (rare), with their count.
static OVERFLOW: Mutex<Vec<Arc<AtomicU64>>> = Mutex::new(Vec::new());
static OVERFLOW_COUNT: AtomicUsize = AtomicUsize::new(0);

enum Word {
    Slot(usize),
    Overflow(Arc<AtomicU64>),
}

/// A thread's registration, created on its first pin; dropping it (thread exit)
/// releases the participant word.
struct Local {
    word: Word,
}

impl Local {
    fn new() -> Local {
        let word = (0..SLOTS)
            .find(|&i| {
                CLAIMED[i]
                    .compare_exchange(false, true, SeqCst, SeqCst)
                    .is_ok()
            })
            .map(|i| {
                crate::atomic_max::fetch_max_usize(&HIGH, i + 1, SeqCst);
                Word::Slot(i)
            })
            .unwrap_or_else(|| Word::Overflow(overflow_word()));
        Local { word }
    }

    fn word(&self) -> &AtomicU64 {
        match &self.word {
            Word::Slot(i) => &WORDS[*i].0,
            Word::Overflow(w) => w,
        }
    }
}

/// A participant word outside the fixed array (more than `SLOTS` threads, or a
/// thread that pins while it is being torn down).
fn overflow_word() -> Arc<AtomicU64> {
    let w = Arc::new(AtomicU64::new(0));
    lock(&OVERFLOW).push(w.clone());
    OVERFLOW_COUNT.fetch_add(1, SeqCst);
    w
}

impl Drop for Local {
    fn drop(&mut self) {
        self.word().store(0, SeqCst);
        tls::call(|t| t.pin_word.set(std::ptr::null()));
        match &self.word {
            Word::Slot(i) => CLAIMED[*i].store(false, SeqCst),
            Word::Overflow(w) => {
                lock(&OVERFLOW).retain(|x| !Arc::ptr_eq(x, w));
                OVERFLOW_COUNT.fetch_sub(1, SeqCst);
            }
        }
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

/// This thread's participant word, registering the thread on first use.
#[cold]
fn register() -> *const AtomicU64 {
    let w = LOCAL
        .try_with(|l| l.word() as *const AtomicU64)
        // Torn down already: a word of its own, never released (rare).
        .unwrap_or_else(|_| Arc::into_raw(overflow_word()));
    tls::call(|t| t.pin_word.set(w));
    w
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps the current thread pinned while alive. Not `Send`.
pub struct Guard {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Pins the current thread (nests).
#[inline(always)]
pub fn pin() -> Guard {
    tls::call(|t| {
        let d = t.pin_depth.get();
        if d == 0 {
            let mut w = t.pin_word.get();
            if w.is_null() {
                w = register();
            }
            // SAFETY: a participant word lives in a static or a never-freed Arc.
            unsafe { &*w }.swap(HOT.epoch.load(SeqCst), SeqCst);
        }
        t.pin_depth.set(d + 1);
    });
    Guard {
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        tls::call(|t| {
            let d = t.pin_depth.get() - 1;
            t.pin_depth.set(d);
            if d == 0 {
                // SAFETY: set by the pin that this unpins.
                unsafe { &*t.pin_word.get() }.store(0, Release);
            }
        })
    }
}

/// True while the current thread is pinned.
pub fn is_pinned() -> bool {
    tls::call(|t| t.pin_depth.get() > 0)
}

/// True while `w` is pinned in an epoch at or before `e`.
fn pinned_since(w: &AtomicU64, e: u64) -> bool {
    let v = w.load(SeqCst);
    v != 0 && v <= e
}

/// Waits until no other thread is still pinned since before this call. Call it
/// after unlinking an entry, unpinned: then nothing can still use what the entry
/// pointed to. Returns at once when no other thread is pinned.
pub fn synchronize() {
    let me = tls::call(|t| t.pin_word.get());
    let others = || {
        WORDS[..HIGH.load(SeqCst)]
            .iter()
            .map(|p| &p.0)
            .filter(move |w| !std::ptr::eq(*w, me))
    };
    let overflow = || -> Vec<Arc<AtomicU64>> {
        if OVERFLOW_COUNT.load(SeqCst) == 0 {
            return Vec::new();
        }
        lock(&OVERFLOW)
            .iter()
            .filter(|w| !std::ptr::eq(Arc::as_ptr(w), me))
            .cloned()
            .collect()
    };
    // Nobody pinned: no one holds a pointer read before the unlink, and anyone who
    // pins from now on sees the entry gone.
    if others().all(|w| w.load(SeqCst) == 0) && overflow().iter().all(|w| w.load(SeqCst) == 0) {
        return;
    }
    // Threads pinned now have an epoch <= e; wait until each has unpinned (or
    // pinned again, later).
    let e = HOT.epoch.fetch_add(2, SeqCst);
    let wait = |w: &AtomicU64| {
        let mut spins = 0u32;
        while pinned_since(w, e) {
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    };
    others().for_each(wait);
    overflow().iter().for_each(|w| wait(w));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn synchronize_waits_for_a_thread_pinned_before_it() {
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let unpinned = Arc::new(AtomicBool::new(false));
        let u = unpinned.clone();
        let holder = std::thread::spawn(move || {
            let g = pin();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            u.store(true, Ordering::SeqCst);
            drop(g);
        });
        pinned_rx.recv().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let syncer = std::thread::spawn(move || {
            synchronize();
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "returned while a thread was pinned"
        );
        go_tx.send(()).unwrap();
        syncer.join().unwrap();
        assert!(unpinned.load(Ordering::SeqCst), "returned before the unpin");
        holder.join().unwrap();
    }

    #[test]
    fn synchronize_ignores_the_calling_thread_and_later_pins() {
        let g = pin();
        synchronize(); // pinned itself: must not wait for itself
        drop(g);
        drop(pin());
        synchronize();
    }
}

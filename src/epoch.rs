//! Epoch-based reclamation for the handle tables: a lookup costs no atomic
//! read-modify-write on shared memory.
//!
//! A thread *pins* itself before reading table slots (one `swap` on its own
//! participant word, the first time in a nest of pins) and unpins when the outermost
//! pin ends. Removing an entry *retires* the table's reference: it is dropped only
//! once every other pinned thread pinned after the removal, so no pointer read from
//! a slot can outlive its object. Retired objects are dropped by the remover at once
//! when no other thread is pinned (the usual case), else by the last thread to unpin.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// Even, starts at 2; 0 in a participant word means "not pinned".
static EPOCH: AtomicU64 = AtomicU64::new(2);
/// Participant words of the first `SLOTS` threads, scanned without a lock.
const SLOTS: usize = 1024;
static WORDS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static CLAIMED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// One past the highest slot ever claimed.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Words of threads beyond the first `SLOTS` (rare), with their count.
static OVERFLOW: Mutex<Vec<Arc<AtomicU64>>> = Mutex::new(Vec::new());
static OVERFLOW_COUNT: AtomicUsize = AtomicUsize::new(0);
static RETIRED: Mutex<Vec<(u64, Box<dyn Send>)>> = Mutex::new(Vec::new());
static PENDING: AtomicUsize = AtomicUsize::new(0);

enum Word {
    Slot(usize),
    Overflow(Arc<AtomicU64>),
}

struct Local {
    depth: Cell<u32>,
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
                HIGH.fetch_max(i + 1, SeqCst);
                Word::Slot(i)
            })
            .unwrap_or_else(|| {
                let w = Arc::new(AtomicU64::new(0));
                lock(&OVERFLOW).push(w.clone());
                OVERFLOW_COUNT.fetch_add(1, SeqCst);
                Word::Overflow(w)
            });
        Local {
            depth: Cell::new(0),
            word,
        }
    }

    fn word(&self) -> &AtomicU64 {
        match &self.word {
            Word::Slot(i) => &WORDS[*i],
            Word::Overflow(w) => w,
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.word().store(0, SeqCst);
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps the current thread pinned while alive. Not `Send`.
pub struct Guard {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Pins the current thread (nests).
#[inline]
pub fn pin() -> Guard {
    // A thread being torn down has no participant: it cannot use the tables.
    LOCAL.with(|l| {
        let d = l.depth.get();
        if d == 0 {
            l.word().swap(EPOCH.load(SeqCst), SeqCst);
        }
        l.depth.set(d + 1);
    });
    Guard {
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let last = LOCAL.with(|l| {
            let d = l.depth.get() - 1;
            l.depth.set(d);
            if d == 0 {
                l.word().store(0, SeqCst);
            }
            d == 0
        });
        if last && PENDING.load(SeqCst) != 0 {
            reclaim();
        }
    }
}

/// The oldest epoch another thread is pinned in (`u64::MAX` when none is).
fn oldest_other() -> u64 {
    let me = LOCAL
        .try_with(|l| l.word() as *const AtomicU64)
        .unwrap_or(std::ptr::null());
    let others = |w: &AtomicU64| !std::ptr::eq(w, me);
    let mut oldest = WORDS[..HIGH.load(SeqCst)]
        .iter()
        .filter(|w| others(w))
        .map(|w| w.load(SeqCst))
        .filter(|&e| e != 0)
        .min()
        .unwrap_or(u64::MAX);
    if OVERFLOW_COUNT.load(SeqCst) != 0 {
        for w in lock(&OVERFLOW).iter().filter(|w| others(w)) {
            match w.load(SeqCst) {
                0 => {}
                e => oldest = oldest.min(e),
            }
        }
    }
    oldest
}

/// Takes a reference that was just made unreachable from the tables, and gives back
/// one the caller may use and drop freely. When another thread may still have read
/// it from a slot, the original is kept until that thread unpins and a clone is
/// returned; otherwise the original itself comes back.
pub fn retire<T: Clone + Send + 'static>(value: T) -> T {
    let e = EPOCH.fetch_add(2, SeqCst);
    if oldest_other() > e {
        return value;
    }
    let out = value.clone();
    lock(&RETIRED).push((e, Box::new(value)));
    PENDING.fetch_add(1, SeqCst);
    out
}

/// Drops every retired value that no pinned thread can still see.
fn reclaim() {
    let oldest = oldest_other();
    let ready: Vec<Box<dyn Send>> = {
        let mut r = lock(&RETIRED);
        let mut ready = Vec::new();
        let mut i = 0;
        while i < r.len() {
            if r[i].0 < oldest {
                ready.push(r.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        PENDING.fetch_sub(ready.len(), SeqCst);
        ready
    };
    // Dropped outside the locks: a drop may pin, remove or retire again.
    drop(ready);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }

    #[test]
    fn retired_value_waits_for_a_thread_pinned_before_it() {
        let dropped = Arc::new(AtomicBool::new(false));
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let g = pin();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(g);
        });
        pinned_rx.recv().unwrap();
        drop(retire(Arc::new(Flag(dropped.clone()))));
        assert!(
            !dropped.load(SeqCst),
            "dropped while another thread was pinned"
        );
        go_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(dropped.load(SeqCst), "the last unpin drops it");
    }

    #[test]
    fn the_retiring_thread_does_not_hold_back_its_own_retirement() {
        let dropped = Arc::new(AtomicBool::new(false));
        let g = pin();
        drop(retire(Arc::new(Flag(dropped.clone()))));
        // Other tests of this binary may be pinned for a moment.
        let t0 = std::time::Instant::now();
        while !dropped.load(SeqCst) && t0.elapsed() < std::time::Duration::from_secs(1) {
            std::thread::yield_now();
            reclaim();
        }
        assert!(
            dropped.load(SeqCst),
            "still retired while only this thread is pinned"
        );
        drop(g);
    }
}

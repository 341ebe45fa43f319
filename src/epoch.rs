//! Epoch-based reclamation for the handle tables: a lookup costs no atomic
//! read-modify-write on shared memory.
//!
//! A thread *pins* itself before reading table slots (one `swap` on its own
//! participant word, the first time in a nest of pins) and unpins when the outermost
//! pin ends. Removing an entry *retires* the table's reference: it is dropped only
//! once no thread that was pinned at the removal is still pinned, so no pointer read
//! from a slot can outlive its object. The remover drops it at once when no other
//! thread is pinned (the usual case); otherwise the remover keeps it in a
//! thread-local bag and drops it at one of its own later unpins (a thread that
//! exits hands its bag to the next thread that unpins). No lock is shared.

use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex};

/// Even, starts at 2; 0 in a participant word means "not pinned".
static EPOCH: AtomicU64 = AtomicU64::new(2);
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
/// Bags of threads that exited with retired values still in them.
static ORPHANS: Mutex<Vec<(u64, Box<dyn Send>)>> = Mutex::new(Vec::new());
static ORPHANS_PENDING: AtomicUsize = AtomicUsize::new(0);

type Bag = Vec<(u64, Box<dyn Send>)>;

enum Word {
    Slot(usize),
    Overflow(Arc<AtomicU64>),
}

/// A thread's registration: its participant word and its bag. Created on the
/// thread's first pin; dropping it (thread exit) releases the word and hands the
/// bag to `ORPHANS`.
struct Local {
    word: Word,
    /// Values this thread retired while another thread was pinned.
    bag: std::cell::RefCell<Bag>,
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
            .unwrap_or_else(|| Word::Overflow(overflow_word()));
        Local {
            word,
            bag: std::cell::RefCell::new(Vec::new()),
        }
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
        WORD.with(|w| w.set(std::ptr::null()));
        BAGGED.with(|b| b.set(false));
        let bag = std::mem::take(self.bag.get_mut());
        if !bag.is_empty() {
            let n = bag.len();
            lock(&ORPHANS).extend(bag);
            ORPHANS_PENDING.fetch_add(n, SeqCst);
        }
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
    // The pin fast path uses only these constant-initialised cells.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static WORD: Cell<*const AtomicU64> = const { Cell::new(std::ptr::null()) };
    /// True while this thread's bag holds something.
    static BAGGED: Cell<bool> = const { Cell::new(false) };
    static LOCAL: Local = Local::new();
}

/// This thread's participant word, registering the thread on first use.
#[cold]
fn register() -> *const AtomicU64 {
    let w = LOCAL
        .try_with(|l| l.word() as *const AtomicU64)
        // Torn down already: a word of its own, released never (rare).
        .unwrap_or_else(|_| Arc::into_raw(overflow_word()));
    WORD.with(|c| c.set(w));
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
    let d = DEPTH.with(Cell::get);
    if d == 0 {
        let mut w = WORD.with(Cell::get);
        if w.is_null() {
            w = register();
        }
        // SAFETY: a participant word lives in a static or a never-freed Arc.
        unsafe { &*w }.swap(EPOCH.load(SeqCst), SeqCst);
    }
    DEPTH.with(|c| c.set(d + 1));
    Guard {
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        let d = DEPTH.with(Cell::get) - 1;
        DEPTH.with(|c| c.set(d));
        if d != 0 {
            return;
        }
        // SAFETY: set by the pin that this unpins.
        unsafe { &*WORD.with(Cell::get) }.store(0, Release);
        if BAGGED.with(Cell::get) {
            reclaim_bag();
        }
        if ORPHANS_PENDING.load(Relaxed) != 0 {
            reclaim_orphans();
        }
    }
}

/// Removes the entries of `bag` that no pinned thread can still see.
fn take_ready(bag: &mut Bag, oldest: u64) -> Vec<Box<dyn Send>> {
    let mut ready = Vec::new();
    let mut i = 0;
    while i < bag.len() {
        if bag[i].0 < oldest {
            ready.push(bag.swap_remove(i).1);
        } else {
            i += 1;
        }
    }
    ready
}

#[cold]
#[inline(never)]
fn reclaim_bag() {
    let oldest = oldest_other();
    // Dropped after the bag is released: a drop may pin or retire again.
    let ready = LOCAL
        .try_with(|l| {
            let mut bag = l.bag.borrow_mut();
            let ready = take_ready(&mut bag, oldest);
            BAGGED.with(|b| b.set(!bag.is_empty()));
            ready
        })
        .unwrap_or_default();
    drop(ready);
}

#[cold]
#[inline(never)]
fn reclaim_orphans() {
    let Ok(mut orphans) = ORPHANS.try_lock() else {
        return;
    };
    let ready = take_ready(&mut orphans, oldest_other());
    ORPHANS_PENDING.fetch_sub(ready.len(), SeqCst);
    drop(orphans);
    drop(ready);
}

/// The oldest epoch another thread is pinned in (`u64::MAX` when none is).
fn oldest_other() -> u64 {
    let me = WORD.with(Cell::get);
    let others = |w: &AtomicU64| !std::ptr::eq(w, me);
    let mut oldest = WORDS[..HIGH.load(SeqCst)]
        .iter()
        .map(|p| &p.0)
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
/// it from a slot, the original is kept (in this thread's bag) until that thread
/// unpins and a clone is returned; otherwise the original itself comes back.
/// The bag is reclaimed at this thread's next unpin.
pub fn retire<T: Clone + Send + 'static>(value: T) -> T {
    // No other thread pinned: none can hold a pointer read before the unlink, and
    // any that pins from now on sees the slot dead.
    if oldest_other() == u64::MAX {
        return value;
    }
    // Threads pinned now have an epoch <= e and hold the value back until they unpin.
    let e = EPOCH.fetch_add(2, SeqCst);
    let out = value.clone();
    let entry: (u64, Box<dyn Send>) = (e, Box::new(value));
    if LOCAL.try_with(|_| ()).is_ok() {
        LOCAL.with(|l| l.bag.borrow_mut().push(entry));
        BAGGED.with(|b| b.set(true));
    } else {
        lock(&ORPHANS).push(entry);
        ORPHANS_PENDING.fetch_add(1, SeqCst);
    }
    out
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
        let g = pin();
        drop(retire(Arc::new(Flag(dropped.clone()))));
        drop(g);
        assert!(
            !dropped.load(SeqCst),
            "dropped while another thread was pinned"
        );
        go_tx.send(()).unwrap();
        t.join().unwrap();
        // This thread's next unpin reclaims its bag (other tests may pin briefly).
        let t0 = std::time::Instant::now();
        while !dropped.load(SeqCst) && t0.elapsed() < std::time::Duration::from_secs(1) {
            drop(pin());
            std::thread::yield_now();
        }
        assert!(
            dropped.load(SeqCst),
            "reclaimed once the other thread unpinned"
        );
    }

    #[test]
    fn a_bag_left_by_an_exiting_thread_is_reclaimed_by_another() {
        let dropped = Arc::new(AtomicBool::new(false));
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let g = pin();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(g);
        });
        pinned_rx.recv().unwrap();
        let d = dropped.clone();
        std::thread::spawn(move || {
            let g = pin();
            drop(retire(Arc::new(Flag(d))));
            drop(g);
        })
        .join()
        .unwrap();
        assert!(!dropped.load(SeqCst));
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        let t0 = std::time::Instant::now();
        while !dropped.load(SeqCst) && t0.elapsed() < std::time::Duration::from_secs(1) {
            drop(pin());
            std::thread::yield_now();
        }
        assert!(dropped.load(SeqCst), "the orphaned bag was reclaimed");
    }
}

//! The helper threads of checkpoint downloads: a small pool, started once, that
//! runs one job at a time beside the thread that gave it, and spins a while
//! between jobs instead of sleeping (a sleeping core's wake-up can outlast a small
//! checkpoint's copy).

use super::lock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Threads taking part at most, the caller included.
const MAX_THREADS: usize = 8;
/// How long a helper spins for the next job before it sleeps.
const IDLE_SPIN: Duration = Duration::from_micros(500);

/// Runs `work` on this thread, and on the pool's helpers too with `parallel`.
/// True when a run of it panicked (never unwinds: the caller must wait for what
/// was issued before returning).
pub(super) fn run(parallel: bool, work: &(dyn Fn() + Sync)) -> bool {
    if parallel {
        broadcast(work)
    } else {
        catch_unwind(AssertUnwindSafe(work)).is_err()
    }
}

/// A busy wait.
pub(super) struct Spin {
    t0: Instant,
    n: u32,
}

impl Spin {
    pub(super) fn new() -> Spin {
        Spin {
            t0: Instant::now(),
            n: 0,
        }
    }

    pub(super) fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Stays on the core: for a thread holding claimed work (yielding to a busy
    /// core's other threads could park it for a whole time slice).
    pub(super) fn pause(&mut self) {
        for _ in 0..16 {
            std::hint::spin_loop();
        }
    }

    /// Pauses at first, then yields: for a thread holding no work.
    fn relax(&mut self) {
        self.n = self.n.saturating_add(1);
        if self.n < 64 {
            self.pause();
        } else {
            std::thread::yield_now();
        }
    }

    /// Relaxes until `ready` (true) or `limit` passed (`ready` once more).
    fn until(limit: Duration, ready: impl Fn() -> bool) -> bool {
        let mut s = Spin::new();
        while !ready() {
            if s.elapsed() >= limit {
                return ready();
            }
            s.relax();
        }
        true
    }
}

/// A small pool of helper threads, started on first use, that run one job at a
/// time beside the thread that gave it. Between jobs a helper spins for
/// [`IDLE_SPIN`] before it sleeps, so that back-to-back jobs find it awake.
pub(super) struct Pool {
    /// Helper threads started (set once, before the pool is used).
    helpers: AtomicUsize,
    busy: AtomicBool,
    /// Bumped under `job`'s lock for each job and each early wake-up.
    generation: AtomicU64,
    /// Helpers asleep on `wake` (changed under `job`'s lock).
    sleeping: AtomicUsize,
    /// Helpers inside the job (only ever raised under `job`'s lock while it is set).
    running: AtomicUsize,
    panicked: AtomicBool,
    /// The job, while its giver runs it; a helper that comes after the giver
    /// finished finds none.
    job: Mutex<Option<Job>>,
    wake: Condvar,
    done: Condvar,
}

impl Pool {
    pub(super) fn helpers(&self) -> usize {
        self.helpers.load(Ordering::Relaxed)
    }

    /// Sets the job (unless one runs and `job` is None) and wakes the helpers.
    fn publish(&self, job: Option<Job>) {
        let mut j = lock(&self.job);
        if job.is_none() && j.is_some() {
            return; // another job runs: leave it
        }
        *j = job;
        self.generation.fetch_add(1, Ordering::Release);
        let sleepers = self.sleeping.load(Ordering::Relaxed) > 0;
        drop(j);
        if sleepers {
            self.wake.notify_all();
        }
    }

    /// Wakes sleeping helpers (to spin) ahead of a job.
    pub(super) fn prewake(&self) {
        if self.helpers() > 0 && !self.busy.load(Ordering::Relaxed) {
            self.publish(None);
        }
    }
}

#[derive(Clone, Copy)]
struct Job(&'static (dyn Fn() + Sync));

pub(super) fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let want = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, MAX_THREADS)
            - 1;
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            helpers: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            sleeping: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            job: Mutex::new(None),
            wake: Condvar::new(),
            done: Condvar::new(),
        }));
        let started = (0..want)
            .take_while(|i| {
                std::thread::Builder::new()
                    .name(format!("sluice-ckpt-{i}"))
                    .spawn(move || helper(pool))
                    .is_ok()
            })
            .count();
        pool.helpers.store(started, Ordering::Relaxed);
        pool
    })
}

fn helper(pool: &'static Pool) {
    let mut seen = pool.generation.load(Ordering::Acquire);
    loop {
        let moved = || pool.generation.load(Ordering::Acquire) != seen;
        if !Spin::until(IDLE_SPIN, moved) {
            let mut j = lock(&pool.job);
            pool.sleeping.fetch_add(1, Ordering::Relaxed);
            while !moved() {
                j = pool.wake.wait(j).unwrap_or_else(|p| p.into_inner());
            }
            pool.sleeping.fetch_sub(1, Ordering::Relaxed);
        }
        let job = {
            let j = lock(&pool.job);
            seen = pool.generation.load(Ordering::Acquire);
            match *j {
                Some(job) => {
                    pool.running.fetch_add(1, Ordering::Relaxed);
                    job
                }
                None => continue,
            }
        };
        if catch_unwind(AssertUnwindSafe(job.0)).is_err() {
            pool.panicked.store(true, Ordering::Relaxed);
        }
        if pool.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock, so that a giver about to sleep on `done` hears it.
            drop(lock(&pool.job));
            pool.done.notify_all();
        }
    }
}

/// Runs `f` on the calling thread and on the pool's helpers that start before the
/// caller's own run returns (none while another job runs); returns once every run
/// of it returned. True when one panicked, the caller's included.
fn broadcast(f: &(dyn Fn() + Sync)) -> bool {
    let pool = pool();
    if pool.helpers() == 0 || pool.busy.swap(true, Ordering::Acquire) {
        return catch_unwind(AssertUnwindSafe(f)).is_err();
    }
    // SAFETY: the reference outlives every use: helpers take it only while `job`
    // holds it (raising `running` under its lock), and this function clears `job`
    // and waits for `running` to reach 0 before returning or unwinding.
    let job =
        Job(unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(f) });
    pool.panicked.store(false, Ordering::Relaxed);
    pool.publish(Some(job));
    let mine = catch_unwind(AssertUnwindSafe(f));
    *lock(&pool.job) = None;
    // Helpers still inside have a chunk left at most: spin, then sleep.
    let idle = || pool.running.load(Ordering::Acquire) == 0;
    if !Spin::until(IDLE_SPIN, idle) {
        let mut j = lock(&pool.job);
        while !idle() {
            j = pool.done.wait(j).unwrap_or_else(|p| p.into_inner());
        }
    }
    let panicked = pool.panicked.load(Ordering::Relaxed);
    pool.busy.store(false, Ordering::Release);
    panicked || mine.is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_runs_the_job_to_the_end_and_reports_panics() {
        let n = AtomicUsize::new(0);
        let work = || while n.fetch_add(1, Ordering::Relaxed) < 10_000 {};
        assert!(!broadcast(&work));
        assert!(n.load(Ordering::Relaxed) >= 10_000);
        // The caller's own panic comes back as `true`, after the helpers left.
        assert!(broadcast(&|| panic!("the caller's run panics")));
        assert!(run(false, &|| panic!("a single run panics")));
        // A helper's panic (when one starts in time) neither hangs nor breaks the pool.
        let first = AtomicBool::new(true);
        let boom = || {
            if !first.swap(false, Ordering::Relaxed) {
                panic!("a helper's run panics");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let _ = broadcast(&boom);
        n.store(0, Ordering::Relaxed);
        assert!(!broadcast(&work));
        assert!(n.load(Ordering::Relaxed) >= 10_000);
    }
}

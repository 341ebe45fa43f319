//! A condition variable over the prefetcher's state that makes no system call when
//! nobody waits: std's `notify_*` always asks the kernel to wake (a futex call),
//! and a submit and a release each notify. Waiters count themselves while they hold
//! the state's lock, and every notifier changed the state under that lock before it
//! reads the count, so a waiter that could miss the change is always counted.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, MutexGuard};
use std::time::Instant;

#[derive(Default)]
pub(super) struct Signal {
    cv: Condvar,
    waiters: AtomicU32,
}

impl Signal {
    /// Waits until notified or `deadline` (None: no limit); false when the deadline
    /// had passed. Wakes may be spurious: the caller checks its condition again.
    pub(super) fn wait<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, T>, bool) {
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return (guard, false),
            },
            None => None,
        };
        self.waiters.fetch_add(1, Ordering::Relaxed);
        let guard = match left {
            None => self.cv.wait(guard).unwrap_or_else(|p| p.into_inner()),
            Some(left) => {
                self.cv
                    .wait_timeout(guard, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        (guard, true)
    }

    /// Wakes one waiter, if any. The caller changed the state under its lock first.
    pub(super) fn notify_one(&self) {
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.cv.notify_one();
        }
    }

    /// Wakes every waiter. The caller changed the state under its lock first.
    pub(super) fn notify_all(&self) {
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Two threads hand a token back and forth 100,000 times (2,000 under Miri) through one lock and
    /// two signals, as a producer and a consumer do; a lost wake-up would leave one
    /// of them asleep past its 10 s deadline.
    #[test]
    fn no_wake_up_is_lost_in_a_ping_pong() {
        struct Shared {
            turn: Mutex<u64>,
            to_odd: Signal,
            to_even: Signal,
        }
        const ROUNDS: u64 = if cfg!(miri) { 2_000 } else { 100_000 };
        let sh = Arc::new(Shared {
            turn: Mutex::new(0),
            to_odd: Signal::default(),
            to_even: Signal::default(),
        });
        let player = |odd: bool| {
            let sh = sh.clone();
            std::thread::spawn(move || {
                let (mine, theirs) = if odd {
                    (&sh.to_odd, &sh.to_even)
                } else {
                    (&sh.to_even, &sh.to_odd)
                };
                let deadline = Some(Instant::now() + Duration::from_secs(10));
                let mut turn = sh.turn.lock().unwrap();
                while *turn < ROUNDS {
                    if (*turn % 2 == 1) == odd {
                        *turn += 1;
                        theirs.notify_one();
                    } else {
                        let (g, in_time) = mine.wait(turn, deadline);
                        turn = g;
                        assert!(in_time, "a wake-up was lost at turn {}", *turn);
                    }
                }
                theirs.notify_all();
            })
        };
        let (a, b) = (player(false), player(true));
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(*sh.turn.lock().unwrap(), ROUNDS);
        assert_eq!(sh.to_odd.waiters.load(Ordering::Relaxed), 0);
        assert_eq!(sh.to_even.waiters.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_passed_deadline_returns_at_once() {
        let (m, s) = (Mutex::new(()), Signal::default());
        let (_g, in_time) = s.wait(m.lock().unwrap(), Some(Instant::now()));
        assert!(!in_time);
        assert_eq!(s.waiters.load(Ordering::Relaxed), 0);
    }
}

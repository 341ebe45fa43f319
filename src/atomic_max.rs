//! `fetch_max` as a compare-and-swap loop. The x86-64 code is the same as std's
//! (`atomicrmw max` is lowered to such a loop), but ThreadSanitizer instruments only
//! the read-modify-writes it has entry points for, not `max`: std's `fetch_max` is
//! invisible to it, and so is the happens-before edge a release through it makes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

macro_rules! fetch_max_fn {
    ($name:ident, $atomic:ty, $int:ty) => {
        /// Stores the larger of the current value and `v`; returns the previous value.
        /// As std's `fetch_max(v, order)`: a read-modify-write with `order` even when
        /// the value stays.
        #[inline]
        pub(crate) fn $name(a: &$atomic, v: $int, order: Ordering) -> $int {
            let mut cur = a.load(Ordering::Relaxed);
            loop {
                match a.compare_exchange_weak(cur, cur.max(v), order, Ordering::Relaxed) {
                    Ok(prev) => return prev,
                    Err(seen) => cur = seen,
                }
            }
        }
    };
}

fetch_max_fn!(fetch_max_u64, AtomicU64, u64);
fetch_max_fn!(fetch_max_usize, AtomicUsize, usize);

//! The call path's per-thread state, in one constant-initialised thread-local. In
//! the shared library every thread-local variable is reached through
//! `__tls_get_addr`; with one variable a call computes that address once.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;

pub(crate) struct CallState {
    /// Depth of sluice C-ABI calls on this thread (the scope of the bind cache).
    pub(crate) scope: Cell<u32>,
    /// The context bound earlier in the current C-ABI call, or 0. Never trusted
    /// across calls: another library may change the thread's context in between.
    pub(crate) bound: Cell<usize>,
    /// Nesting depth of epoch pins.
    pub(crate) pin_depth: Cell<u32>,
    /// This thread's epoch participant word, once registered.
    pub(crate) pin_word: Cell<*const AtomicU64>,
}

thread_local! {
    static CALL: CallState = const {
        CallState {
            scope: Cell::new(0),
            bound: Cell::new(0),
            pin_depth: Cell::new(0),
            pin_word: Cell::new(std::ptr::null()),
        }
    };
}

/// Runs `f` on this thread's call state.
#[inline(always)]
pub(crate) fn call<R>(f: impl FnOnce(&CallState) -> R) -> R {
    CALL.with(f)
}

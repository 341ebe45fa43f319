//! The process-wide words that every op reads, on one cache line: the engine mode,
//! the trace switch and the handle tables' epoch. A driver call evicts most of its
//! caller's lines, so each separate word read after one costs a miss per op.

use std::sync::atomic::{AtomicU64, AtomicU8};

#[repr(C, align(64))]
pub(crate) struct Hot {
    /// The handle tables' epoch (`crate::epoch`): even, starts at 2.
    pub(crate) epoch: AtomicU64,
    /// `crate::engine`'s mode, or unset until first read.
    pub(crate) engine_mode: AtomicU8,
    /// `crate::trace`'s switch: 0 off, or its state bits.
    pub(crate) trace_state: AtomicU8,
}

pub(crate) static HOT: Hot = Hot {
    epoch: AtomicU64::new(2),
    engine_mode: AtomicU8::new(crate::engine::MODE_UNSET),
    trace_state: AtomicU8::new(crate::trace::UNSET),
};

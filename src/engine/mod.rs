//! The dependency engine (MXNet's async engine): how an operation on stream S with
//! read set R and write set W is ordered.
//! - Begin: for r in R, S waits on r's writer unless it is on S or S already has a
//!   reader entry (which came after that writer, since writes clear readers); for w
//!   in W, S waits on w's writer and every reader not on S. Waits are deduplicated per
//!   source stream (newest only) and skip work known complete. The host never blocks.
//! - End: one event is recorded on S; reads replace S's reader entry, writes clear
//!   the readers and become the writer.
//!
//! Library ops (copies, launches, callbacks, graph launches) do both while holding
//! the objects' locks, taken in id order, and the stream's push lock, so they are
//! atomic with respect to each other. Foreign ops ([`ForeignOp`]) wait at begin and
//! publish at end.
//!
//! Files: `deps` (what an op waits for and publishes on each object, and the
//! objects' locking), `push` (a library op's path on its stream: waits, work,
//! recording, publication), `foreign` (ops whose work the caller does between
//! begin and end).

mod deps;
mod foreign;
mod push;

pub(crate) use deps::{issue_waits, publish_into, waits_for, Waits};
pub use foreign::ForeignOp;
pub(crate) use foreign::{op_begin, op_end, OpMemory, Seen};
pub(crate) use push::push_op;
pub use push::{run_op, run_op_recorded};

use crate::c_enum::c_enum;
use crate::hot::HOT;
use std::sync::atomic::Ordering;

c_enum! {
    /// Engine modes, seen by C as `SLUICE_ENGINE_*`.
    pub enum EngineMode: "SLUICE_ENGINE_" {
        /// Engine mode: ops only enqueue work (the default).
        Async = 0 => ASYNC,
        /// Engine mode: the host synchronises the stream after every tracked op (debugging).
        Sync = 1 => SYNC,
    }
}

/// `HOT.engine_mode` (`crate::hot`: every op reads this byte on the line of the
/// other words it reads) until it was first read from `SLUICE_ENGINE` or set.
pub(crate) const MODE_UNSET: u8 = u8::MAX;

#[cold]
fn mode_from_env() -> u8 {
    let m = match std::env::var("SLUICE_ENGINE").as_deref() {
        Ok("sync") => EngineMode::Sync,
        _ => EngineMode::Async,
    } as u8;
    // A mode set meanwhile wins.
    match HOT
        .engine_mode
        .compare_exchange(MODE_UNSET, m, Ordering::Relaxed, Ordering::Relaxed)
    {
        Ok(_) => m,
        Err(now) => now,
    }
}

/// The process-wide engine mode (from `SLUICE_ENGINE`, default async).
#[inline(always)]
pub fn engine_mode() -> EngineMode {
    let m = match HOT.engine_mode.load(Ordering::Relaxed) {
        MODE_UNSET => mode_from_env(),
        m => m,
    };
    if m == EngineMode::Sync as u8 {
        EngineMode::Sync
    } else {
        EngineMode::Async
    }
}

pub fn set_engine_mode(mode: EngineMode) {
    HOT.engine_mode.store(mode as u8, Ordering::Relaxed);
}

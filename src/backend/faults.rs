//! Test hooks of the host backend: fault injection (fail the N-th call of an entry
//! point), a pause at one call's hook (to hold a race window open), and a ledger of
//! the backend objects and bytes alive. Off, each hook is one relaxed atomic load.
//! Reached from Rust tests only (`sluice::backend::faults`), never from the C ABI.

use crate::error::{Error, ErrorCode, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// True while a plan or a pause is armed or the ledger is on.
static ON: AtomicBool = AtomicBool::new(false);

/// What the ledger counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Stream,
    Event,
    Graph,
    GraphExec,
    DeviceBytes,
    PinnedBytes,
}

/// Live objects (and bytes) per kind, of those made while the ledger was on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub streams: u64,
    pub events: u64,
    pub graphs: u64,
    pub graph_execs: u64,
    pub device_bytes: u64,
    pub pinned_bytes: u64,
}

#[derive(Default)]
struct State {
    tracking: bool,
    /// (entry point, which call fails, the code it fails with).
    plan: Option<(&'static str, u64, ErrorCode)>,
    calls: HashMap<&'static str, u64>,
    injected: u64,
    live: HashMap<u64, (Kind, usize)>,
    /// (entry point, how long): the next call of it pauses at its hook.
    pause: Option<(&'static str, Duration)>,
    pauses_begun: u64,
}

fn state() -> MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn update_on(s: &State) {
    ON.store(
        s.tracking || s.plan.is_some() || s.pause.is_some(),
        Ordering::Relaxed,
    );
}

/// Turns the ledger on or off (off also forgets what it counted).
pub fn track(on: bool) {
    let mut s = state();
    s.tracking = on;
    if !on {
        s.live.clear();
    }
    update_on(&s);
}

/// From now on, counts the calls of every entry point, and fails call number `nth`
/// (from 1) of `entry` with `code`. `nth == 0` only counts.
pub fn arm(entry: &'static str, nth: u64, code: ErrorCode) {
    let mut s = state();
    s.plan = Some((entry, nth, code));
    s.calls.clear();
    s.injected = 0;
    update_on(&s);
}

/// Stops injecting; returns how many faults were injected since `arm`.
pub fn disarm() -> u64 {
    let mut s = state();
    s.plan = None;
    update_on(&s);
    s.injected
}

/// The next call of `entry` pauses for `d` at its hook, then goes on as armed
/// (one call; to hold a race window open, e.g. `capture_end`'s hook runs after the
/// streams left the backend's capture). [`pauses_begun`] counts the pauses begun.
pub fn pause_next(entry: &'static str, d: Duration) {
    let mut s = state();
    s.pause = Some((entry, d));
    update_on(&s);
}

/// How many pauses armed by [`pause_next`] have begun.
pub fn pauses_begun() -> u64 {
    state().pauses_begun
}

/// Calls per entry point since `arm`.
pub fn calls() -> HashMap<&'static str, u64> {
    state().calls.clone()
}

/// What the ledger holds now.
pub fn ledger() -> Ledger {
    let s = state();
    let mut l = Ledger::default();
    for &(kind, bytes) in s.live.values() {
        match kind {
            Kind::Stream => l.streams += 1,
            Kind::Event => l.events += 1,
            Kind::Graph => l.graphs += 1,
            Kind::GraphExec => l.graph_execs += 1,
            Kind::DeviceBytes => l.device_bytes += bytes as u64,
            Kind::PinnedBytes => l.pinned_bytes += bytes as u64,
        }
    }
    l
}

/// An entry point's hook: fails when the armed plan says so.
#[inline(always)]
pub(crate) fn hit(entry: &'static str) -> Result<()> {
    if ON.load(Ordering::Relaxed) {
        return hit_slow(entry);
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn hit_slow(entry: &'static str) -> Result<()> {
    let mut s = state();
    if let Some((e, d)) = s.pause {
        if e == entry {
            s.pause = None;
            s.pauses_begun += 1;
            update_on(&s);
            // Not under the state's lock: other hooks go on meanwhile.
            drop(s);
            std::thread::sleep(d);
            s = state();
        }
    }
    let Some((target, nth, code)) = s.plan else {
        return Ok(());
    };
    let n = s.calls.entry(entry).or_insert(0);
    *n += 1;
    if entry == target && *n == nth {
        s.injected += 1;
        return Err(Error::new(
            code,
            format!("injected fault: call {nth} of the host backend's {entry}"),
        ));
    }
    Ok(())
}

/// Notes a backend object (or allocation of `bytes`) made at `raw`.
#[inline(always)]
pub(crate) fn made(kind: Kind, raw: u64, bytes: usize) {
    if ON.load(Ordering::Relaxed) {
        made_slow(kind, raw, bytes)
    }
}

#[cold]
#[inline(never)]
fn made_slow(kind: Kind, raw: u64, bytes: usize) {
    let mut s = state();
    if s.tracking {
        s.live.insert(raw, (kind, bytes));
    }
}

/// Notes that the object at `raw` is gone.
#[inline(always)]
pub(crate) fn gone(raw: u64) {
    if ON.load(Ordering::Relaxed) {
        state().live.remove(&raw);
    }
}

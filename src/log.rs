//! Logs: off by default. `SLUICE_LOG=error|warn|info|debug` (read at the first
//! message) or [`set_level`] turns them on; they go to stderr, or to the callback
//! set with [`set_callback`]. While a trace is written, each message is also an
//! instant event on the calling thread's track.

use crate::c_enum::c_enum;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::RwLock;

c_enum! {
    /// Log levels, seen by C as `SLUICE_LOG_*`.
    pub enum LogLevel: "SLUICE_LOG_" {
        /// Log level: nothing is logged (the default).
        Off = 0 => OFF,
        /// Log level: errors only.
        Error = 1 => ERROR,
        /// Log level: errors and warnings (a capture aborted by an operation).
        Warn = 2 => WARN,
        /// Log level: also notable events (graph update fallbacks, cache evictions, traces).
        Info = 3 => INFO,
        /// Log level: everything (stale handles, blocks the caches gave back).
        Debug = 4 => DEBUG,
    }
}

impl LogLevel {
    /// The level's lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// A log receiver: the level and the message.
pub type LogFn = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

const UNSET: u8 = u8::MAX;
static LEVEL: AtomicU8 = AtomicU8::new(UNSET);
static SINK: RwLock<Option<LogFn>> = RwLock::new(None);

#[cold]
fn level_from_env() -> u8 {
    let l = match std::env::var("SLUICE_LOG").as_deref() {
        Ok("error") => LogLevel::Error,
        Ok("warn") => LogLevel::Warn,
        Ok("info") => LogLevel::Info,
        Ok("debug") => LogLevel::Debug,
        _ => LogLevel::Off,
    } as u8;
    // A level set meanwhile wins.
    match LEVEL.compare_exchange(UNSET, l, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => l,
        Err(now) => now,
    }
}

/// True when messages of `level` are logged.
#[inline(always)]
pub fn enabled(level: LogLevel) -> bool {
    let l = match LEVEL.load(Ordering::Relaxed) {
        UNSET => level_from_env(),
        l => l,
    };
    level != LogLevel::Off && level as u8 <= l
}

/// Sets the level (overrides `SLUICE_LOG`).
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The current level.
pub fn level() -> LogLevel {
    enabled(LogLevel::Off);
    LogLevel::from_u32(LEVEL.load(Ordering::Relaxed) as u32).unwrap_or(LogLevel::Off)
}

/// Sends messages to `f` instead of stderr; None goes back to stderr. The level
/// is unchanged.
pub fn set_callback(f: Option<LogFn>) {
    *SINK.write().unwrap_or_else(|p| p.into_inner()) = f;
}

/// Logs the message `msg` builds, when `level` is on.
#[inline(always)]
pub(crate) fn log(level: LogLevel, msg: impl FnOnce() -> String) {
    if enabled(level) {
        emit(level, &msg());
    }
}

pub(crate) fn error(msg: impl FnOnce() -> String) {
    log(LogLevel::Error, msg)
}

pub(crate) fn warn(msg: impl FnOnce() -> String) {
    log(LogLevel::Warn, msg)
}

pub(crate) fn info(msg: impl FnOnce() -> String) {
    log(LogLevel::Info, msg)
}

pub(crate) fn debug(msg: impl FnOnce() -> String) {
    log(LogLevel::Debug, msg)
}

#[cold]
#[inline(never)]
fn emit(level: LogLevel, msg: &str) {
    crate::trace::log_event(level, msg);
    let sink = SINK.read().unwrap_or_else(|p| p.into_inner());
    match &*sink {
        Some(f) => {
            // A panicking callback must not unwind through sluice's locks.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(level, msg)));
        }
        None => eprintln!("sluice [{}] {msg}", level.name()),
    }
}

//! Device-side spans (`SLUICE_TRACE_DEVICE=1`, every Nth op with
//! `SLUICE_TRACE_SAMPLE=N`): two timing events around a sampled op, resolved later
//! (by the trace's flush thread, or at stop) and mapped to host time through one
//! calibration point per device: a timing event recorded on an idle stream of our
//! own, taken to have run when its host wait returned. That is an upper bound, so
//! a device span never starts before the host enqueued its op; it may show late by
//! the wait's wake-up latency (microseconds).

use crate::device::Device;
use crate::stream::Stream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

struct Calib {
    dev: Arc<Device>,
    stream: u64,
    event: u64,
    host_ns: u64,
    /// Timing events ready for reuse.
    free: Vec<u64>,
}

struct Sample {
    calib: usize,
    stream: u64,
    label: Option<Arc<str>>,
    name: &'static str,
    seq: Option<u64>,
    start: u64,
    end: u64,
}

/// A resolved device span.
pub(crate) struct DeviceSpan {
    pub(crate) stream: u64,
    pub(crate) track: String,
    pub(crate) name: &'static str,
    pub(crate) seq: Option<u64>,
    pub(crate) ts: u64,
    pub(crate) dur: u64,
}

pub(crate) struct DeviceTrace {
    calibs: Vec<Calib>,
    pending: Vec<Sample>,
}

static DEV: Mutex<Option<DeviceTrace>> = Mutex::new(None);
/// Sample every this many ops (0: off); read without `DEV`'s lock, so that the ops
/// not sampled take no lock.
static EVERY: AtomicU64 = AtomicU64::new(0);
/// Ops seen since sampling started.
static SEEN: AtomicU64 = AtomicU64::new(0);

fn lock() -> MutexGuard<'static, Option<DeviceTrace>> {
    DEV.lock().unwrap_or_else(|p| p.into_inner())
}

/// Samples every `every`th op from now on (0: none), and calibrates the devices
/// already open (others are calibrated at their first sample, inside its span).
pub(crate) fn enable(every: u32) {
    let mut dt = (every > 0).then(|| DeviceTrace {
        calibs: Vec::new(),
        pending: Vec::new(),
    });
    if let Some(dt) = dt.as_mut() {
        for d in crate::device::all_devices() {
            if let Err(e) = dt.calib(&d) {
                crate::log::warn(|| format!("device spans: calibrating {d:?} failed: {e}"));
            }
        }
    }
    let mut g = lock();
    *g = dt;
    SEEN.store(0, Ordering::Relaxed);
    EVERY.store(every as u64, Ordering::Relaxed);
}

impl DeviceTrace {
    /// The calibration of `dev`, made on first use.
    fn calib(&mut self, dev: &Arc<Device>) -> crate::Result<usize> {
        if let Some(i) = self.calibs.iter().position(|c| Arc::ptr_eq(&c.dev, dev)) {
            return Ok(i);
        }
        let b = &dev.backend;
        let stream = b.stream_create(true, 0)?;
        let made = (|| {
            let event = b.event_create(true)?;
            let r = b
                .event_record(event, stream)
                .and_then(|()| b.event_synchronize(event));
            match r {
                Ok(()) => Ok((event, super::now_ns())),
                Err(e) => {
                    b.event_destroy(event);
                    Err(e)
                }
            }
        })();
        let (event, host_ns) = match made {
            Ok(x) => x,
            Err(e) => {
                b.stream_destroy(stream);
                return Err(e);
            }
        };
        self.calibs.push(Calib {
            dev: dev.clone(),
            stream,
            event,
            host_ns,
            free: Vec::new(),
        });
        Ok(self.calibs.len() - 1)
    }

    /// Records a timing event of `stream`'s device on it.
    fn record(&mut self, ci: usize, stream: &Stream) -> Option<u64> {
        let c = &mut self.calibs[ci];
        let b = &c.dev.backend;
        let ev = match c.free.pop() {
            Some(e) => e,
            None => b.event_create(true).ok()?,
        };
        match b.event_record(ev, stream.raw) {
            Ok(()) => Some(ev),
            Err(_) => {
                c.free.push(ev);
                None
            }
        }
    }

    /// Resolves the samples whose end completed (all, waiting, when `block`), in
    /// stream order.
    fn resolve(&mut self, block: bool) -> Vec<DeviceSpan> {
        let mut out = Vec::new();
        let mut stuck: Vec<u64> = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        for s in pending {
            if stuck.contains(&s.stream) {
                self.pending.push(s);
                continue;
            }
            let c = &mut self.calibs[s.calib];
            let b = &c.dev.backend;
            let done = if block {
                b.event_synchronize(s.end).is_ok()
            } else {
                b.event_query(s.end).unwrap_or(false)
            };
            if !done {
                stuck.push(s.stream);
                self.pending.push(s);
                continue;
            }
            if let (Ok(from), Ok(len)) = (
                b.event_elapsed_ms(c.event, s.start),
                b.event_elapsed_ms(s.start, s.end),
            ) {
                let ts = c.host_ns as f64 + from as f64 * 1e6;
                out.push(DeviceSpan {
                    stream: s.stream,
                    track: super::sink::stream_track_name(s.stream, s.label.as_deref()),
                    name: s.name,
                    seq: s.seq,
                    ts: ts.max(0.0) as u64,
                    dur: (len as f64 * 1e6).max(0.0) as u64,
                });
            }
            c.free.push(s.start);
            c.free.push(s.end);
        }
        out
    }

    /// Destroys every event and calibration stream.
    fn destroy(self) {
        let mut calibs = self.calibs;
        for s in self.pending {
            calibs[s.calib].free.extend([s.start, s.end]);
        }
        for c in calibs {
            let b = &c.dev.backend;
            for e in c.free {
                b.event_destroy(e);
            }
            b.event_destroy(c.event);
            b.stream_destroy(c.stream);
        }
    }
}

/// Whether ops are sampled (the op path's check before calling `begin`).
#[inline(always)]
pub(crate) fn sampling() -> bool {
    EVERY.load(Ordering::Relaxed) != 0
}

/// Records the start event of a sampled op on `stream` (after its waits, before its
/// work). Returns the event, or 0 when the op is not sampled.
pub(crate) fn begin(stream: &Stream) -> u64 {
    let every = EVERY.load(Ordering::Relaxed);
    if every == 0 || stream.is_capturing() {
        return 0;
    }
    if every > 1 && SEEN.fetch_add(1, Ordering::Relaxed) % every != 0 {
        return 0;
    }
    let mut g = lock();
    let Some(dt) = g.as_mut() else { return 0 };
    let ci = match dt.calib(&stream.device) {
        Ok(i) => i,
        Err(e) => {
            *g = None;
            EVERY.store(0, Ordering::Relaxed);
            drop(g);
            crate::log::warn(|| format!("device spans are off: calibration failed: {e}"));
            return 0;
        }
    };
    dt.record(ci, stream).unwrap_or(0)
}

/// Records the end event of a sampled op and queues the sample.
pub(crate) fn end(stream: &Stream, start: u64, name: &'static str, seq: Option<u64>) {
    let mut g = lock();
    let Some(dt) = g.as_mut() else {
        // Tracing stopped in between.
        stream.device.backend.event_destroy(start);
        return;
    };
    let Some(ci) = dt
        .calibs
        .iter()
        .position(|c| Arc::ptr_eq(&c.dev, &stream.device))
    else {
        stream.device.backend.event_destroy(start);
        return;
    };
    match dt.record(ci, stream) {
        Some(end) => dt.pending.push(Sample {
            calib: ci,
            stream: stream.id,
            label: stream.label(),
            name,
            seq,
            start,
            end,
        }),
        None => dt.calibs[ci].free.push(start),
    }
}

/// Gives back the start event of a sampled op that failed.
pub(crate) fn abandon(stream: &Stream, start: u64) {
    match lock().as_mut().and_then(|dt| {
        dt.calibs
            .iter_mut()
            .find(|c| Arc::ptr_eq(&c.dev, &stream.device))
    }) {
        Some(c) => c.free.push(start),
        None => stream.device.backend.event_destroy(start),
    }
}

/// The spans resolved so far (does not wait).
pub(crate) fn poll() -> Vec<DeviceSpan> {
    lock()
        .as_mut()
        .map(|dt| dt.resolve(false))
        .unwrap_or_default()
}

/// Stops sampling and resolves what is left: waiting for it, and destroying the
/// events, unless the process is exiting (then only what already completed).
pub(crate) fn finish(at_exit: bool) -> Vec<DeviceSpan> {
    EVERY.store(0, Ordering::Relaxed);
    let Some(mut dt) = lock().take() else {
        return Vec::new();
    };
    let spans = dt.resolve(!at_exit);
    if !at_exit {
        dt.destroy();
    } else {
        std::mem::forget(dt);
    }
    spans
}

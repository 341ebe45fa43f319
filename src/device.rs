//! Devices: one backend device each, shared by everything created on it.

use crate::backend::{BackendKind, DeviceBackend, DeviceProps};
use crate::counters::DeviceCounters;
use crate::error::{Error, ErrorCode, Result};
use crate::event::Deferred;
use crate::memory::PinnedPool;
use crate::stream::Stream;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// Globally unique ids for streams, sync objects and devices.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A stream destroyed while busy (or with a deferred error): a raw event at the
/// end of its work, and where its host callbacks report failures.
struct Retired {
    end: Option<u64>,
    deferred: Arc<Deferred>,
}

pub struct Device {
    /// First, so that the op path's driver calls read the device's first line.
    pub(crate) backend: DeviceBackend,
    /// Each stream from its creation to the end of its drop (its entry is dead
    /// while it drops: `wait_all` waits for its final mark to be listed).
    streams: Mutex<Vec<Weak<Stream>>>,
    /// Notified as a dropped stream leaves `streams`.
    stream_gone: Condvar,
    /// Destroyed streams that still had work queued, or an error to report:
    /// `wait_all` waits for them and reports it too.
    retired: Mutex<Vec<Retired>>,
    pub pinned: PinnedPool,
    pub(crate) counters: DeviceCounters,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind().name(), self.ordinal())
    }
}

/// How `SLUICE_BACKEND` asks for the default device.
fn backend_choice() -> Result<Option<BackendKind>> {
    match std::env::var("SLUICE_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(None),
        Ok("host") => Ok(Some(BackendKind::Host)),
        Ok("cuda") => Ok(Some(BackendKind::Cuda)),
        Ok(other) => Err(Error::invalid_argument(format!(
            "SLUICE_BACKEND={other:?} is not one of auto, cuda, host"
        ))),
    }
}

type Registry = Mutex<HashMap<(BackendKind, u32), Arc<Device>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Every device opened in this process.
pub(crate) fn all_devices() -> Vec<Arc<Device>> {
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect()
}

impl Device {
    /// Number of devices of a backend. cuda without a driver is an error.
    pub fn count(kind: BackendKind) -> Result<u32> {
        DeviceBackend::count(kind)
    }

    /// Opens (or returns the already-open) device `ordinal` of `kind`.
    pub fn open(kind: BackendKind, ordinal: u32) -> Result<Arc<Device>> {
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = reg.get(&(kind, ordinal)) {
            return Ok(d.clone());
        }
        let dev = Arc::new(Device {
            backend: DeviceBackend::open(kind, ordinal)?,
            streams: Mutex::new(Vec::new()),
            stream_gone: Condvar::new(),
            retired: Mutex::new(Vec::new()),
            pinned: PinnedPool::new(),
            counters: DeviceCounters::default(),
        });
        reg.insert((kind, ordinal), dev.clone());
        Ok(dev)
    }

    /// The default device: `SLUICE_BACKEND=auto|cuda|host`; auto is cuda:0 when a
    /// usable driver and GPU exist, else host:0.
    pub fn open_default() -> Result<Arc<Device>> {
        match backend_choice()? {
            Some(kind) => Device::open(kind, 0),
            None => match Device::count(BackendKind::Cuda) {
                Ok(n) if n > 0 => Device::open(BackendKind::Cuda, 0),
                _ => Device::open(BackendKind::Host, 0),
            },
        }
    }

    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// True when all of `[ptr, ptr+len)` is page-locked host memory this device
    /// copies to and from directly (pinned or registered); false when unsure.
    pub fn host_ptr_is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        self.backend.host_ptr_is_pinned(ptr, len)
    }

    pub fn ordinal(&self) -> u32 {
        self.backend.ordinal()
    }

    pub fn props(&self) -> Result<DeviceProps> {
        self.backend.props()
    }

    pub fn priority_range(&self) -> Result<(i32, i32)> {
        self.backend.priority_range()
    }

    pub(crate) fn register_stream(&self, s: &Arc<Stream>) {
        let mut v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        v.push(Arc::downgrade(s));
    }

    /// The end of stream `s`'s drop, after its final mark was listed.
    pub(crate) fn unregister_stream(&self, s: *const Stream) {
        let mut v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| !std::ptr::eq(w.as_ptr(), s));
        drop(v);
        self.stream_gone.notify_all();
    }

    /// Blocks while a stream is between the loss of its last reference (no longer
    /// found alive) and the end of its drop (its final mark listed).
    fn wait_for_dropping_streams(&self) {
        let mut v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        while v.iter().any(|w| w.strong_count() == 0) {
            v = self.stream_gone.wait(v).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The streams of this device that are still alive.
    pub(crate) fn live_streams(&self) -> Vec<Arc<Stream>> {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|w| w.upgrade())
            .collect()
    }

    /// A live sluice stream on raw stream `raw` (other than stream `except`) for
    /// which `pred` holds: two handles on one raw stream (`wrap_external`) and a
    /// capture do not mix (see `capture::capture_begin`). The list's lock is let
    /// go of first: an upgraded reference may be a stream's last (its owner
    /// dropped it meanwhile), and that stream's drop takes the lock to leave.
    pub(crate) fn stream_on_raw(
        &self,
        raw: u64,
        except: u64,
        pred: impl Fn(&Stream) -> bool,
    ) -> Option<Arc<Stream>> {
        self.live_streams()
            .into_iter()
            .find(|s| s.id != except && s.raw() == raw && pred(s))
    }

    /// Called just before raw stream `raw` is destroyed: when work is still queued
    /// on it, records a raw event at its end for `wait_all`. Completed marks are
    /// dropped here too, so the list stays as long as the busy destroyed streams.
    pub(crate) fn retire_stream(&self, raw: u64, deferred: &Arc<Deferred>) {
        let b = &self.backend;
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain_mut(|r| {
            if let Some(ev) = r.end {
                // A failed query keeps the mark: `wait_all` then waits on it (or reports it).
                if !b.event_query(ev).unwrap_or(false) {
                    return true;
                }
                b.event_destroy(ev);
                r.end = None;
            }
            r.deferred.peek().is_err()
        });
        let failed = || deferred.peek().is_err();
        let entry = |end| Retired {
            end,
            deferred: deferred.clone(),
        };
        match b.stream_query(raw) {
            Ok(true) => {
                if failed() {
                    retired.push(entry(None));
                }
                return;
            }
            // A capturing stream: a record would join the capture.
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::CaptureFailed | ErrorCode::CaptureUnsupported
                ) =>
            {
                return
            }
            // Busy, or unknown: mark its end.
            _ => {}
        }
        let mark = b
            .event_create(false)
            .and_then(|ev| match b.event_record(ev, raw) {
                Ok(()) => Ok(ev),
                Err(e) => {
                    b.event_destroy(ev);
                    Err(e)
                }
            });
        match mark {
            Ok(ev) => retired.push(entry(Some(ev))),
            // No event to wait on later: wait now rather than lose the work.
            Err(_) => {
                drop(b.stream_synchronize(raw));
                if failed() {
                    retired.push(entry(None));
                }
            }
        }
    }

    /// Blocks until all work on every stream of this device has completed, the work
    /// of streams destroyed while busy included. A stream capturing a graph is
    /// skipped: its captured work runs only at a launch, and synchronizing it would
    /// poison a capture that another thread is making. Returns the first deferred error
    /// found, after draining every stream.
    pub fn wait_all(&self) -> Result<()> {
        let mut first = None;
        for s in self.live_streams() {
            if let Err(e) = s.synchronize_unless_capturing() {
                first.get_or_insert(e);
            }
        }
        self.wait_for_dropping_streams();
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|p| p.into_inner()));
        for r in retired {
            if let Some(ev) = r.end {
                if let Err(e) = self.backend.event_synchronize(ev) {
                    first.get_or_insert(e.context("a destroyed stream's last work"));
                }
                self.backend.event_destroy(ev);
            }
            if let Err(e) = r.deferred.take() {
                first.get_or_insert(e.context("a destroyed stream's host callback"));
            }
        }
        first.map_or(Ok(()), Err)
    }

    #[inline(always)]
    pub(crate) fn same_device(&self, other: &Device, what: &str) -> Result<()> {
        self.same_device_with(other, || what.to_string())
    }

    /// Like `same_device`, but only builds the description on a mismatch.
    #[inline(always)]
    pub(crate) fn same_device_with(
        &self,
        other: &Device,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        if std::ptr::eq(self, other) {
            Ok(())
        } else {
            Err(self.wrong_device(other, what()))
        }
    }

    #[cold]
    fn wrong_device(&self, other: &Device, what: String) -> Error {
        Error::new(
            ErrorCode::WrongDevice,
            format!("{what} belongs to device {other:?}, the stream to device {self:?}"),
        )
    }
}

//! A cache of captured regions keyed by a caller key (MXNet's "capture once per
//! static shape"): the first run of a key is eager, the second is captured, later
//! runs replay. `SLUICE_GRAPHS=0` makes every region eager. A cache holds at most
//! `SLUICE_GRAPH_CACHE_MAX` keys (default 1024; 0: no limit) and evicts the least
//! recently used one beyond that.

use crate::backend::CaptureMode;
use crate::capture::{capture_begin, capture_end};
use crate::counters::DeviceCounters;
use crate::device::Device;
use crate::error::Result;
use crate::graph::GraphExec;
use crate::stream::Stream;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

fn graphs_cell() -> &'static AtomicBool {
    static ON: OnceLock<AtomicBool> = OnceLock::new();
    ON.get_or_init(|| AtomicBool::new(std::env::var("SLUICE_GRAPHS").as_deref() != Ok("0")))
}

/// Whether graph caches capture and replay (`SLUICE_GRAPHS=0` turns them eager).
pub fn graphs_enabled() -> bool {
    graphs_cell().load(Ordering::Relaxed)
}

pub fn set_graphs_enabled(on: bool) {
    graphs_cell().store(on, Ordering::Relaxed)
}

/// The maximum number of keys a new cache holds: `SLUICE_GRAPH_CACHE_MAX`, else 1024.
fn default_max_entries() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("SLUICE_GRAPH_CACHE_MAX")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MAX_ENTRIES)
    })
}

/// Keys a cache holds unless told otherwise.
pub(crate) const DEFAULT_MAX_ENTRIES: usize = 1024;

/// Counters of a graph cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub eager: u64,
    pub captured: u64,
    pub replayed: u64,
    pub entries: u64,
    pub evictions: u64,
}

enum Entry {
    WarmedUp,
    Ready(Arc<GraphExec>),
}

#[derive(Default)]
struct Entries {
    map: HashMap<u64, (Entry, u64)>,
    tick: u64,
}

impl Entries {
    fn touch(&mut self, key: u64) -> Option<&Entry> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(&key).map(|(e, used)| {
            *used = t;
            &*e
        })
    }

    /// Inserts `key`, then evicts least recently used keys (never `key`) down to
    /// `max` (0: no limit); returns how many went.
    fn insert(&mut self, key: u64, e: Entry, max: usize) -> u64 {
        self.tick += 1;
        self.map.insert(key, (e, self.tick));
        let mut evicted = 0;
        while max > 0 && self.map.len() > max {
            let oldest = self
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            let Some(old) = oldest else { break };
            self.map.remove(&old);
            evicted += 1;
            crate::log::info(|| format!("graph cache: evicted key {old} (least recently used)"));
        }
        evicted
    }
}

/// MXNet-style cache: per caller key, the first run is eager (a warm-up), the second
/// is captured and instantiated, later runs replay.
pub struct GraphCache {
    pub(crate) device: Arc<Device>,
    /// Each key's entry and the tick of its last use.
    entries: Mutex<Entries>,
    max_entries: AtomicUsize,
    evictions: AtomicU64,
    eager: AtomicU64,
    captured: AtomicU64,
    replayed: AtomicU64,
}

impl GraphCache {
    pub fn new(device: &Arc<Device>) -> Arc<GraphCache> {
        Arc::new(GraphCache {
            device: device.clone(),
            entries: Mutex::new(Entries::default()),
            max_entries: AtomicUsize::new(default_max_entries()),
            evictions: AtomicU64::new(0),
            eager: AtomicU64::new(0),
            captured: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            eager: self.eager.load(Ordering::Relaxed),
            captured: self.captured.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            entries: self.lock().map.len() as u64,
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps at most `max` keys (0: no limit), evicting the least recently used
    /// ones now if there are more.
    pub fn set_max_entries(&self, max: usize) {
        self.max_entries.store(max, Ordering::Relaxed);
        let mut e = self.lock();
        while max > 0 && e.map.len() > max {
            let Some(old) = e.map.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) else {
                break;
            };
            e.map.remove(&old);
            self.evicted(1);
        }
    }

    /// True while `key` has an entry (warmed up or captured): an evicted or
    /// never-run key has none.
    pub fn contains(&self, key: u64) -> bool {
        self.lock().map.contains_key(&key)
    }

    /// The maximum number of keys (0: no limit).
    pub fn max_entries(&self) -> usize {
        self.max_entries.load(Ordering::Relaxed)
    }

    fn evicted(&self, n: u64) {
        if n > 0 {
            self.evictions.fetch_add(n, Ordering::Relaxed);
            DeviceCounters::bump(&self.device.counters.graph_cache_evictions, n);
        }
    }

    fn insert(&self, key: u64, e: Entry) {
        let n = self.lock().insert(key, e, self.max_entries());
        self.evicted(n);
    }

    /// Runs the region `key` on `stream`: eagerly, captured, or replayed.
    ///
    /// A body that runs the same key of the same cache again, on this thread, gets
    /// `InvalidState` from that inner run: recursing would capture into a capture
    /// (or, on the eager pass, never end).
    pub fn run(
        &self,
        key: u64,
        stream: &Arc<Stream>,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        stream.device.same_device(&self.device, "the graph cache")?;
        let _guard = RunGuard::enter(self as *const GraphCache as usize, key)?;
        let c = &self.device.counters;
        if !graphs_enabled() {
            self.eager.fetch_add(1, Ordering::Relaxed);
            DeviceCounters::bump(&c.graph_cache_eager, 1);
            return body();
        }
        let ready = {
            let mut e = self.lock();
            match e.touch(key) {
                None => None,
                Some(Entry::WarmedUp) => Some(None),
                Some(Entry::Ready(x)) => Some(Some(x.clone())),
            }
        };
        match ready {
            None => {
                body()?;
                self.eager.fetch_add(1, Ordering::Relaxed);
                DeviceCounters::bump(&c.graph_cache_eager, 1);
                self.insert(key, Entry::WarmedUp);
                Ok(())
            }
            Some(None) => {
                capture_begin(stream, CaptureMode::Relaxed)?;
                let r = body();
                let g = capture_end(stream);
                r?;
                let exec = g?.instantiate()?;
                exec.launch(stream)?;
                self.captured.fetch_add(1, Ordering::Relaxed);
                DeviceCounters::bump(&c.graph_cache_captures, 1);
                self.insert(key, Entry::Ready(exec));
                Ok(())
            }
            Some(Some(exec)) => {
                exec.launch(stream)?;
                self.replayed.fetch_add(1, Ordering::Relaxed);
                DeviceCounters::bump(&c.graph_cache_hits, 1);
                Ok(())
            }
        }
    }
}

thread_local! {
    /// The (cache, key) regions whose body runs on this thread now.
    static RUNNING: std::cell::RefCell<Vec<(usize, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks a region as running on this thread for the length of its run.
struct RunGuard(usize, u64);

impl RunGuard {
    fn enter(cache: usize, key: u64) -> Result<RunGuard> {
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            if r.contains(&(cache, key)) {
                return Err(crate::error::Error::new(
                    crate::error::ErrorCode::InvalidState,
                    format!("graph cache key {key} is already running on this thread: its body recursed"),
                ));
            }
            r.push((cache, key));
            Ok(RunGuard(cache, key))
        })
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(i) = r.iter().rposition(|e| *e == (self.0, self.1)) {
                r.remove(i);
            }
        });
    }
}

//! A cache of captured regions keyed by a caller key (MXNet's "capture once per
//! static shape"): the first run of a key is eager, the second is captured, later
//! runs replay. `SLUICE_GRAPHS=0` makes every region eager.

use crate::backend::CaptureMode;
use crate::capture::{capture_begin, capture_end};
use crate::counters::DeviceCounters;
use crate::device::Device;
use crate::error::Result;
use crate::graph::GraphExec;
use crate::stream::Stream;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// Counters of a graph cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub eager: u64,
    pub captured: u64,
    pub replayed: u64,
    pub entries: u64,
}

enum Entry {
    WarmedUp,
    Ready(Arc<GraphExec>),
}

/// MXNet-style cache: per caller key, the first run is eager (a warm-up), the second
/// is captured and instantiated, later runs replay.
pub struct GraphCache {
    pub(crate) device: Arc<Device>,
    entries: Mutex<HashMap<u64, Entry>>,
    eager: AtomicU64,
    captured: AtomicU64,
    replayed: AtomicU64,
}

impl GraphCache {
    pub fn new(device: &Arc<Device>) -> Arc<GraphCache> {
        Arc::new(GraphCache {
            device: device.clone(),
            entries: Mutex::new(HashMap::new()),
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
            entries: self.entries.lock().unwrap_or_else(|p| p.into_inner()).len() as u64,
        }
    }

    /// Runs the region `key` on `stream`: eagerly, captured, or replayed.
    pub fn run(
        &self,
        key: u64,
        stream: &Arc<Stream>,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        stream.device.same_device(&self.device, "the graph cache")?;
        let c = &self.device.counters;
        if !graphs_enabled() {
            self.eager.fetch_add(1, Ordering::Relaxed);
            DeviceCounters::bump(&c.graph_cache_eager, 1);
            return body();
        }
        let ready = {
            let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            match e.get(&key) {
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
                self.entries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, Entry::WarmedUp);
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
                self.entries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, Entry::Ready(exec));
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

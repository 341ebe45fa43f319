//! Captured graphs and their executable instances: instantiate, upload, update in
//! place or re-instantiate, launch as one tracked op, DOT dumps. Capture itself is
//! in [`crate::capture`]; the per-key cache of captured regions in
//! [`crate::graph_cache`].

use crate::c_enum::c_enum;
use crate::counters::DeviceCounters;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::sync::SyncObject;
use crate::trace;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, LazyLock, Mutex};

/// `SLUICE_GRAPH_DOT_DIR`, read once, at the process's first instantiate.
static GRAPH_DOT_DIR: LazyLock<Option<OsString>> =
    LazyLock::new(|| std::env::var_os("SLUICE_GRAPH_DOT_DIR"));

/// Memory a graph uses, kept alive as long as the graph (or an exec of it) lives.
pub(crate) type KeepAlive = Vec<Arc<dyn std::any::Any + Send + Sync>>;

/// A captured graph. It keeps the memory of the buffers it uses alive (also after
/// they are freed) as long as it or an executable graph made from it exists.
pub struct Graph {
    pub(crate) device: Arc<Device>,
    pub(crate) raw: u64,
    pub(crate) reads: Vec<Arc<SyncObject>>,
    pub(crate) writes: Vec<Arc<SyncObject>>,
    pub(crate) keep: KeepAlive,
    pub(crate) callbacks: bool,
}

/// An instantiated graph, launchable on any stream of its device.
pub struct GraphExec {
    pub(crate) device: Arc<Device>,
    raw: Mutex<ExecState>,
    pub id: u64,
}

pub(crate) struct ExecState {
    pub(crate) raw: u64,
    pub(crate) reads: Vec<Arc<SyncObject>>,
    pub(crate) writes: Vec<Arc<SyncObject>>,
    pub(crate) keep: KeepAlive,
    pub(crate) callbacks: bool,
}

c_enum! {
    /// How `sluice_graph_exec_update` applied a graph, seen by C as
    /// `SLUICE_GRAPH_UPDATE_*`.
    pub enum GraphUpdate: "SLUICE_GRAPH_UPDATE_" {
        /// `sluice_graph_exec_update` updated the executable graph in place.
        InPlace = 0 => IN_PLACE,
        /// `sluice_graph_exec_update` re-instantiated because the update was refused.
        Reinstantiated = 1 => REINSTANTIATED,
    }
}

/// How `GraphExec::update` applied a new graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    InPlace,
    /// The in-place update was refused for the given reason; the graph was
    /// re-instantiated instead.
    Reinstantiated(String),
}

impl Drop for Graph {
    fn drop(&mut self) {
        self.device.backend.graph_destroy(self.raw);
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let st = self.raw.get_mut().unwrap_or_else(|p| p.into_inner());
        self.device.backend.graph_exec_destroy(st.raw);
    }
}

impl Graph {
    pub fn node_count(&self) -> Result<usize> {
        self.device.backend.graph_node_count(self.raw)
    }

    /// Writes a Graphviz DOT description of the graph.
    pub fn debug_dot(&self, path: &std::ffi::CStr, verbose: bool) -> Result<()> {
        // An unwritable path is the caller's error on both backends (the driver
        // would answer CUDA_ERROR_OPERATING_SYSTEM).
        let file = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(file)
        {
            return Err(crate::error::Error::invalid_argument(format!(
                "cannot write the graph's DOT file '{}': {e}",
                file.display()
            )));
        }
        self.device.backend.graph_debug_dot(self.raw, path, verbose)
    }

    /// Instantiates the graph. With `SLUICE_GRAPH_DOT_DIR` set (read at the
    /// process's first instantiate), also writes `<dir>/graph-<device>-<id>.dot`.
    pub fn instantiate(&self) -> Result<Arc<GraphExec>> {
        let t0 = trace::span_start();
        let raw = self.device.backend.graph_instantiate(self.raw)?;
        let exec = Arc::new(GraphExec {
            device: self.device.clone(),
            raw: Mutex::new(ExecState {
                raw,
                reads: self.reads.clone(),
                writes: self.writes.clone(),
                keep: self.keep.clone(),
                callbacks: self.callbacks,
            }),
            id: crate::device::next_id(),
        });
        trace::thread_span("graph instantiate", "graph", t0, |a| {
            a.u64("graph_exec", exec.id)
        });
        if let Some(dir) = GRAPH_DOT_DIR.as_ref() {
            let p = std::path::Path::new(dir).join(format!(
                "graph-{}-{}.dot",
                self.device.ordinal(),
                exec.id
            ));
            let c = std::ffi::CString::new(p.to_string_lossy().as_bytes())
                .map_err(|_| Error::invalid_argument("SLUICE_GRAPH_DOT_DIR contains NUL"))?;
            self.debug_dot(&c, true)?;
        }
        Ok(exec)
    }
}

impl GraphExec {
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, ExecState> {
        self.raw.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn upload(&self, stream: &Stream) -> Result<()> {
        stream.device.same_device(&self.device, "the graph")?;
        // Held across the push: an `update` that re-instantiates destroys the raw exec.
        let st = self.state();
        stream.push(|| self.device.backend.graph_upload(st.raw, stream.raw))
    }

    /// Launches the graph on `stream` as ONE tracked op whose read and write sets
    /// are the union of the captured ops': it waits before, and records one event after.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        crate::ops::launch_graph(stream, self)
    }

    /// Applies `graph` (same topology, new pointers or parameters) in place with
    /// `cuGraphExecUpdate`, falling back to re-instantiation when that is refused.
    pub fn update(&self, graph: &Graph) -> Result<UpdateOutcome> {
        self.device.same_device(&graph.device, "the graph")?;
        let t0 = trace::span_start();
        let mut st = self.state();
        let outcome = match self.device.backend.graph_exec_update(st.raw, graph.raw)? {
            Ok(()) => UpdateOutcome::InPlace,
            Err(reason) => {
                let fresh = self.device.backend.graph_instantiate(graph.raw)?;
                self.device.backend.graph_exec_destroy(st.raw);
                st.raw = fresh;
                UpdateOutcome::Reinstantiated(reason)
            }
        };
        st.reads = graph.reads.clone();
        st.writes = graph.writes.clone();
        st.keep = graph.keep.clone();
        st.callbacks = graph.callbacks;
        drop(st);
        let c = &self.device.counters;
        trace::thread_span("graph update", "graph", t0, |a| {
            a.u64("graph_exec", self.id);
            match &outcome {
                UpdateOutcome::InPlace => a.str("result", "in place"),
                UpdateOutcome::Reinstantiated(r) => {
                    a.str("result", &format!("re-instantiated: {r}"))
                }
            }
        });
        match &outcome {
            UpdateOutcome::InPlace => DeviceCounters::bump(&c.graph_updates, 1),
            UpdateOutcome::Reinstantiated(reason) => {
                DeviceCounters::bump(&c.graph_update_fallbacks, 1);
                crate::log::info(|| {
                    format!(
                        "graph exec #{}: in-place update refused ({reason}); re-instantiated",
                        self.id
                    )
                });
            }
        }
        Ok(outcome)
    }
}

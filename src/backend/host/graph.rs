//! The host backend's graphs: captured jobs, flattened and replayed.

use super::{
    graph_ref, lock, stream_ref, CapturedStep, HostDevice, HostGraph, Job, StepKind, Worker,
};
use crate::backend::faults::{self, hit, Kind};
use crate::backend::{CaptureMode, GraphApi};
use crate::error::{Error, ErrorCode, Result};
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

/// An executable graph: its steps, and where its last launch was queued. As with
/// `cuGraphLaunch`, one exec runs one launch at a time: a launch on another
/// stream's worker first waits for the one before.
struct HostExec {
    graph: HostGraph,
    last: Option<(Arc<Worker>, u64)>,
}

fn exec_ref<'a>(raw: u64) -> &'a Mutex<HostExec> {
    // SAFETY: the core passes back only live execs made by `graph_instantiate`.
    unsafe { &*(raw as *const Mutex<HostExec>) }
}

impl GraphApi for HostDevice {
    fn capture_begin(&self, stream: u64, mode: CaptureMode) -> Result<()> {
        hit("capture_begin")?;
        let s = stream_ref(stream);
        // Lock order: the origin's `joined`, then workers' states (as a fork's wait).
        let mut joined = lock(&s.joined);
        let mut st = lock(&s.worker.state);
        if st.capture.is_some() {
            return Err(Error::new(
                ErrorCode::InvalidState,
                "stream is already capturing",
            ));
        }
        st.capture = Some(Vec::new());
        st.capture_gen += 1;
        st.capture_invalidated = false;
        st.capture_thread = (mode != CaptureMode::Relaxed).then(|| std::thread::current().id());
        joined.clear();
        *lock(&s.origin) = Some(stream);
        Ok(())
    }

    fn capture_end(&self, stream: u64) -> Result<u64> {
        let s = stream_ref(stream);
        // The whole end under the origin's `joined`: a fork's wait, which takes it
        // first, either joins before the end collects it or sees the capture gone.
        let mut joined_guard = lock(&s.joined);
        let (steps, mut invalidated, wrong_thread) = {
            let mut st = lock(&s.worker.state);
            let steps = st
                .capture
                .take()
                .ok_or_else(|| Error::new(ErrorCode::InvalidState, "stream is not capturing"))?;
            let wrong_thread = st
                .capture_thread
                .take()
                .is_some_and(|t| t != std::thread::current().id());
            (
                steps,
                std::mem::take(&mut st.capture_invalidated),
                wrong_thread,
            )
        };
        let joined = std::mem::take(&mut *joined_guard);
        *lock(&s.origin) = None;
        let mut streams = vec![(stream, steps)];
        for j in joined {
            let js = stream_ref(j);
            let jsteps = {
                // A forked stream's invalidation (a query of it, or of an event
                // recorded on it) invalidates the whole capture.
                let mut st = lock(&js.worker.state);
                invalidated |= std::mem::take(&mut st.capture_invalidated);
                st.capture.take().unwrap_or_default()
            };
            *lock(&js.origin) = None;
            streams.push((j, jsteps));
        }
        drop(joined_guard);
        // An injected failure still ends the capture, as the driver's does.
        hit("capture_end")?;
        if invalidated {
            // As cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, no graph.
            return Err(Error::driver(
                901,
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                "the capture was invalidated: one of its streams was queried or \
                 synchronized, or an event recorded in it, while capturing",
            ));
        }
        if wrong_thread {
            // As cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD.
            return Err(Error::driver(
                908,
                "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
                "ending a capture begun in a mode other than relaxed on another thread",
            ));
        }
        // Every forked stream's last step must be joined on by another stream.
        let mut unjoined = 0;
        for (j, jsteps) in streams.iter().skip(1) {
            let last = jsteps.len().saturating_sub(1);
            let joined_back = streams.iter().any(|(o, steps)| {
                o != j
                    && steps.iter().any(
                        |st| matches!(st, CapturedStep::Join(f, idx) if f == j && *idx >= last),
                    )
            });
            if !joined_back && jsteps.iter().any(|s| matches!(s, CapturedStep::Run(..))) {
                unjoined += 1;
            }
        }
        if unjoined > 0 {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                format!(
                    "capture has {unjoined} forked stream(s) that were not joined back into the origin stream"
                ),
            ));
        }
        let raw = Box::into_raw(Box::new(HostGraph { streams })) as u64;
        faults::made(Kind::Graph, raw, 0);
        Ok(raw)
    }

    fn capture_active(&self, stream: u64) -> Result<bool> {
        Ok(self.capturing(stream))
    }

    fn graph_destroy(&self, graph: u64) {
        faults::gone(graph);
        // SAFETY: graph came from Box::into_raw in capture_end and is destroyed once.
        drop(unsafe { Box::from_raw(graph as *mut HostGraph) });
    }

    fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        hit("graph_instantiate")?;
        let g = graph_ref(graph);
        let exec = HostExec {
            graph: HostGraph {
                streams: g.streams.clone(),
            },
            last: None,
        };
        let raw = Box::into_raw(Box::new(Mutex::new(exec))) as u64;
        faults::made(Kind::GraphExec, raw, 0);
        Ok(raw)
    }

    fn graph_exec_destroy(&self, exec: u64) {
        faults::gone(exec);
        // SAFETY: exec came from Box::into_raw in graph_instantiate, destroyed once.
        drop(unsafe { Box::from_raw(exec as *mut Mutex<HostExec>) });
    }

    fn graph_upload(&self, _exec: u64, _stream: u64) -> Result<()> {
        hit("graph_upload")
    }

    fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        hit("graph_launch")?;
        let mut e = lock(exec_ref(exec));
        let plan = flatten(&e.graph)?;
        let worker = &stream_ref(stream).worker;
        if let Some((before, seq)) = e.last.clone() {
            if !Arc::ptr_eq(&before, worker) {
                let wait: Job = Arc::new(move || before.wait_until(seq));
                self.enqueue(stream, StepKind::Graph, wait);
            }
        }
        let seq = self.enqueue(
            stream,
            StepKind::Graph,
            Arc::new(move || {
                let _replay = super::Replaying::enter();
                for job in plan.iter() {
                    job()
                }
            }),
        );
        e.last = Some((worker.clone(), seq));
        Ok(())
    }

    fn graph_exec_update(&self, exec: u64, graph: u64) -> Result<std::result::Result<(), String>> {
        hit("graph_exec_update")?;
        let g = graph_ref(graph);
        let mut cur = lock(exec_ref(exec));
        // As cuGraphExecUpdate: the same nodes with the same dependencies, each of
        // the same type; new parameters (addresses, values, lengths, functions) are
        // what an update takes.
        if let Err(reason) = same_topology(&nodes(&cur.graph)?, &nodes(g)?) {
            return Ok(Err(reason));
        }
        cur.graph.streams = g.streams.clone();
        Ok(Ok(()))
    }

    fn graph_node_count(&self, graph: u64) -> Result<usize> {
        Ok(graph_ref(graph)
            .streams
            .iter()
            .map(|s| {
                s.1.iter()
                    .filter(|st| matches!(st, CapturedStep::Run(..)))
                    .count()
            })
            .sum())
    }

    fn graph_debug_dot(&self, graph: u64, path: &CStr, verbose: bool) -> Result<()> {
        let g = graph_ref(graph);
        let mut out = String::from("digraph sluice_host_graph {\n");
        for (si, (_, steps)) in g.streams.iter().enumerate() {
            let mut prev: Option<String> = None;
            for (i, st) in steps.iter().enumerate() {
                let id = format!("s{si}_{i}");
                let label = match st {
                    CapturedStep::Run(kind, ..) => kind.name().to_string(),
                    CapturedStep::Mark => "event".to_string(),
                    CapturedStep::Join(..) => "join".to_string(),
                };
                if verbose {
                    out += &format!("  {id} [label=\"{label} (stream {si}, step {i})\"];\n");
                } else {
                    out += &format!("  {id} [label=\"{label}\"];\n");
                }
                if let Some(p) = prev {
                    out += &format!("  {p} -> {id};\n");
                }
                if let CapturedStep::Join(o, idx) = st {
                    if let Some(oi) = g.streams.iter().position(|s| s.0 == *o) {
                        out += &format!("  s{oi}_{idx} -> {id};\n");
                    }
                }
                prev = Some(id);
            }
        }
        out += "}\n";
        let p = path
            .to_str()
            .map_err(|_| Error::invalid_argument("DOT path is not UTF-8"))?;
        std::fs::write(p, out)
            .map_err(|e| Error::invalid_argument(format!("writing DOT file {p}: {e}")))
    }
}

/// Visits the steps of a captured multi-stream graph in one sequence that respects
/// each stream's order and every join: `visit(stream index, step, the index of the
/// stream a join waits on)`.
fn walk(g: &HostGraph, mut visit: impl FnMut(usize, &CapturedStep, Option<usize>)) -> Result<()> {
    let n = g.streams.len();
    let mut pos = vec![0usize; n];
    loop {
        let mut progressed = false;
        let mut all_done = true;
        for si in 0..n {
            let steps = &g.streams[si].1;
            while pos[si] < steps.len() {
                let step = &steps[pos[si]];
                let mut origin = None;
                if let CapturedStep::Join(o, idx) = step {
                    origin = g.streams.iter().position(|s| s.0 == *o);
                    if origin.is_some_and(|oi| pos[oi] <= *idx) {
                        break;
                    }
                }
                visit(si, step, origin);
                pos[si] += 1;
                progressed = true;
            }
            if pos[si] < steps.len() {
                all_done = false;
            }
        }
        if all_done {
            return Ok(());
        }
        if !progressed {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                "captured graph has a dependency cycle",
            ));
        }
    }
}

/// The jobs of a captured multi-stream graph in one sequence (see [`walk`]).
fn flatten(g: &HostGraph) -> Result<Arc<Vec<Job>>> {
    let mut out = Vec::new();
    walk(g, |_, step, _| {
        if let CapturedStep::Run(.., job) = step {
            out.push(job.clone());
        }
    })?;
    Ok(Arc::new(out))
}

/// A node of a captured graph as the driver would make it: its type, the nodes it
/// depends on (indices into the same list) and its number in capture order.
struct Node {
    kind: StepKind,
    deps: Vec<usize>,
    made: u64,
}

/// The nodes and edges of a captured graph, as a CUDA stream capture makes them:
/// each stream carries the set of nodes its next node will depend on; a captured
/// job is a node that depends on that set and then replaces it; an event record
/// makes no node (it keeps a copy of the set), and a wait makes none (it adds the
/// recorded set to the waiting stream's; a fork starts from it). Redundant edges
/// stay, as the driver keeps them.
fn nodes(g: &HostGraph) -> Result<Vec<Node>> {
    let n = g.streams.len();
    // Each stream's dependency set now, and after each of its steps so far.
    let mut cur: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut after: Vec<Vec<Vec<usize>>> = vec![Vec::new(); n];
    let mut out = Vec::new();
    walk(g, |si, step, origin| {
        match step {
            CapturedStep::Run(kind, made, _) => {
                let deps = std::mem::replace(&mut cur[si], vec![out.len()]);
                out.push(Node {
                    kind: *kind,
                    deps,
                    made: *made,
                });
            }
            CapturedStep::Mark => {}
            CapturedStep::Join(_, idx) => {
                if let Some(oi) = origin {
                    for &d in &after[oi][*idx] {
                        if !cur[si].contains(&d) {
                            cur[si].push(d);
                        }
                    }
                }
            }
        }
        after[si].push(cur[si].clone());
    })?;
    Ok(out)
}

/// The nodes numbered by their place in the graph, not by stream: a topological
/// order that takes, of the nodes whose dependencies are numbered, the one with
/// the least (sorted) dependency numbers, then the least type, then the one
/// captured first. Two captures of one structure number alike whichever streams
/// forked first and however their captures interleaved in time; the driver
/// updates across both too (`tools/driver-probes/graph_update_fidelity.c`).
/// Returns each node's type and sorted dependency numbers, in that order.
fn canonical(nodes: &[Node]) -> Vec<(StepKind, Vec<usize>)> {
    use std::collections::BTreeSet;
    let mut dependents = vec![Vec::new(); nodes.len()];
    let mut waiting: Vec<usize> = nodes.iter().map(|n| n.deps.len()).collect();
    for (i, n) in nodes.iter().enumerate() {
        for &d in &n.deps {
            dependents[d].push(i);
        }
    }
    let mut number = vec![usize::MAX; nodes.len()];
    let key = |i: usize, number: &[usize]| {
        let mut deps: Vec<usize> = nodes[i].deps.iter().map(|&d| number[d]).collect();
        deps.sort_unstable();
        (deps, nodes[i].kind, nodes[i].made, i)
    };
    let mut ready: BTreeSet<_> = (0..nodes.len())
        .filter(|&i| waiting[i] == 0)
        .map(|i| key(i, &number))
        .collect();
    let mut out = Vec::with_capacity(nodes.len());
    while let Some((deps, kind, _, i)) = ready.pop_first() {
        number[i] = out.len();
        out.push((kind, deps));
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert(key(j, &number));
            }
        }
    }
    out
}

/// Whether an exec of `old` can take `new` in place, as cuGraphExecUpdate decides
/// (the same nodes, each with the same dependencies and of the same type), with
/// the reason in the words of the cuda backend's refusals when it cannot.
fn same_topology(old: &[Node], new: &[Node]) -> std::result::Result<(), String> {
    if old.len() != new.len() {
        return Err(format!(
            "topology changed (node count differs: {} -> {})",
            old.len(),
            new.len()
        ));
    }
    let (old, new) = (canonical(old), canonical(new));
    let pairs = || old.iter().zip(&new);
    if let Some((_, (kind, _))) = pairs().find(|(a, b)| a.1 != b.1) {
        return Err(format!("topology changed (at a {} node)", kind.name()));
    }
    if let Some((_, (kind, _))) = pairs().find(|(a, b)| a.0 != b.0) {
        return Err(format!("node type changed (at a {} node)", kind.name()));
    }
    Ok(())
}

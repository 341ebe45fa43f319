//! Host backend: CPU streams with the semantics of CUDA streams.
//!
//! - A stream is a FIFO worker thread; every enqueued job gets a sequence number.
//! - An event remembers (worker, sequence) of its latest recording.
//! - A stream waiting on an event enqueues a job that blocks its worker until the
//!   source worker has completed that sequence. Waits only name work that was already
//!   enqueued, so no cycle (and no deadlock) can form.
//! - "Device" memory is host memory, so copies are `memcpy` run by the worker.
//! - While a stream captures, jobs are recorded instead of run (see `capture_*`).

use super::{BackendKind, DeviceApi, DeviceProps};
use crate::error::{Error, ErrorCode, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

mod event;
mod graph;
mod memory;
mod module;
mod stream;

/// A recorded host job. `Fn` so that captured graphs can replay it.
pub(crate) type Job = Arc<dyn Fn() + Send + Sync + 'static>;

/// Number of host devices: `SLUICE_HOST_DEVICES` (1..=64), default 1.
pub fn device_count() -> u32 {
    std::env::var("SLUICE_HOST_DEVICES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(1)
}

/// Test knob: `SLUICE_HOST_JITTER_US=n` sleeps each host job's worker for a
/// pseudo-random 0..n µs before the job runs, to widen race windows under a
/// fuzzer or a stress test. Off (0) by default.
fn jitter_us() -> u32 {
    static JITTER: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *JITTER.get_or_init(|| {
        std::env::var("SLUICE_HOST_JITTER_US")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0)
            .min(1_000_000)
    })
}

/// Sleeps 0..`max` µs, drawn from `state` (xorshift64).
fn jitter_sleep(state: &mut u64, max: u32) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let us = *state % (u64::from(max) + 1);
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

/// Opens host device `ordinal`.
pub fn open(ordinal: u32) -> Result<HostDevice> {
    let count = device_count();
    if ordinal >= count {
        return Err(Error::new(
            ErrorCode::NoDevice,
            format!("host device {ordinal} does not exist (there are {count})"),
        ));
    }
    Ok(HostDevice { ordinal })
}

pub struct HostDevice {
    ordinal: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic never happens while these locks are held; recover the data anyway.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct WorkerState {
    queue: VecDeque<Job>,
    submitted: u64,
    completed: u64,
    shutdown: bool,
    capture: Option<Vec<CapturedStep>>,
    /// Bumped whenever `capture` begins (a capture begun here, or a fork into one), so
    /// that a recording names the capture it was made in.
    capture_gen: u64,
    /// Set when the stream was queried or synchronized while capturing, or an event
    /// recorded in this capture on it was: as with CUDA, the capture is invalidated
    /// and its end fails (a forked stream's flag fails its origin's end).
    capture_invalidated: bool,
    /// The thread that began a capture in a mode other than relaxed: as with CUDA,
    /// only it may end the capture.
    capture_thread: Option<std::thread::ThreadId>,
}

/// The shared part of a host stream.
pub(crate) struct Worker {
    /// Host streams (owned and adopted) using this worker; it stops at zero.
    users: std::sync::atomic::AtomicUsize,
    state: Mutex<WorkerState>,
    work_cv: Condvar,
    done_cv: Condvar,
}

impl Worker {
    /// Enqueues a job and returns its sequence number.
    fn submit(&self, job: Job) -> u64 {
        let mut st = lock(&self.state);
        st.submitted += 1;
        st.queue.push_back(job);
        let seq = st.submitted;
        drop(st);
        self.work_cv.notify_one();
        seq
    }

    fn wait_until(&self, seq: u64) {
        let mut st = lock(&self.state);
        while st.completed < seq {
            st = self.done_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn completed(&self) -> u64 {
        lock(&self.state).completed
    }

    fn run(self: Arc<Self>) {
        let jitter = jitter_us();
        let mut seed = (Arc::as_ptr(&self) as u64) | 1;
        loop {
            let job = {
                let mut st = lock(&self.state);
                loop {
                    if let Some(job) = st.queue.pop_front() {
                        break job;
                    }
                    if st.shutdown {
                        return;
                    }
                    st = self.work_cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            if jitter > 0 {
                jitter_sleep(&mut seed, jitter);
            }
            // A job never unwinds into the worker loop.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job()));
            // Release what the job owns (callback user data) before it counts as done.
            drop(job);
            lock(&self.state).completed += 1;
            self.done_cv.notify_all();
        }
    }
}

/// What a captured job is: the type of the node the driver would make for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StepKind {
    Memcpy,
    Memset,
    /// A host function.
    Host,
    MemFree,
    /// A graph launched into the capture (with the wait for its exec's last launch).
    Graph,
}

impl StepKind {
    /// The node type in words, as the cuda backend names `CUgraphNodeType`s.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StepKind::Memcpy => "memcpy",
            StepKind::Memset => "memset",
            StepKind::Host => "host",
            StepKind::MemFree => "memory free",
            StepKind::Graph => "child graph",
        }
    }
}

/// Nodes made by host captures so far: each captured job's number, so that the
/// nodes of a multi-stream graph keep the order they were captured in.
static NODES_MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// True on a worker while it runs a graph's jobs (`graph_launch`).
    static REPLAYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the worker thread as replaying a graph until dropped (also when a job
/// unwinds).
pub(crate) struct Replaying;

impl Replaying {
    pub(crate) fn enter() -> Replaying {
        REPLAYING.with(|r| r.set(true));
        Replaying
    }
}

impl Drop for Replaying {
    fn drop(&mut self) {
        REPLAYING.with(|r| r.set(false));
    }
}

/// True when the calling thread is a worker running a graph's jobs: a host
/// function that asks runs as a node of a graph replay, not as one queued directly
/// on the stream.
pub(crate) fn replaying() -> bool {
    REPLAYING.with(|r| r.get())
}

/// A step of a host capture.
#[derive(Clone)]
pub(crate) enum CapturedStep {
    /// A job: a node of the graph, with its number in the order the process's
    /// captures made their nodes (`NODES_MADE`).
    Run(StepKind, u64, Job),
    /// An event recorded inside the capture: a point others may join on.
    Mark,
    /// Wait until the step at index `.1` of stream `.0` (within the same replay) ran.
    Join(u64, usize),
}

struct HostStream {
    worker: Arc<Worker>,
    /// Capture bookkeeping: which other streams joined this capture, if it is the origin.
    joined: Mutex<Vec<u64>>,
    /// The origin stream of the capture this stream takes part in.
    origin: Mutex<Option<u64>>,
}

struct Recording {
    worker: Arc<Worker>,
    seq: u64,
    stamp: Arc<Mutex<Option<Instant>>>,
    /// Set when recorded during a capture: (stream, index of the step).
    captured: Option<Captured>,
}

struct HostEvent {
    timing: bool,
    rec: Mutex<Option<Recording>>,
}

/// Where a recording made in a capture stands: its stream, its step there, and the
/// stream's `capture_gen` then.
#[derive(Clone, Copy)]
struct Captured {
    stream: u64,
    step: usize,
    gen: u64,
}

/// A captured host graph: per stream, its steps. Replay runs each stream's steps in
/// order on the launching worker; joins order the streams.
pub(crate) struct HostGraph {
    pub(crate) streams: Vec<(u64, Vec<CapturedStep>)>,
}

fn stream_ref<'a>(raw: u64) -> &'a HostStream {
    // SAFETY: the core passes back only live raw streams made by `stream_create`.
    unsafe { &*(raw as *const HostStream) }
}

fn event_ref<'a>(raw: u64) -> &'a HostEvent {
    // SAFETY: the core passes back only live raw events made by `event_create`.
    unsafe { &*(raw as *const HostEvent) }
}

fn graph_ref<'a>(raw: u64) -> &'a HostGraph {
    // SAFETY: the core passes back only live raw graphs made by `capture_end`.
    unsafe { &*(raw as *const HostGraph) }
}

impl HostDevice {
    /// Enqueues `job` on `stream`, or records it (a node of `kind`) when the stream
    /// is capturing. Returns the sequence number, or the capture step index.
    fn enqueue(&self, stream: u64, kind: StepKind, job: Job) -> u64 {
        let w = &stream_ref(stream).worker;
        {
            let mut st = lock(&w.state);
            if let Some(steps) = st.capture.as_mut() {
                let made = NODES_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                steps.push(CapturedStep::Run(kind, made, job));
                return (steps.len() - 1) as u64;
            }
        }
        w.submit(job)
    }

    fn capturing(&self, stream: u64) -> bool {
        lock(&stream_ref(stream).worker.state).capture.is_some()
    }
}

impl DeviceApi for HostDevice {
    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn props(&self) -> Result<DeviceProps> {
        // SAFETY: sysconf has no preconditions.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
        Ok(DeviceProps {
            name: format!("sluice host device {}", self.ordinal),
            total_memory: pages * page,
            compute_capability: (0, 0),
            multiprocessor_count: std::thread::available_parallelism()
                .map(|n| n.get() as i32)
                .unwrap_or(1),
        })
    }

    fn priority_range(&self) -> Result<(i32, i32)> {
        Ok((0, 0))
    }
}

//! Host backend: CPU streams with the semantics of CUDA streams.
//!
//! - A stream is a FIFO worker thread; every enqueued job gets a sequence number.
//! - An event remembers (worker, sequence) of its latest recording.
//! - A stream waiting on an event enqueues a job that blocks its worker until the
//!   source worker has completed that sequence. Waits only name work that was already
//!   enqueued, so no cycle (and no deadlock) can form.
//! - "Device" memory is host memory, so copies are `memcpy` run by the worker.
//! - While a stream captures, jobs are recorded instead of run (see `capture_*`).

use super::faults::{self, hit, Kind};
use super::{
    BackendKind, BuiltinHeader, CaptureMode, CompilePlan, DeviceApi, DeviceProps, EventApi,
    GraphApi, HostFn, LaunchDims, MemoryApi, ModuleApi, StreamApi,
};
use crate::error::{Error, ErrorCode, Result};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

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

/// Live host streams, so that `wrap_external` can validate a raw handle.
fn live_streams() -> &'static Mutex<HashSet<u64>> {
    static LIVE: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Host memory this backend treats as page-locked: its pinned blocks and registered
/// ranges, by start address (any host device's; host memory is one).
fn pinned_ranges() -> &'static Mutex<BTreeMap<u64, usize>> {
    static RANGES: OnceLock<Mutex<BTreeMap<u64, usize>>> = OnceLock::new();
    RANGES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

struct WorkerState {
    queue: VecDeque<Job>,
    submitted: u64,
    completed: u64,
    shutdown: bool,
    capture: Option<Vec<CapturedStep>>,
    /// Set when the stream was synchronized while capturing: as with CUDA, the
    /// capture is invalidated and its end fails.
    capture_invalidated: bool,
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
            // A job never unwinds into the worker loop.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job()));
            // Release what the job owns (callback user data) before it counts as done.
            drop(job);
            lock(&self.state).completed += 1;
            self.done_cv.notify_all();
        }
    }
}

/// A step of a host capture.
#[derive(Clone)]
pub(crate) enum CapturedStep {
    Run(Job),
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
    captured: Option<(u64, usize)>,
}

struct HostEvent {
    timing: bool,
    rec: Mutex<Option<Recording>>,
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
    /// Enqueues `job` on `stream`, or records it when the stream is capturing.
    /// Returns the sequence number, or the capture step index.
    fn enqueue(&self, stream: u64, job: Job) -> u64 {
        let w = &stream_ref(stream).worker;
        {
            let mut st = lock(&w.state);
            if let Some(steps) = st.capture.as_mut() {
                steps.push(CapturedStep::Run(job));
                return (steps.len() - 1) as u64;
            }
        }
        w.submit(job)
    }

    fn capturing(&self, stream: u64) -> bool {
        lock(&stream_ref(stream).worker.state).capture.is_some()
    }
}

fn aligned_alloc(size: usize, align: usize) -> Result<*mut u8> {
    if size > isize::MAX as usize {
        return Err(Error::new(
            ErrorCode::OutOfMemory,
            format!("host allocation of {size} bytes is larger than any address space"),
        ));
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes p only on success; align is a power of two.
    let rc = unsafe { libc::posix_memalign(&mut p, align, size.max(1)) };
    if rc != 0 || p.is_null() {
        return Err(Error::new(
            ErrorCode::OutOfMemory,
            format!("host allocation of {size} bytes failed"),
        ));
    }
    Ok(p as *mut u8)
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

impl StreamApi for HostDevice {
    fn stream_create(&self, _non_blocking: bool, _priority: i32) -> Result<u64> {
        hit("stream_create")?;
        let worker = Arc::new(Worker {
            users: std::sync::atomic::AtomicUsize::new(1),
            state: Mutex::new(WorkerState {
                queue: VecDeque::new(),
                submitted: 0,
                completed: 0,
                shutdown: false,
                capture: None,
                capture_invalidated: false,
            }),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
        });
        let w2 = worker.clone();
        std::thread::Builder::new()
            .name("sluice-host-stream".into())
            .spawn(move || w2.run())
            .map_err(|e| Error::new(ErrorCode::OutOfMemory, format!("spawn worker: {e}")))?;
        let raw = Box::into_raw(Box::new(HostStream {
            worker,
            joined: Mutex::new(Vec::new()),
            origin: Mutex::new(None),
        })) as u64;
        lock(live_streams()).insert(raw);
        faults::made(Kind::Stream, raw, 0);
        Ok(raw)
    }

    fn stream_destroy(&self, stream: u64) {
        lock(live_streams()).remove(&stream);
        faults::gone(stream);
        // SAFETY: `stream` came from Box::into_raw and is destroyed once.
        let s = unsafe { Box::from_raw(stream as *mut HostStream) };
        if s.worker
            .users
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            // The worker drains what is queued, then exits; destroy does not block.
            lock(&s.worker.state).shutdown = true;
            s.worker.work_cv.notify_all();
        }
    }

    fn stream_adopt_external(&self, raw: u64) -> Result<u64> {
        hit("stream_adopt_external")?;
        let live = lock(live_streams());
        if !live.contains(&raw) {
            return Err(Error::invalid_argument(format!(
                "0x{raw:x} is not a live host stream"
            )));
        }
        let worker = stream_ref(raw).worker.clone();
        worker
            .users
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        drop(live);
        let adopted = Box::into_raw(Box::new(HostStream {
            worker,
            joined: Mutex::new(Vec::new()),
            origin: Mutex::new(None),
        })) as u64;
        lock(live_streams()).insert(adopted);
        faults::made(Kind::Stream, adopted, 0);
        Ok(adopted)
    }

    fn stream_release_external(&self, raw: u64) {
        // An adopted host stream shares its worker; releasing it is a destroy.
        self.stream_destroy(raw)
    }

    fn stream_query(&self, stream: u64) -> Result<bool> {
        hit("stream_query")?;
        let st = lock(&stream_ref(stream).worker.state);
        Ok(st.completed == st.submitted)
    }

    fn stream_synchronize(&self, stream: u64) -> Result<()> {
        hit("stream_synchronize")?;
        let w = &stream_ref(stream).worker;
        let target = {
            let mut st = lock(&w.state);
            if st.capture.is_some() {
                st.capture_invalidated = true;
                return Err(Error::new(
                    ErrorCode::CaptureUnsupported,
                    "stream synchronize on a capturing stream (the capture is invalidated)",
                ));
            }
            st.submitted
        };
        w.wait_until(target);
        Ok(())
    }

    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        hit("stream_wait_event")?;
        let (src, seq, captured) = match lock(&event_ref(event).rec).as_ref() {
            None => return Ok(()),
            Some(r) => (r.worker.clone(), r.seq, r.captured),
        };
        let me = stream_ref(stream);
        let mut st = lock(&me.worker.state);
        if let Some(steps) = st.capture.as_mut() {
            match captured {
                // Joining a capture: the other stream's steps are ordered after.
                Some((origin, idx)) if origin != stream => {
                    steps.push(CapturedStep::Join(origin, idx))
                }
                Some(_) => {}
                // An event recorded outside the capture orders nothing inside it.
                None => {}
            }
            return Ok(());
        }
        drop(st);
        if let Some((from, _)) = captured {
            // A non-capturing stream waits on an event recorded in a capture: it
            // joins that capture (fork), as with CUDA. The recording stream may be
            // gone (its handle destroyed): then there is nothing to join. The lock
            // keeps it from going while we look.
            let live = lock(live_streams());
            if !live.contains(&from) || !Arc::ptr_eq(&stream_ref(from).worker, &src) {
                return Ok(());
            }
            let from_st = stream_ref(from);
            let origin = *lock(&from_st.origin);
            let origin = origin.filter(|o| live.contains(o));
            if let Some(origin) = origin.filter(|_| lock(&from_st.worker.state).capture.is_some()) {
                let mut me_st = lock(&me.worker.state);
                me_st.capture = Some(vec![CapturedStep::Join(from, seq as usize)]);
                drop(me_st);
                *lock(&me.origin) = Some(origin);
                lock(&stream_ref(origin).joined).push(stream);
            }
            return Ok(());
        }
        if Arc::ptr_eq(&src, &me.worker) {
            return Ok(());
        }
        me.worker.submit(Arc::new(move || src.wait_until(seq)));
        Ok(())
    }

    fn launch_host_fn(&self, stream: u64, f: HostFn) -> Result<()> {
        hit("launch_host_fn")?;
        self.enqueue(stream, Arc::from(f));
        Ok(())
    }
}

impl EventApi for HostDevice {
    fn event_create(&self, timing: bool) -> Result<u64> {
        hit("event_create")?;
        let raw = Box::into_raw(Box::new(HostEvent {
            timing,
            rec: Mutex::new(None),
        })) as u64;
        faults::made(Kind::Event, raw, 0);
        Ok(raw)
    }

    fn event_destroy(&self, event: u64) {
        faults::gone(event);
        // SAFETY: `event` came from Box::into_raw in event_create and is destroyed once.
        drop(unsafe { Box::from_raw(event as *mut HostEvent) });
    }

    fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        hit("event_record")?;
        let ev = event_ref(event);
        let stamp = Arc::new(Mutex::new(None));
        let job: Job = if ev.timing {
            let s2 = stamp.clone();
            Arc::new(move || *lock(&s2) = Some(Instant::now()))
        } else {
            Arc::new(|| {})
        };
        let w = stream_ref(stream).worker.clone();
        // Inside a capture the record is a point others may join on, not a job.
        let captured_at = lock(&w.state).capture.as_mut().map(|steps| {
            steps.push(CapturedStep::Mark);
            steps.len() - 1
        });
        let seq = match captured_at {
            Some(pos) => pos as u64,
            None => w.submit(job),
        };
        let rec = Recording {
            worker: w,
            seq,
            stamp,
            captured: captured_at.map(|pos| (stream, pos)),
        };
        *lock(&ev.rec) = Some(rec);
        Ok(())
    }

    fn event_query(&self, event: u64) -> Result<bool> {
        hit("event_query")?;
        Ok(match lock(&event_ref(event).rec).as_ref() {
            None => true,
            Some(r) => r.captured.is_none() && r.worker.completed() >= r.seq,
        })
    }

    fn event_synchronize(&self, event: u64) -> Result<()> {
        hit("event_synchronize")?;
        let rec = lock(&event_ref(event).rec)
            .as_ref()
            .map(|r| (r.worker.clone(), r.seq, r.captured));
        if let Some((w, seq, None)) = rec {
            w.wait_until(seq);
        }
        Ok(())
    }

    fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        let stamp_of = |e: u64| -> Result<Instant> {
            let ev = event_ref(e);
            if !ev.timing {
                return Err(Error::invalid_argument(
                    "elapsed time needs events recorded with SLUICE_EVENT_TIMING",
                ));
            }
            let rec = lock(&ev.rec);
            let r = rec
                .as_ref()
                .ok_or_else(|| Error::new(ErrorCode::InvalidState, "event was never recorded"))?;
            let t = *lock(&r.stamp);
            t.ok_or_else(|| Error::new(ErrorCode::InvalidState, "event has not completed yet"))
        };
        let (a, b) = (stamp_of(start)?, stamp_of(end)?);
        let ms = if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        };
        Ok(ms as f32)
    }
}

impl MemoryApi for HostDevice {
    fn mem_alloc_async(&self, size: usize, _stream: u64) -> Result<u64> {
        hit("mem_alloc_async")?;
        let p = aligned_alloc(size, 256)? as u64;
        faults::made(Kind::DeviceBytes, p, size);
        Ok(p)
    }

    fn mem_free_async(&self, ptr: u64, stream: u64) -> Result<()> {
        hit("mem_free_async")?;
        // SAFETY: ptr came from posix_memalign and the core frees it once.
        self.enqueue(stream, free_once(ptr));
        Ok(())
    }

    fn pinned_alloc(&self, size: usize) -> Result<*mut u8> {
        hit("pinned_alloc")?;
        let p = aligned_alloc(size, 4096)?;
        faults::made(Kind::PinnedBytes, p as u64, size);
        lock(pinned_ranges()).insert(p as u64, size);
        Ok(p)
    }

    fn pinned_free(&self, ptr: *mut u8) {
        faults::gone(ptr as u64);
        lock(pinned_ranges()).remove(&(ptr as u64));
        // SAFETY: ptr came from posix_memalign in pinned_alloc and is freed once.
        unsafe { libc::free(ptr as *mut c_void) }
    }

    fn host_register(&self, ptr: *mut u8, len: usize) -> Result<()> {
        hit("host_register")?;
        lock(pinned_ranges()).insert(ptr as u64, len);
        Ok(())
    }

    fn host_unregister(&self, ptr: *mut u8) {
        lock(pinned_ranges()).remove(&(ptr as u64));
    }

    fn host_ptr_is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        let (p, Some(end)) = (ptr as u64, (ptr as u64).checked_add(len as u64)) else {
            return false;
        };
        if ptr.is_null() || len == 0 {
            return false;
        }
        lock(pinned_ranges())
            .range(..=p)
            .next_back()
            .is_some_and(|(&start, &size)| end <= start + size as u64)
    }

    fn check_foreign_range(&self, _ptr: u64, _len: usize) -> Result<()> {
        // Host "device" memory is host memory: any address the caller vouches for.
        Ok(())
    }

    fn memcpy_async(&self, dst: u64, src: u64, len: usize, stream: u64) -> Result<()> {
        hit("memcpy_async")?;
        self.enqueue(
            stream,
            Arc::new(move || {
                // SAFETY: the core range-checked both ranges and keeps them alive
                // until this job has run; ranges of distinct buffers do not overlap.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
            }),
        );
        Ok(())
    }

    fn memcpy_from_pageable(&self, dst: u64, src: &[u8], stream: u64) -> Result<()> {
        hit("memcpy_from_pageable")?;
        let staged: Arc<[u8]> = Arc::from(src);
        self.enqueue(
            stream,
            Arc::new(move || {
                // SAFETY: dst was range-checked by the core and is alive until this runs.
                unsafe {
                    std::ptr::copy_nonoverlapping(staged.as_ptr(), dst as *mut u8, staged.len())
                }
            }),
        );
        Ok(())
    }

    fn memset_async(&self, dst: u64, value: u8, len: usize, stream: u64) -> Result<()> {
        hit("memset_async")?;
        self.enqueue(
            stream,
            Arc::new(move || {
                // SAFETY: dst was range-checked by the core and is alive until this runs.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) }
            }),
        );
        Ok(())
    }
}

fn compile_unsupported() -> Error {
    Error::new(
        ErrorCode::Unsupported,
        "compiling CUDA C (module_compile) is not supported on the host backend: \
         it runs no kernels; use the cuda backend",
    )
}

impl ModuleApi for HostDevice {
    fn module_load(&self, _image: &[u8]) -> Result<u64> {
        Err(Error::unsupported(
            "module_load (loading a CUDA module)",
            "host",
        ))
    }

    fn module_unload(&self, _module: u64) {}

    fn module_function(&self, _module: u64, _name: &CStr) -> Result<u64> {
        Err(Error::unsupported("module_function", "host"))
    }

    fn function_param_count(&self, _func: u64) -> Result<Option<usize>> {
        Ok(None)
    }

    fn function_shared_limits(&self, _func: u64) -> Result<(u32, u32)> {
        Err(Error::unsupported("function_shared_limits", "host"))
    }

    fn function_set_max_dynamic_shared(&self, _func: u64, _bytes: u32) -> Result<()> {
        Err(Error::unsupported(
            "function_set_max_dynamic_shared",
            "host",
        ))
    }

    fn function_set_non_portable_cluster(&self, _func: u64, _allowed: bool) -> Result<()> {
        Err(Error::unsupported(
            "function_set_non_portable_cluster",
            "host",
        ))
    }

    fn compile_plan(&self, _options: &[String]) -> Result<CompilePlan> {
        Err(compile_unsupported())
    }

    fn compile(
        &self,
        _source: &CStr,
        _name: &CStr,
        _headers: &[BuiltinHeader],
        _plan: &CompilePlan,
    ) -> Result<Vec<u8>> {
        Err(compile_unsupported())
    }

    unsafe fn launch_kernel(
        &self,
        _func: u64,
        _dims: LaunchDims,
        _programmatic: bool,
        _args: *mut *mut c_void,
        _stream: u64,
    ) -> Result<()> {
        Err(Error::unsupported("launch (a CUDA kernel launch)", "host"))
    }
}

impl GraphApi for HostDevice {
    fn capture_begin(&self, stream: u64, _mode: CaptureMode) -> Result<()> {
        hit("capture_begin")?;
        let s = stream_ref(stream);
        let mut st = lock(&s.worker.state);
        if st.capture.is_some() {
            return Err(Error::new(
                ErrorCode::InvalidState,
                "stream is already capturing",
            ));
        }
        st.capture = Some(Vec::new());
        st.capture_invalidated = false;
        lock(&s.joined).clear();
        *lock(&s.origin) = Some(stream);
        Ok(())
    }

    fn capture_end(&self, stream: u64) -> Result<u64> {
        let s = stream_ref(stream);
        let (steps, invalidated) = {
            let mut st = lock(&s.worker.state);
            let steps = st
                .capture
                .take()
                .ok_or_else(|| Error::new(ErrorCode::InvalidState, "stream is not capturing"))?;
            (steps, std::mem::take(&mut st.capture_invalidated))
        };
        let joined = std::mem::take(&mut *lock(&s.joined));
        *lock(&s.origin) = None;
        let mut streams = vec![(stream, steps)];
        for j in joined {
            let js = stream_ref(j);
            let jsteps = lock(&js.worker.state).capture.take().unwrap_or_default();
            *lock(&js.origin) = None;
            streams.push((j, jsteps));
        }
        // An injected failure still ends the capture, as the driver's does.
        hit("capture_end")?;
        if invalidated {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                "the capture was invalidated: its stream was synchronized while capturing",
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
            if !joined_back && jsteps.iter().any(|s| matches!(s, CapturedStep::Run(_))) {
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
        let exec = HostGraph {
            streams: g.streams.clone(),
        };
        let raw = Box::into_raw(Box::new(Mutex::new(exec))) as u64;
        faults::made(Kind::GraphExec, raw, 0);
        Ok(raw)
    }

    fn graph_exec_destroy(&self, exec: u64) {
        faults::gone(exec);
        // SAFETY: exec came from Box::into_raw in graph_instantiate, destroyed once.
        drop(unsafe { Box::from_raw(exec as *mut Mutex<HostGraph>) });
    }

    fn graph_upload(&self, _exec: u64, _stream: u64) -> Result<()> {
        hit("graph_upload")
    }

    fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        hit("graph_launch")?;
        // SAFETY: exec is a live Box<Mutex<HostGraph>> made by graph_instantiate.
        let g = unsafe { &*(exec as *const Mutex<HostGraph>) };
        let plan = flatten(&lock(g))?;
        self.enqueue(
            stream,
            Arc::new(move || {
                for job in plan.iter() {
                    job()
                }
            }),
        );
        Ok(())
    }

    fn graph_exec_update(&self, exec: u64, graph: u64) -> Result<std::result::Result<(), String>> {
        hit("graph_exec_update")?;
        // SAFETY: exec is a live Box<Mutex<HostGraph>> made by graph_instantiate.
        let e = unsafe { &*(exec as *const Mutex<HostGraph>) };
        let g = graph_ref(graph);
        let mut cur = lock(e);
        let shape = |h: &HostGraph| -> Vec<usize> { h.streams.iter().map(|s| s.1.len()).collect() };
        if shape(&cur) != shape(g) {
            return Ok(Err("topology changed (node count differs)".into()));
        }
        cur.streams = g.streams.clone();
        Ok(Ok(()))
    }

    fn graph_node_count(&self, graph: u64) -> Result<usize> {
        Ok(graph_ref(graph)
            .streams
            .iter()
            .map(|s| {
                s.1.iter()
                    .filter(|st| matches!(st, CapturedStep::Run(_)))
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
                    CapturedStep::Run(_) => "host op".to_string(),
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

fn free_once(ptr: u64) -> Job {
    let cell = Mutex::new(Some(ptr));
    Arc::new(move || {
        if let Some(p) = lock(&cell).take() {
            faults::gone(p);
            // SAFETY: p came from posix_memalign; the Option makes this run once.
            unsafe { libc::free(p as *mut c_void) }
        }
    })
}

/// Orders the steps of a captured multi-stream graph into one sequence that respects
/// each stream's order and every join.
fn flatten(g: &HostGraph) -> Result<Arc<Vec<Job>>> {
    let n = g.streams.len();
    let mut pos = vec![0usize; n];
    let mut out = Vec::new();
    loop {
        let mut progressed = false;
        let mut all_done = true;
        for si in 0..n {
            let steps = &g.streams[si].1;
            while pos[si] < steps.len() {
                match &steps[pos[si]] {
                    CapturedStep::Run(job) => out.push(job.clone()),
                    CapturedStep::Mark => {}
                    CapturedStep::Join(origin, idx) => {
                        let oi = g.streams.iter().position(|s| s.0 == *origin);
                        match oi {
                            Some(oi) if pos[oi] <= *idx => break,
                            _ => {}
                        }
                    }
                }
                pos[si] += 1;
                progressed = true;
            }
            if pos[si] < steps.len() {
                all_done = false;
            }
        }
        if all_done {
            return Ok(Arc::new(out));
        }
        if !progressed {
            return Err(Error::new(
                ErrorCode::CaptureFailed,
                "captured graph has a dependency cycle",
            ));
        }
    }
}

//! Tracing: a Chrome trace-event JSON file that Perfetto and chrome://tracing open.
//!
//! On with `SLUICE_TRACE=path.json` (read at the first traced call, never at load)
//! or [`start`]. It holds one track per stream, named with its label; a span per
//! op's enqueue (under the stream's push lock, so a track's spans never overlap);
//! a flow arrow from the op that made each recording the engine waited on to the
//! op that waited; graph capture, instantiate, update and launch; allocations and
//! frees; prefetcher batches; log messages; and, with `SLUICE_TRACE_DEVICE=1`,
//! device spans of every Nth op (`SLUICE_TRACE_SAMPLE=N`).
//!
//! Off, an op pays one relaxed load of `HOT.trace_state` (`crate::hot`) and a
//! branch: everything else is out of line (`#[cold]`). The same switch turns on
//! the counters that cost work on the op path (`crate::counters`).
//!
//! Locks: a push lock, then the sink's or the device samples'; the sink's, then
//! the device samples' or the file's. Logging only tries the sink's.

mod buf;
mod clock;
mod device;
mod names;
mod sink;

use crate::counters::{CopyDir, StreamCounts};
use crate::engine::Waits;
use crate::error::{Error, ErrorCode, Result};
use crate::event::{PoolInner, Recording};
use crate::hot::HOT;
use crate::log::LogLevel;
use crate::memory::BufferKind;
use crate::stream::Stream;
use buf::{OpRec, Rec, GENERATION};
pub use names::KernelName;
use names::SpanName;
use sink::{Json, Sink, PID_DEVICE, PID_THREADS};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

const TRACE: u8 = 1;
const COUNT: u8 = 2;
pub(crate) const UNSET: u8 = 0x80;

// The switch every op reads is `HOT.trace_state` (`crate::hot`): `TRACE | COUNT`,
// or `UNSET` until the environment was read.
static COUNTING: AtomicBool = AtomicBool::new(false);
static SINK: Mutex<Option<Sink>> = Mutex::new(None);
/// Serialises starts and stops (a stop resolves device spans after releasing SINK).
static CONTROL: Mutex<()> = Mutex::new(());

/// Options of a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceOptions {
    /// Device spans for every Nth op (0: none).
    pub device_every: u32,
}

impl TraceOptions {
    /// From `SLUICE_TRACE_DEVICE=1` and `SLUICE_TRACE_SAMPLE=N` (default 1).
    pub fn from_env() -> TraceOptions {
        let on = env_flag("SLUICE_TRACE_DEVICE");
        let every = std::env::var("SLUICE_TRACE_SAMPLE")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        TraceOptions {
            device_every: if on { every } else { 0 },
        }
    }
}

fn env_flag(name: &str) -> bool {
    matches!(
        std::env::var(name).as_deref(),
        Ok("1") | Ok("on") | Ok("true") | Ok("yes")
    )
}

/// Nanoseconds since the trace clock's origin, plus 2 (so a span start is never
/// 0 or 1, see [`Obs`]).
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    clock::since_start_ns() + 2
}

/// What one op saw of the switch: 0 off, 1 counting only, else tracing and the
/// op's start time in ns.
#[derive(Clone, Copy)]
pub(crate) struct Obs(u64);

impl Obs {
    /// Neither counting nor tracing.
    pub(crate) const OFF: Obs = Obs(0);

    /// Counting or tracing.
    #[inline(always)]
    pub(crate) fn on(self) -> bool {
        self.0 != 0
    }

    #[inline(always)]
    pub(crate) fn tracing(self) -> bool {
        self.0 > 1
    }
}

/// The op path's check: one relaxed load and a branch when off.
#[inline(always)]
pub(crate) fn observe() -> Obs {
    if HOT.trace_state.load(Ordering::Relaxed) != 0 {
        observe_slow()
    } else {
        Obs(0)
    }
}

#[cold]
#[inline(never)]
fn observe_slow() -> Obs {
    let s = state();
    if s & TRACE != 0 {
        Obs(now_ns())
    } else if s & COUNT != 0 {
        Obs(1)
    } else {
        Obs(0)
    }
}

/// The switch, reading the environment on first use.
fn state() -> u8 {
    if HOT.trace_state.load(Ordering::Relaxed) & UNSET != 0 {
        init();
    }
    HOT.trace_state.load(Ordering::Relaxed)
}

fn control() -> MutexGuard<'static, ()> {
    CONTROL.lock().unwrap_or_else(|p| p.into_inner())
}

fn sink() -> MutexGuard<'static, Option<Sink>> {
    SINK.lock().unwrap_or_else(|p| p.into_inner())
}

fn publish_state(sink: &Option<Sink>) {
    let s = if sink.is_some() { TRACE } else { 0 }
        | if COUNTING.load(Ordering::Relaxed) {
            COUNT
        } else {
            0
        };
    HOT.trace_state.store(s, Ordering::Relaxed);
}

/// Reads `SLUICE_COUNTERS` and `SLUICE_TRACE` once.
fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        COUNTING.store(env_flag("SLUICE_COUNTERS"), Ordering::Relaxed);
        let _c = control();
        let mut g = sink();
        let mut failed = None;
        if let Some(path) = std::env::var_os("SLUICE_TRACE").filter(|p| !p.is_empty()) {
            match open(PathBuf::from(path), TraceOptions::from_env()) {
                Ok(s) => *g = Some(s),
                Err(e) => failed = Some(e),
            }
        }
        publish_state(&g);
        drop(g);
        if let Some(e) = failed {
            // The environment asked for a trace: say why there is none.
            eprintln!("sluice: SLUICE_TRACE: {e}");
        }
    });
}

/// Opens a trace file and starts what goes with it (device sampling, the flush
/// thread, the exit hook).
fn open(path: PathBuf, opts: TraceOptions) -> Result<Sink> {
    // What an earlier trace left in the threads' buffers, forgotten before the
    // generation moves on: a label that a thread writes for the new generation
    // (its cache reset by the bump) is then never cleared away.
    buf::clear_all();
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    clock::init();
    let s = Sink::create(path.clone(), generation, now_ns()).map_err(|e| {
        Error::invalid_argument(format!("cannot write trace {}: {e}", path.display()))
    })?;
    device::enable(opts.device_every);
    register_exit_hook();
    let flusher = std::thread::Builder::new()
        .name("sluice-trace".into())
        .spawn(move || flush_loop(generation))
        .ok();
    *flusher_slot() = flusher.as_ref().map(|h| h.thread().clone());
    *lock_join() = flusher;
    crate::log::info(|| format!("trace started: {}", path.display()));
    Ok(s)
}

/// The flush thread of the current trace, for ops whose buffer filled to wake.
static FLUSHER: Mutex<Option<std::thread::Thread>> = Mutex::new(None);
/// Its handle, joined by `stop`.
static FLUSHER_JOIN: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

fn lock_join() -> MutexGuard<'static, Option<std::thread::JoinHandle<()>>> {
    FLUSHER_JOIN.lock().unwrap_or_else(|p| p.into_inner())
}

fn flusher_slot() -> MutexGuard<'static, Option<std::thread::Thread>> {
    FLUSHER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wakes the flush thread (a thread's record buffer filled up).
pub(crate) fn wake_flusher() {
    if let Some(t) = flusher_slot().as_ref() {
        t.unpark();
    }
}

/// Formats every thread's buffered records now (a buffer overflowed and the flush
/// thread is behind). Called by an op, under its push lock, with no other lock.
pub(crate) fn drain_now() {
    let cut = now_ns();
    with_sink(|s| s.drain(cut));
}

/// Formats the threads' records and writes them, the resolved device spans and the
/// buffer to the file every 100 ms (or when a thread's buffer fills), so that a
/// crash loses little and ops neither format nor write; ends when its trace stops.
fn flush_loop(generation: u64) {
    loop {
        std::thread::park_timeout(Duration::from_millis(100));
        let cut = now_ns();
        let mut g = sink();
        let s = match g.as_mut() {
            Some(s) if s.generation == generation => s,
            _ => return,
        };
        s.drain(cut);
        // Under the sink's lock, so that a stop cannot come between the two.
        device_spans(s, device::poll());
        let out = s.out.clone();
        // The file's lock before the sink's is released: writes keep their order.
        let mut o = sink::lock_out(&out);
        let data = s.detach();
        drop(g);
        o.write(&data);
        let err = o.error.take();
        drop(o);
        if let Some(s) = sink().as_mut().filter(|s| s.generation == generation) {
            s.reattach(data);
        }
        log_write_error(err);
    }
}

fn log_write_error(err: Option<std::io::Error>) {
    if let Some(e) = err {
        crate::log::error(|| format!("trace: write failed: {e}"));
    }
}

fn register_exit_hook() {
    static HOOK: Once = Once::new();
    extern "C" fn at_exit() {
        let _ = std::panic::catch_unwind(|| stop_inner(true));
    }
    HOOK.call_once(|| {
        // SAFETY: registers a function with no preconditions; it catches panics.
        unsafe { libc::atexit(at_exit) };
    });
}

/// Starts writing a trace to `path`. Fails when a trace is already being written.
pub fn start(path: &Path, opts: TraceOptions) -> Result<()> {
    init();
    let _c = control();
    let mut g = sink();
    if let Some(s) = g.as_ref() {
        return Err(Error::new(
            ErrorCode::InvalidState,
            format!("a trace is already being written to {}", s.path.display()),
        ));
    }
    *g = Some(open(path.to_path_buf(), opts)?);
    publish_state(&g);
    Ok(())
}

/// Stops the trace: resolves the device spans still pending (waiting for them),
/// closes the JSON array and the file. Does nothing when no trace is written.
pub fn stop() -> Result<()> {
    init();
    stop_inner(false)
}

fn stop_inner(at_exit: bool) -> Result<()> {
    let _c = control();
    let taken = {
        let mut g = sink();
        let s = g.take();
        publish_state(&g);
        s
    };
    let Some(mut s) = taken else { return Ok(()) };
    s.drain(u64::MAX);
    device_spans(&mut s, device::finish(at_exit));
    let path = s.path.clone();
    let r = s.finish();
    if !at_exit {
        // The flush thread sees the trace gone at its next wake-up and ends.
        if let Some(h) = lock_join().take() {
            h.thread().unpark();
            let _ = h.join();
        }
        crate::log::info(|| format!("trace stopped: {}", path.display()));
    }
    r.map_err(|e| Error::invalid_argument(format!("writing trace {}: {e}", path.display())))
}

/// Writes what the trace has buffered (and the device spans resolved so far) to
/// its file. Does nothing when no trace is written.
pub fn flush() -> Result<()> {
    init();
    let cut = now_ns();
    let mut g = sink();
    let Some(s) = g.as_mut() else { return Ok(()) };
    s.drain(cut);
    device_spans(s, device::poll());
    let err = s.flush();
    drop(g);
    match err {
        Some(e) => Err(Error::invalid_argument(format!("writing trace: {e}"))),
        None => Ok(()),
    }
}

/// True while a trace is written.
pub fn is_tracing() -> bool {
    state() & TRACE != 0
}

pub(crate) fn set_counting(on: bool) {
    init();
    COUNTING.store(on, Ordering::Relaxed);
    publish_state(&sink());
}

pub(crate) fn counting() -> bool {
    state() & (TRACE | COUNT) != 0
}

/// Runs `f` on the sink while a trace is written.
fn with_sink(f: impl FnOnce(&mut Sink)) {
    let mut g = sink();
    if let Some(s) = g.as_mut() {
        f(s);
    }
}

/// What an op is, for its span and its counters.
#[derive(Clone, Copy)]
pub enum OpKind<'a> {
    Copy(CopyDir, u64),
    Memset(u64),
    /// A kernel launch.
    Launch(&'a crate::module::Function),
    HostFn,
    /// A graph launch, by executable graph id.
    GraphLaunch(u64),
    /// The begin of a foreign op (or of a device free, ordered like one), by name.
    ForeignBegin(SpanName),
    ForeignEnd,
    Record,
    WaitEvent,
}

/// The recordings an op waited on.
pub(crate) enum Waited<'a> {
    None,
    /// The engine's waits.
    Set(&'a Waits),
    /// An explicit event wait.
    One(&'a Recording),
}

/// Counts and traces one op; called under the stream's push lock when `obs.on()`.
#[cold]
#[inline(never)]
pub(crate) fn op_done(
    _inner: &mut PoolInner,
    stream: &Stream,
    obs: Obs,
    kind: OpKind<'_>,
    waited: Waited<'_>,
    rec: Option<&Recording>,
) {
    // The push lock (`_inner`) serialises these updates.
    let c = &stream.pool.counts;
    if let Waited::Set(w) = waited {
        StreamCounts::add(&c.dedup, w.deduplicated());
        StreamCounts::add(&c.same_stream, w.same_stream());
    }
    if let OpKind::Copy(dir, n) = kind {
        if !stream.is_capturing() {
            StreamCounts::add(&c.bytes[dir as usize], n);
        }
    }
    if !obs.tracing() {
        return;
    }
    let t0 = obs.0;
    let t1 = now_ns().max(t0 + 2);
    let mut span = OpRec::new(&kind, stream.id, t0, t1);
    span.seq = rec.map_or(0, |r| r.seq);
    span.captured = stream.is_capturing();
    let set = match waited {
        Waited::Set(w) => Some(w.recordings()),
        _ => None,
    };
    let mut more = set.into_iter().flatten().map(|r| (r.stream_id(), r.seq));
    span.waited = match waited {
        Waited::One(r) => (r.stream_id(), r.seq),
        _ => more.next().unwrap_or((0, 0)),
    };
    let read = || stream.label();
    let label = buf::LabelSrc {
        version: stream.label_version(),
        read: &read,
    };
    buf::op(span, label, more);
}

/// Records the start event of a device sample when this op is sampled (after its
/// waits, before its work); 0 otherwise. Called only while tracing.
#[inline(always)]
pub(crate) fn device_begin(stream: &Stream) -> u64 {
    if device::sampling() {
        device_begin_sampling(stream)
    } else {
        0
    }
}

#[cold]
#[inline(never)]
fn device_begin_sampling(stream: &Stream) -> u64 {
    device::begin(stream)
}

/// Records the end event of a device sample right after its op's work (`ok`), or
/// gives the start event back when the work failed. `seq`: the op's recording.
#[cold]
#[inline(never)]
pub(crate) fn device_end(stream: &Stream, dev: u64, kind: OpKind<'_>, ok: bool, seq: Option<u64>) {
    if ok {
        device::end(stream, dev, names::span_name(&kind), seq);
    } else {
        device::abandon(stream, dev);
    }
}

fn device_spans(s: &mut Sink, spans: Vec<device::DeviceSpan>) {
    for d in spans {
        s.track(PID_DEVICE, d.stream, &d.track, d.stream);
        s.event("X", d.name, "device", PID_DEVICE, d.stream, d.ts, |j| {
            j.ts("dur", d.dur.max(1));
            j.args(|a| {
                if let Some(q) = d.seq {
                    a.u64("seq", q)
                }
            });
        });
    }
}

/// The start (`begin`) or end of a capture on its origin stream; called under the
/// stream's push lock.
pub(crate) fn capture_mark(stream: &Stream, begin: bool, capture: u64, ok: bool) {
    if state() & TRACE == 0 {
        return;
    }
    let t = now_ns();
    buf::other(Rec::Label {
        t0: t,
        stream: stream.id,
        label: stream.label(),
    });
    buf::other(Rec::Capture {
        t,
        stream: stream.id,
        begin,
        capture,
        ok,
    });
}

/// The calling OS thread's id.
fn thread_id() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn thread_track(s: &mut Sink) -> u64 {
    let tid = thread_id();
    let name = match std::thread::current().name() {
        Some(n) => format!("{n} (thread {tid})"),
        None => format!("thread {tid}"),
    };
    s.track(PID_THREADS, tid, &name, tid);
    tid
}

/// Start time of a span on the calling thread's track (0 when not tracing).
pub(crate) fn span_start() -> u64 {
    if state() & TRACE != 0 {
        now_ns()
    } else {
        0
    }
}

/// A span on the calling thread's track from `t0` (from [`span_start`]) to now.
pub(crate) fn thread_span(name: &str, cat: &str, t0: u64, args: impl FnOnce(&mut Json<'_>)) {
    if t0 == 0 {
        return;
    }
    let t1 = now_ns().max(t0 + 1);
    with_sink(|s| {
        let tid = thread_track(s);
        s.event("X", name, cat, PID_THREADS, tid, t0, |j| {
            j.ts("dur", t1 - t0);
            j.args(args);
        });
    });
}

/// An instant on the calling thread's track.
pub(crate) fn thread_instant(name: &str, cat: &str, args: impl FnOnce(&mut Json<'_>)) {
    if state() & TRACE == 0 {
        return;
    }
    let t = now_ns();
    with_sink(|s| {
        let tid = thread_track(s);
        s.event("i", name, cat, PID_THREADS, tid, t, |j| {
            j.str("s", "t");
            j.args(args);
        });
    });
}

/// A log message, as an instant on the calling thread's track. Reads the switch
/// without initialising it: logging may happen while the trace starts.
pub(crate) fn log_event(level: LogLevel, msg: &str) {
    let st = HOT.trace_state.load(Ordering::Relaxed);
    if st & UNSET != 0 || st & TRACE == 0 {
        return;
    }
    let t = now_ns();
    let Ok(mut g) = SINK.try_lock() else { return };
    if let Some(s) = g.as_mut() {
        let tid = thread_track(s);
        s.event("i", "log", "log", PID_THREADS, tid, t, |j| {
            j.str("s", "t");
            j.args(|a| {
                a.str("level", level.name());
                a.str("message", msg);
            });
        });
    }
}

/// An allocation or a free; `cached`: served by (or kept in) a cache, when known.
pub(crate) fn memory(
    what: &str,
    kind: BufferKind,
    bytes: usize,
    stream: Option<u64>,
    cached: Option<bool>,
) {
    thread_instant(what, "memory", |a| {
        a.str(
            "kind",
            match kind {
                BufferKind::Device => "device",
                BufferKind::Pinned => "pinned",
                BufferKind::Registered => "registered",
                BufferKind::Foreign => "foreign",
            },
        );
        a.u64("bytes", bytes as u64);
        if let Some(s) = stream {
            a.u64("stream", s);
        }
        if let Some(c) = cached {
            a.u64("cache", c as u64);
        }
    });
}

/// An RNG save or restore of `n` states was enqueued on `stream`.
pub(crate) fn rng_event(what: &str, stream: &Stream, n: usize) {
    thread_instant(what, "rng", |a| {
        a.u64("stream", stream.id);
        a.u64("states", n as u64);
    });
}

/// Forgets a destroyed stream's recordings.
pub(crate) fn stream_gone(id: u64) {
    let st = HOT.trace_state.load(Ordering::Relaxed);
    if st & TRACE != 0 && st & UNSET == 0 {
        buf::other(Rec::Gone {
            t: now_ns(),
            stream: id,
        });
    }
}

/// A prefetcher's producer (`consumer` false) or consumer blocked once on its
/// condition variable.
pub(crate) fn prefetch_blocked(device: &crate::Device, consumer: bool) {
    let c = &device.counters;
    crate::counters::DeviceCounters::bump(
        if consumer {
            &c.prefetch_consumer_waits
        } else {
            &c.prefetch_producer_waits
        },
        1,
    );
}

/// A prefetcher's acquire (`consumer` false) or next returns after starting at `t0`.
pub(crate) fn prefetch_waited(device: &crate::Device, consumer: bool, t0: Instant) {
    let ns = t0.elapsed().as_nanos() as u64;
    let c = &device.counters;
    crate::counters::DeviceCounters::bump(
        if consumer {
            &c.prefetch_consumer_wait_ns
        } else {
            &c.prefetch_producer_wait_ns
        },
        ns,
    );
    if state() & TRACE != 0 {
        let start = now_ns().saturating_sub(ns).max(2);
        let name = if consumer {
            "prefetch next"
        } else {
            "prefetch acquire"
        };
        thread_span(name, "prefetch", start, |_| {});
    }
}

/// A prefetcher batch changes state: `submit` (its copies are enqueued), `next`
/// (leased), `release`, or `next_into` (copied out and released). A batch is an
/// async slice from submit to release.
pub(crate) fn prefetch_slot(copy_stream: &Stream, what: &str, seq: u64, slot: u32) {
    if state() & TRACE == 0 {
        return;
    }
    let id = (copy_stream.id << 32) | (seq & 0xffff_ffff);
    let ph = match what {
        "submit" => "b",
        "release" | "next_into" => "e",
        _ => "n",
    };
    thread_instant(&format!("prefetch {what}"), "prefetch", |a| {
        a.u64("batch", seq);
        a.u64("slot", slot as u64);
    });
    let t = now_ns();
    with_sink(|s| {
        s.event(ph, "batch", "prefetch", PID_THREADS, 0, t, |j| {
            j.u64("id", id);
            j.args(|a| {
                a.str("step", what);
                a.u64("batch", seq);
                a.u64("slot", slot as u64);
            });
        });
    });
}

//! Per-thread record buffers: what a traced op writes on its path.
//!
//! A traced op appends fixed-size binary records (timestamps, stream id, a static
//! name, byte counts, the recordings it waited on) to its thread's buffer: a `Vec`
//! behind a lock of its own, which only that thread and the drainer take, so ops on
//! different threads share no lock and no cache line. Each thread registers its
//! buffer once, in a global list. Nothing is formatted on the op path: a drain (the
//! trace's flush thread every 100 ms or when a buffer passes [`WAKE_AT`] records,
//! `flush`, `stop`, or the op itself past [`DRAIN_AT`]) swaps every buffer out,
//! sorts the records by time and formats them as JSON (`Sink::records`).
//!
//! Order: a thread's records are in time order per stream track (ops on one stream
//! are serialised by its push lock, and an op's record is written before the next
//! op on that stream starts). A drain takes a cutoff time before it reads any buffer
//! and formats only the records that started before it, keeping the rest for the
//! next drain: every record of a stream that started before the cutoff was written
//! before any later op of that stream started, so a drain never emits a span after
//! a later one of the same track, and the op that made a recording an op waited on
//! is always formatted first (flow arrows resolve at drain time).

use super::OpKind;
use crate::counters::CopyDir;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Records in one thread's buffer at which it wakes the flush thread.
pub(crate) const WAKE_AT: usize = 1 << 15;
/// Records in one thread's buffer at which the op drains all buffers itself.
pub(crate) const DRAIN_AT: usize = 1 << 20;

/// The category of an op span.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Cat {
    Copy,
    Launch,
    Host,
    Graph,
    Foreign,
    Event,
}

impl Cat {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cat::Copy => "copy",
            Cat::Launch => "launch",
            Cat::Host => "host",
            Cat::Graph => "graph",
            Cat::Foreign => "foreign",
            Cat::Event => "event",
        }
    }
}

/// What an op span's `arg` is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum ArgKind {
    None,
    Bytes,
    GraphExec,
}

/// One op's enqueue span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpRec {
    pub(crate) t0: u64,
    pub(crate) t1: u64,
    pub(crate) stream: u64,
    /// The op's recording (0: none; sequence numbers start at 1).
    pub(crate) seq: u64,
    pub(crate) arg: u64,
    pub(crate) name: &'static str,
    pub(crate) cat: Cat,
    pub(crate) arg_kind: ArgKind,
    pub(crate) captured: bool,
    /// The first recording the op waited on, (stream, seq); seq 0: none. Further
    /// ones come as `Wait` records before the op (one record for the common op).
    pub(crate) waited: (u64, u64),
}

/// A record of a per-thread buffer.
#[derive(Debug)]
pub(crate) enum Rec {
    /// A recording that the following `Op` waited on.
    Wait {
        t0: u64,
        src: u64,
        seq: u64,
    },
    Op(OpRec),
    /// The label stream `stream` has from here on (its track's name).
    Label {
        t0: u64,
        stream: u64,
        label: Option<Arc<str>>,
    },
    /// The start (`begin`) or end of a capture on its origin stream.
    Capture {
        t: u64,
        stream: u64,
        begin: bool,
        capture: u64,
        ok: bool,
    },
    /// Stream `stream` was destroyed: its recordings can be forgotten.
    Gone {
        t: u64,
        stream: u64,
    },
}

impl Rec {
    /// The time the record sorts by.
    pub(crate) fn t0(&self) -> u64 {
        match self {
            Rec::Wait { t0, .. } | Rec::Label { t0, .. } => *t0,
            Rec::Op(o) => o.t0,
            Rec::Capture { t, .. } | Rec::Gone { t, .. } => *t,
        }
    }
}

/// One thread's buffer, shared with the drainer.
pub(crate) struct ThreadBuf {
    recs: Mutex<Vec<Rec>>,
}

impl ThreadBuf {
    fn lock(&self) -> MutexGuard<'_, Vec<Rec>> {
        self.recs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every thread's buffer (threads that ended stay until drained).
static BUFS: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());

/// The buffer of records written while the thread's own is gone (thread exit).
static ORPHANS: Mutex<Vec<Rec>> = Mutex::new(Vec::new());

/// Kernel names seen by any thread, leaked once each (bounded by [`MAX_NAMES`]).
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
const MAX_NAMES: usize = 4096;

/// Bumped by every trace start: a thread's label cache belongs to one trace.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Slots of a thread's label cache (direct-mapped by stream id).
const LABEL_SLOTS: usize = 8;

/// A thread's own state: its shared buffer, and caches that spare the op path a
/// lock: the label version last written per stream, and kernel names.
struct Local {
    buf: Arc<ThreadBuf>,
    generation: u64,
    /// (stream id + 1, label version) whose `Label` record this thread wrote.
    labels: [(u64, u64); LABEL_SLOTS],
    names: Vec<&'static str>,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Local {
    fn new() -> Local {
        let buf = Arc::new(ThreadBuf {
            recs: Mutex::new(Vec::with_capacity(1024)),
        });
        lock(&BUFS).push(buf.clone());
        Local {
            buf,
            generation: GENERATION.load(Ordering::Relaxed),
            labels: [(0, 0); LABEL_SLOTS],
            names: Vec::new(),
        }
    }

    /// A `'static` copy of a kernel name.
    fn intern(&mut self, name: &str) -> &'static str {
        if let Some(n) = self.names.iter().find(|n| **n == name) {
            return n;
        }
        let n = intern_global(name);
        if self.names.len() < 64 {
            self.names.push(n);
        }
        n
    }
}

#[cold]
fn intern_global(name: &str) -> &'static str {
    let mut g = lock(&NAMES);
    if let Some(n) = g.iter().find(|n| **n == name) {
        return n;
    }
    if g.len() >= MAX_NAMES {
        return "kernel";
    }
    let n: &'static str = Box::leak(name.into());
    g.push(n);
    n
}

/// A `'static` name for an op kind; `intern` copies a kernel's.
fn kind_name(kind: &OpKind<'_>, intern: impl FnOnce(&str) -> &'static str) -> &'static str {
    match kind {
        OpKind::Copy(CopyDir::H2D, _) => "copy H2D",
        OpKind::Copy(CopyDir::D2H, _) => "copy D2H",
        OpKind::Copy(CopyDir::D2D, _) => "copy D2D",
        OpKind::Copy(CopyDir::H2H, _) => "copy H2H",
        OpKind::Memset(_) => "memset",
        OpKind::Launch(name) => intern(name),
        OpKind::HostFn => "host fn",
        OpKind::GraphLaunch(_) => "graph launch",
        OpKind::ForeignBegin(what) => what,
        OpKind::ForeignEnd => "op end",
        OpKind::Record => "record",
        OpKind::WaitEvent => "wait event",
    }
}

/// A `'static` name for an op kind, off the op path (device spans).
pub(crate) fn static_name(kind: &OpKind<'_>) -> &'static str {
    kind_name(kind, intern_global)
}

/// What `op` needs of the stream to name its track: its id and label version, and
/// a way to read the label when it changed.
pub(crate) struct LabelSrc<'a> {
    pub(crate) stream: u64,
    pub(crate) version: u64,
    pub(crate) read: &'a dyn Fn() -> Option<Arc<str>>,
}

/// Appends one op's records to the calling thread's buffer: a `Label` record when
/// this thread has not written the stream's current label in this trace, a `Wait`
/// per recording waited on, then the span.
#[allow(clippy::too_many_arguments)]
pub(crate) fn op(
    t0: u64,
    t1: u64,
    label: LabelSrc<'_>,
    kind: &OpKind<'_>,
    seq: u64,
    captured: bool,
    from: &[(u64, u64)],
) {
    let (cat, arg_kind, arg) = match *kind {
        OpKind::Copy(_, n) => (Cat::Copy, ArgKind::Bytes, n),
        OpKind::Memset(n) => (Cat::Copy, ArgKind::Bytes, n),
        OpKind::Launch(_) => (Cat::Launch, ArgKind::None, 0),
        OpKind::HostFn => (Cat::Host, ArgKind::None, 0),
        OpKind::GraphLaunch(id) => (Cat::Graph, ArgKind::GraphExec, id),
        OpKind::ForeignBegin(_) | OpKind::ForeignEnd => (Cat::Foreign, ArgKind::None, 0),
        OpKind::Record | OpKind::WaitEvent => (Cat::Event, ArgKind::None, 0),
    };
    let me = label.stream;
    let write = |local: &mut Local| {
        let name = kind_name(kind, |n| local.intern(n));
        let generation = GENERATION.load(Ordering::Relaxed);
        if local.generation != generation {
            local.generation = generation;
            local.labels = [(0, 0); LABEL_SLOTS];
        }
        let slot = &mut local.labels[(me as usize) % LABEL_SLOTS];
        let new_label = *slot != (me + 1, label.version);
        if new_label {
            *slot = (me + 1, label.version);
        }
        let rec = Rec::Op(OpRec {
            t0,
            t1,
            stream: me,
            seq,
            arg,
            name,
            cat,
            arg_kind,
            captured,
            waited: from.first().copied().unwrap_or((0, 0)),
        });
        let mut g = local.buf.lock();
        push(
            &mut g,
            new_label,
            t0,
            &label,
            from.get(1..).unwrap_or(&[]),
            rec,
        )
    };
    let len = LOCAL
        .try_with(|l| {
            let mut l = l.borrow_mut();
            write(l.get_or_insert_with(Local::new))
        })
        .unwrap_or_else(|_| {
            // The thread is exiting: its own buffer is gone.
            let mut g = lock(&ORPHANS);
            let rec = Rec::Op(OpRec {
                t0,
                t1,
                stream: me,
                seq,
                arg,
                name: static_name(kind),
                cat,
                arg_kind,
                captured,
                waited: from.first().copied().unwrap_or((0, 0)),
            });
            push(&mut g, true, t0, &label, from.get(1..).unwrap_or(&[]), rec)
        });
    if len >= WAKE_AT && len % WAKE_AT == 0 {
        full(len);
    }
}

#[inline(always)]
fn push(
    g: &mut Vec<Rec>,
    new_label: bool,
    t0: u64,
    label: &LabelSrc<'_>,
    from: &[(u64, u64)],
    rec: Rec,
) -> usize {
    if new_label {
        push_label(g, t0, label);
    }
    for &(src, seq) in from {
        g.push(Rec::Wait { t0, src, seq });
    }
    g.push(rec);
    g.len()
}

#[cold]
fn push_label(g: &mut Vec<Rec>, t0: u64, label: &LabelSrc<'_>) {
    g.push(Rec::Label {
        t0,
        stream: label.stream,
        label: (label.read)(),
    });
}

/// A buffer passed [`WAKE_AT`] records: wakes the flush thread, or drains now when
/// it passed [`DRAIN_AT`] (the flush thread does not keep up).
#[cold]
#[inline(never)]
fn full(len: usize) {
    if len >= DRAIN_AT {
        super::drain_now();
    } else {
        super::wake_flusher();
    }
}

/// Appends a record that is not an op's (captures, stream ends). Dropped while the
/// thread exits.
pub(crate) fn other(rec: Rec) {
    let _ = LOCAL.try_with(|l| {
        let mut l = l.borrow_mut();
        let local = l.get_or_insert_with(Local::new);
        local.buf.lock().push(rec);
    });
}

/// Moves every buffered record into `out` (appending), using `spare` as the empty
/// buffer each thread gets back; drops the buffers of threads that ended.
pub(crate) fn take_all(out: &mut Vec<Rec>, spare: &mut Vec<Rec>) {
    let bufs: Vec<Arc<ThreadBuf>> = lock(&BUFS).clone();
    for b in &bufs {
        {
            let mut g = b.lock();
            if g.is_empty() {
                continue;
            }
            spare.clear();
            std::mem::swap(&mut *g, spare);
        }
        out.append(spare);
    }
    out.append(&mut lock(&ORPHANS));
    drop(bufs);
    // A buffer only the list holds belongs to a thread that ended; keep it until
    // it is empty (an op of that thread may have written it after the swap above).
    lock(&BUFS).retain(|b| Arc::strong_count(b) > 1 || !b.lock().is_empty());
}

/// Forgets what every buffer holds (a trace starts).
pub(crate) fn clear_all() {
    let mut all = Vec::new();
    let mut spare = Vec::new();
    take_all(&mut all, &mut spare);
}

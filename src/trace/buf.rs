//! Per-thread record buffers: what a traced op writes on its path.
//!
//! A traced op writes one 64-byte record (one more per further recording it
//! waited on) into its thread's current chunk with plain stores and publishes it
//! with one release store of the chunk's length: no lock, no read-modify-write, no
//! allocation, no formatting. A full chunk ([`CHUNK`] records) moves to the thread's
//! list of full ones under the thread's lock, and a chunk from a process-wide pool
//! takes its place (drained chunks go back to the pool, so their memory is reused,
//! not faulted in anew). Records that are not an op's (labels, captures, stream
//! ends) are rare and go to a list behind the same lock. Each thread registers its
//! buffer once, in a global list. A drain (the trace's flush thread every 100 ms or
//! when a thread has [`WAKE_AT`] records waiting, `flush`, `stop`, or the op itself
//! past [`DRAIN_AT`]) takes every published record, sorts them by time and formats
//! them as JSON (`Sink::drain`).
//!
//! Order: a thread's records are in time order per stream track (ops on one stream
//! are serialised by its push lock, and an op's record is written before the next
//! op on that stream starts). A drain takes a cutoff time before it reads any buffer
//! and formats only the records that started before it, keeping the rest for the
//! next drain: every record of a stream that started before the cutoff was written
//! before any later op of that stream started, so a drain never emits a span after
//! a later one of the same track, and the op that made a recording an op waited on
//! is always formatted first (flow arrows resolve at drain time). A stream's label
//! record is listed before the op records taken with it, so it names the track first.

use super::names::SpanName;
use super::OpKind;
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Records per chunk (64 KiB).
const CHUNK: usize = 1024;
/// Drained chunks kept for reuse (4 MiB).
const POOL_MAX: usize = 64;
/// Chunks a trace start puts in the pool, their pages touched, so that the ops of
/// its first flush periods take no page faults (1 MiB).
const POOL_START: usize = 16;
/// Records waiting in one thread's full chunks at which it wakes the flush thread.
pub(crate) const WAKE_AT: usize = 1 << 15;
/// Records waiting in one thread's full chunks at which the op drains all buffers
/// itself (the flush thread does not keep up).
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

/// One op's enqueue span (`wait_only` false), or one more recording the next op
/// span of this thread waited on (`wait_only`: `t0`, `stream` the source, `seq`).
/// One cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct OpRec {
    pub(crate) t0: u64,
    pub(crate) stream: u64,
    /// The op's recording (0: none; sequence numbers start at 1).
    pub(crate) seq: u64,
    pub(crate) arg: u64,
    /// The first recording the op waited on, (stream, seq); seq 0: none.
    pub(crate) waited: (u64, u64),
    pub(crate) name: SpanName,
    /// The span's length in ns (saturated at `u32::MAX`, 4.3 s).
    pub(crate) dur: u32,
    pub(crate) cat: Cat,
    pub(crate) arg_kind: ArgKind,
    pub(crate) captured: bool,
    pub(crate) wait_only: bool,
}

const _: () = assert!(std::mem::size_of::<OpRec>() == 64);

impl OpRec {
    /// The span of an op of `kind` on `stream` from `t0` to `t1`.
    #[inline(always)]
    pub(crate) fn new(kind: &OpKind<'_>, stream: u64, t0: u64, t1: u64) -> OpRec {
        let (cat, arg_kind, arg) = match *kind {
            OpKind::Copy(_, n) | OpKind::Memset(n) => (Cat::Copy, ArgKind::Bytes, n),
            OpKind::Launch(_) => (Cat::Launch, ArgKind::None, 0),
            OpKind::HostFn => (Cat::Host, ArgKind::None, 0),
            OpKind::GraphLaunch(id) => (Cat::Graph, ArgKind::GraphExec, id),
            OpKind::ForeignBegin(_) | OpKind::ForeignEnd => (Cat::Foreign, ArgKind::None, 0),
            OpKind::Record | OpKind::WaitEvent => (Cat::Event, ArgKind::None, 0),
        };
        OpRec {
            t0,
            stream,
            seq: 0,
            arg,
            waited: (0, 0),
            name: super::names::span_name(kind),
            dur: (t1 - t0).min(u32::MAX as u64) as u32,
            cat,
            arg_kind,
            captured: false,
            wait_only: false,
        }
    }

    fn wait(t0: u64, src: u64, seq: u64) -> OpRec {
        OpRec {
            t0,
            stream: src,
            seq,
            arg: 0,
            waited: (0, 0),
            name: &"",
            dur: 0,
            cat: Cat::Event,
            arg_kind: ArgKind::None,
            captured: false,
            wait_only: true,
        }
    }
}

/// A record as a drain sees it.
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

    fn from_op(o: &OpRec) -> Rec {
        if o.wait_only {
            Rec::Wait {
                t0: o.t0,
                src: o.stream,
                seq: o.seq,
            }
        } else {
            Rec::Op(*o)
        }
    }
}

/// [`CHUNK`] records, written by one thread and read by the drainer.
struct Chunk {
    recs: UnsafeCell<[MaybeUninit<OpRec>; CHUNK]>,
    /// Records written; stored (release) by the writing thread only.
    len: AtomicUsize,
    /// Records the drainer took; touched by the drainer only, under the thread's lock.
    taken: AtomicUsize,
}

/// A chunk owned by a thread's buffer or by the pool.
struct ChunkPtr(NonNull<Chunk>);

// SAFETY: the writer writes only the slots at and past `len`, readers read only the
// slots before it (acquire), and a chunk is freed or reused only by its one owner.
unsafe impl Send for ChunkPtr {}

impl ChunkPtr {
    fn get(&self) -> &Chunk {
        // SAFETY: the chunk lives until its owner frees it (`free`).
        unsafe { self.0.as_ref() }
    }

    /// A chunk from the pool, or a new one; empty.
    fn fresh() -> ChunkPtr {
        if let Some(c) = lock(&POOL).pop() {
            c.get().len.store(0, Ordering::Relaxed);
            c.get().taken.store(0, Ordering::Relaxed);
            return c;
        }
        // Not zeroed: the records start uninitialised, only the counts need values.
        let mut b = Box::<Chunk>::new_uninit();
        let p = b.as_mut_ptr();
        // SAFETY: initialises the two counts of the allocation; `recs` needs no value.
        let b = unsafe {
            std::ptr::addr_of_mut!((*p).len).write(AtomicUsize::new(0));
            std::ptr::addr_of_mut!((*p).taken).write(AtomicUsize::new(0));
            b.assume_init()
        };
        ChunkPtr(NonNull::from(Box::leak(b)))
    }

    /// Gives the chunk to the pool, or frees it when the pool is full.
    fn recycle(self) {
        let mut pool = lock(&POOL);
        if pool.len() < POOL_MAX {
            pool.push(self);
            return;
        }
        drop(pool);
        // SAFETY: allocated by `fresh` as a `Box`, owned only here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }

    /// Appends the published records the drainer has not taken, and marks them taken.
    fn take_into(&self, out: &mut Vec<Rec>) {
        let c = self.get();
        let len = c.len.load(Ordering::Acquire);
        let from = c.taken.load(Ordering::Relaxed);
        // SAFETY: the slots before `len` were written and are no longer written.
        let recs = unsafe { std::slice::from_raw_parts(c.recs.get().cast::<OpRec>(), len) };
        out.extend(recs[from..].iter().map(Rec::from_op));
        c.taken.store(len, Ordering::Relaxed);
    }

    fn drained(&self) -> bool {
        let c = self.get();
        c.taken.load(Ordering::Relaxed) == c.len.load(Ordering::Acquire)
    }
}

static POOL: Mutex<Vec<ChunkPtr>> = Mutex::new(Vec::new());

/// What a thread's buffer shares with the drainer, under its lock.
struct Shared {
    /// The chunk the thread writes.
    current: ChunkPtr,
    /// Full chunks, oldest first.
    full: Vec<ChunkPtr>,
    /// Records that are not an op's.
    other: Vec<Rec>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let current = std::mem::replace(&mut self.current, ChunkPtr(NonNull::dangling()));
        for c in self.full.drain(..).chain(Some(current)) {
            c.recycle();
        }
    }
}

/// One thread's buffer, shared with the drainer.
pub(crate) struct ThreadBuf {
    shared: Mutex<Shared>,
}

impl ThreadBuf {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }
}

/// Every thread's buffer (threads that ended stay until drained).
static BUFS: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());

/// The records written while the thread's own buffer is gone (thread exit).
static ORPHANS: Mutex<Vec<Rec>> = Mutex::new(Vec::new());

/// Bumped by every trace start: a thread's label cache belongs to one trace.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Slots of a thread's label cache (direct-mapped by stream id).
const LABEL_SLOTS: usize = 8;

/// A thread's writing side: its buffer, the chunk it writes and how far, and the
/// label version it last wrote per stream (in trace `generation`).
struct Writer {
    buf: Arc<ThreadBuf>,
    chunk: NonNull<Chunk>,
    len: usize,
    generation: u64,
    /// (stream id + 1, label version) whose `Label` record this thread wrote.
    labels: [(u64, u64); LABEL_SLOTS],
}

/// Owns the thread's [`Writer`] and frees it at thread exit.
struct WriterOwner(Cell<*mut Writer>);

impl Drop for WriterOwner {
    fn drop(&mut self) {
        let w = self.0.get();
        if !w.is_null() {
            WRITER.with(|c| c.set(std::ptr::null_mut()));
            // SAFETY: made by `register` from a `Box`; the op path no longer sees it.
            drop(unsafe { Box::from_raw(w) });
        }
    }
}

thread_local! {
    /// The op path's pointer to the thread's writer (null until registered, and
    /// after thread exit). No destructor, so reading it takes no state check.
    static WRITER: Cell<*mut Writer> = const { Cell::new(std::ptr::null_mut()) };
    static OWNER: WriterOwner = const { WriterOwner(Cell::new(std::ptr::null_mut())) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Appends one record and publishes it.
    #[inline(always)]
    fn push(&mut self, rec: OpRec) {
        if self.len == CHUNK {
            self.roll();
        }
        // SAFETY: the current chunk lives while `buf` holds it; slot `len` is ours.
        let c = unsafe { self.chunk.as_ref() };
        unsafe { c.recs.get().cast::<OpRec>().add(self.len).write(rec) };
        self.len += 1;
        c.len.store(self.len, Ordering::Release);
    }

    /// Appends an op's wait records, then its span, in one chunk and with one
    /// publication: a drain takes all of them or none (a wait taken without its span
    /// went to the next op the drain formatted, another thread's, perhaps).
    #[inline(always)]
    fn push_op(&mut self, rec: OpRec, waits: &[(u64, u64)]) {
        let n = waits.len() + 1;
        if n > CHUNK {
            // More waits than a chunk holds: published as they fit.
            for &(src, seq) in waits {
                self.push(OpRec::wait(rec.t0, src, seq));
            }
            return self.push(rec);
        }
        if self.len + n > CHUNK {
            self.roll();
        }
        // SAFETY: the current chunk lives while `buf` holds it; slots `len..len+n`
        // are ours (no reader looks past the published length).
        let c = unsafe { self.chunk.as_ref() };
        let slots = c.recs.get().cast::<OpRec>();
        for (i, &(src, seq)) in waits.iter().enumerate() {
            unsafe { slots.add(self.len + i).write(OpRec::wait(rec.t0, src, seq)) };
        }
        unsafe { slots.add(self.len + waits.len()).write(rec) };
        self.len += n;
        c.len.store(self.len, Ordering::Release);
    }

    /// The current chunk is full: hands it to the drainer and takes a fresh one.
    #[cold]
    #[inline(never)]
    fn roll(&mut self) {
        let fresh = ChunkPtr::fresh();
        self.chunk = fresh.0;
        self.len = 0;
        let waiting = {
            let mut g = self.buf.lock();
            let full = std::mem::replace(&mut g.current, fresh);
            g.full.push(full);
            g.full.len() * CHUNK
        };
        if waiting >= DRAIN_AT {
            super::drain_now();
        } else if waiting % WAKE_AT == 0 {
            super::wake_flusher();
        }
    }

    /// Whether this thread has not written stream `stream`'s label `version` in
    /// this trace; notes that it now has.
    #[inline(always)]
    fn label_is_new(&mut self, stream: u64, version: u64) -> bool {
        let generation = GENERATION.load(Ordering::Relaxed);
        if self.generation != generation {
            self.generation = generation;
            self.labels = [(0, 0); LABEL_SLOTS];
        }
        let slot = &mut self.labels[(stream as usize) % LABEL_SLOTS];
        let new = *slot != (stream + 1, version);
        *slot = (stream + 1, version);
        new
    }
}

/// The calling thread's writer, registering it on first use; None while the
/// thread exits.
#[cold]
#[inline(never)]
fn register() -> Option<*mut Writer> {
    OWNER
        .try_with(|o| {
            if o.0.get().is_null() {
                let current = ChunkPtr::fresh();
                let chunk = current.0;
                let buf = Arc::new(ThreadBuf {
                    shared: Mutex::new(Shared {
                        current,
                        full: Vec::new(),
                        other: Vec::new(),
                    }),
                });
                lock(&BUFS).push(buf.clone());
                let w = Box::into_raw(Box::new(Writer {
                    buf,
                    chunk,
                    len: 0,
                    generation: GENERATION.load(Ordering::Relaxed),
                    labels: [(0, 0); LABEL_SLOTS],
                }));
                o.0.set(w);
                WRITER.with(|c| c.set(w));
            }
            o.0.get()
        })
        .ok()
}

/// What `op` needs of the stream to name its track: its label version, and a way
/// to read the label when it changed.
pub(crate) struct LabelSrc<'a> {
    pub(crate) version: u64,
    pub(crate) read: &'a dyn Fn() -> Option<Arc<str>>,
}

/// Appends one op's records to the calling thread's buffer: a `Label` record when
/// this thread has not written the stream's current label in this trace, a wait
/// record per further recording waited on (`more`: (stream, seq)), then the span.
#[inline(always)]
pub(crate) fn op(rec: OpRec, label: LabelSrc<'_>, more: impl Iterator<Item = (u64, u64)>) {
    let mut w = WRITER.with(Cell::get);
    if w.is_null() {
        match register() {
            Some(p) => w = p,
            None => return orphan(rec, &label, more),
        }
    }
    // SAFETY: the writer lives until this thread's `OWNER` is destroyed, which
    // nulls `WRITER` first; nothing below reaches `op` again on this thread.
    let w = unsafe { &mut *w };
    if w.label_is_new(rec.stream, label.version) {
        push_label(w, rec.t0, rec.stream, &label);
    }
    let waits: smallvec::SmallVec<[(u64, u64); 4]> = more.collect();
    w.push_op(rec, &waits);
}

#[cold]
#[inline(never)]
fn push_label(w: &mut Writer, t0: u64, stream: u64, label: &LabelSrc<'_>) {
    let rec = Rec::Label {
        t0,
        stream,
        label: (label.read)(),
    };
    w.buf.lock().other.push(rec);
}

/// The thread is exiting: its own buffer is gone.
#[cold]
fn orphan(rec: OpRec, label: &LabelSrc<'_>, more: impl Iterator<Item = (u64, u64)>) {
    let mut g = lock(&ORPHANS);
    g.push(Rec::Label {
        t0: rec.t0,
        stream: rec.stream,
        label: (label.read)(),
    });
    for (src, seq) in more {
        g.push(Rec::Wait {
            t0: rec.t0,
            src,
            seq,
        });
    }
    g.push(Rec::Op(rec));
}

/// Appends a record that is not an op's (captures, stream ends). Dropped while the
/// thread exits.
pub(crate) fn other(rec: Rec) {
    let mut w = WRITER.with(Cell::get);
    if w.is_null() {
        match register() {
            Some(p) => w = p,
            None => return,
        }
    }
    // SAFETY: as in `op`.
    let w = unsafe { &*w };
    w.buf.lock().other.push(rec);
}

/// Appends every published record to `out`; per thread, its other records first,
/// then its op records in order. Drops the buffers of threads that ended.
pub(crate) fn take_all(out: &mut Vec<Rec>) {
    let bufs: Vec<Arc<ThreadBuf>> = lock(&BUFS).clone();
    for b in &bufs {
        let mut g = b.lock();
        out.append(&mut g.other);
        for c in std::mem::take(&mut g.full) {
            c.take_into(out);
            c.recycle();
        }
        g.current.take_into(out);
    }
    out.append(&mut lock(&ORPHANS));
    drop(bufs);
    // A buffer only the list holds belongs to a thread that ended; keep it until
    // it is empty (an op of that thread may have written it after the loop above).
    lock(&BUFS).retain(|b| {
        Arc::strong_count(b) > 1 || {
            let g = b.lock();
            !(g.other.is_empty() && g.full.is_empty() && g.current.drained())
        }
    });
}

/// Forgets what every buffer holds and fills the pool (a trace starts).
pub(crate) fn clear_all() {
    take_all(&mut Vec::new());
    let missing = POOL_START.saturating_sub(lock(&POOL).len());
    for _ in 0..missing {
        let c = ChunkPtr::fresh();
        // SAFETY: the chunk is ours alone; zeroes its records to fault their pages in.
        unsafe { std::ptr::write_bytes(c.get().recs.get(), 0, 1) };
        c.recycle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests drain every thread's records: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn spans_of(stream: u64, recs: &[Rec]) -> Vec<(u64, u64)> {
        recs.iter()
            .filter_map(|r| match r {
                Rec::Op(o) if o.stream == stream => Some((o.t0, o.seq)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn records_cross_chunks_and_outlive_their_thread() {
        let _serial = lock(&SERIAL);
        const STREAM: u64 = u64::MAX - 7;
        let n = 3 * CHUNK as u64 + 5;
        let read = || Some(Arc::<str>::from("label"));
        std::thread::spawn(move || {
            for i in 1..=n {
                let mut rec = OpRec::new(&OpKind::HostFn, STREAM, 10 * i, 10 * i + 3);
                rec.seq = i;
                let more = (i % 100 == 0).then_some((STREAM - 1, i));
                let label = LabelSrc {
                    version: 0,
                    read: &read,
                };
                op(rec, label, more.into_iter());
            }
        })
        .join()
        .unwrap();
        let mut all = Vec::new();
        take_all(&mut all);
        let spans = spans_of(STREAM, &all);
        let want: Vec<(u64, u64)> = (1..=n).map(|i| (10 * i, i)).collect();
        assert_eq!(spans, want);
        let waits = all
            .iter()
            .filter(|r| matches!(r, Rec::Wait { src, .. } if *src == STREAM - 1))
            .count();
        assert_eq!(waits as u64, n / 100);
        let label = all.iter().position(
            |r| matches!(r, Rec::Label { stream, label: Some(l), .. } if *stream == STREAM && &**l == "label"),
        );
        let first = all
            .iter()
            .position(|r| matches!(r, Rec::Op(o) if o.stream == STREAM));
        assert!(label.unwrap() < first.unwrap(), "the label comes first");
        // The ended thread's buffer, drained, is gone from the list.
        take_all(&mut Vec::new());
        assert!(lock(&BUFS).iter().all(|b| Arc::strong_count(b) > 1));
    }

    /// An op's wait records and its span are published together: a drain that
    /// ran between them (here from inside the iterator of waits) gave the wait to the
    /// next op it formatted, another stream's (the thirty-sixth session's review).
    #[test]
    #[cfg_attr(miri, ignore)] // writes a trace file
    fn a_drain_during_an_op_takes_its_waits_and_span_together() {
        let _serial = lock(&SERIAL);
        // Streams far from any real stream id.
        const A: u64 = 1 << 40;
        const B: u64 = A + 1;
        const C: u64 = A + 2;
        const D: u64 = A + 3;
        let path = std::env::temp_dir().join(format!("rev-buf-{}.json", std::process::id()));
        // The sink a drain would use (start_ns 0: nothing filtered).
        let sink = std::cell::RefCell::new(
            super::super::sink::Sink::create(path.clone(), u64::MAX, 0).unwrap(),
        );
        take_all(&mut Vec::new());
        let no_label = || None::<Arc<str>>;
        let label = || LabelSrc {
            version: 0,
            read: &no_label,
        };
        // A and B each make recording 1 (ops at 10 and 20).
        for (s, t) in [(A, 10), (B, 20)] {
            let mut r = OpRec::new(&OpKind::HostFn, s, t, t + 5);
            r.seq = 1;
            op(r, label(), std::iter::empty());
        }
        // D's op at 200, waiting on nothing (written by this thread or any other).
        op(
            OpRec::new(&OpKind::HostFn, D, 200, 205),
            label(),
            std::iter::empty(),
        );
        // C's op at 100 waited on A:1 (in its span) and B:1 (a Wait record). Another
        // thread's drain (cut 300) runs right after the Wait record is published and
        // before the span record is: the iterator's last `next` is exactly that point.
        let mut c = OpRec::new(&OpKind::HostFn, C, 100, 105);
        c.waited = (A, 1);
        let mut more = vec![(B, 1u64)].into_iter();
        let mut yielded = false;
        let racing = std::iter::from_fn(|| match more.next() {
            Some(x) => {
                yielded = true;
                Some(x)
            }
            None => {
                if yielded {
                    sink.borrow_mut().drain(300);
                }
                None
            }
        });
        op(c, label(), racing);
        sink.borrow_mut().drain(u64::MAX);
        sink.into_inner().finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let span = |s: u64| {
            text.lines()
                .find(|l| l.contains("\"ph\":\"X\"") && l.contains(&format!("\"tid\":{s},")))
                .unwrap_or_else(|| panic!("no span of {s}"))
                .to_string()
        };
        let flow_ends_on_d = text
            .lines()
            .filter(|l| l.contains("\"ph\":\"f\"") && l.contains(&format!("\"tid\":{D},")))
            .count();
        eprintln!(
            "C: {}\nD: {}\nflow ends on D: {flow_ends_on_d}",
            span(C),
            span(D)
        );
        assert!(
            !span(D).contains("\"waits\""),
            "D waited on nothing: {}",
            span(D)
        );
        assert!(
            span(C).contains("\"waits\":2"),
            "C waited on two: {}",
            span(C)
        );
    }
}

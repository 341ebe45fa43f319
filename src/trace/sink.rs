//! The trace file: Chrome trace-event JSON in the array format, streamed. The file
//! starts with `[`, each event is written whole (a buffer goes to the file only at
//! event boundaries), and `]` is written at stop; a file cut short by a crash is a
//! prefix that Perfetto and chrome://tracing still open (the closing `]` is
//! optional in that format), and appending `]` makes it strict JSON.

use super::buf::{self, ArgKind, Rec};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// A stream's track name: its label and id.
pub(crate) fn stream_track_name(id: u64, label: Option<&str>) -> String {
    match label {
        Some(l) => format!("{l} (stream #{id})"),
        None => format!("stream #{id}"),
    }
}

/// The process whose threads are the streams (host-side enqueue spans).
pub(crate) const PID_STREAMS: u32 = 1;
/// The process whose threads are the streams' sampled device spans.
pub(crate) const PID_DEVICE: u32 = 2;
/// The process whose threads are the OS threads calling sluice.
pub(crate) const PID_THREADS: u32 = 3;

/// Buffered bytes at which the op that adds an event writes them itself; below
/// that the flush thread writes them, off the op path.
const FLUSH_AT: usize = 16 << 20;
/// Recordings per stream remembered as flow sources.
const RECENT: usize = 4096;

/// The file and its write errors. Its lock is taken while the sink's is held, so
/// buffers reach the file in the order they were filled.
pub(crate) struct Out {
    file: File,
    failed: bool,
    /// A write error not yet logged.
    pub(crate) error: Option<std::io::Error>,
}

impl Out {
    pub(crate) fn write(&mut self, data: &[u8]) {
        if self.failed || data.is_empty() {
            return;
        }
        if let Err(e) = self.file.write_all(data) {
            self.failed = true;
            self.error = Some(e);
        }
    }
}

pub(crate) fn lock_out(out: &Mutex<Out>) -> MutexGuard<'_, Out> {
    out.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Sink {
    pub(crate) out: Arc<Mutex<Out>>,
    pub(crate) path: PathBuf,
    buf: Vec<u8>,
    /// An empty buffer that takes `buf`'s place while the flush thread writes it.
    spare: Vec<u8>,
    events: u64,
    /// The name last given to each track (pid, tid).
    names: HashMap<(u32, u64), Box<str>, Fast>,
    /// The label each stream track was last named after.
    labels: HashMap<(u32, u64), Option<Arc<str>>, Fast>,
    /// Per stream, (seq, ts) of its newest recordings: where wait arrows start.
    recent: HashMap<u64, VecDeque<(u64, u64)>, Fast>,
    next_flow: u64,
    /// Which start this sink belongs to (the flush thread of an older one stops).
    pub(crate) generation: u64,
    /// When the trace started: older records (of ops that saw an earlier trace)
    /// are not written.
    start_ns: u64,
    /// Records that started after a drain's cutoff, for the next drain.
    carry: Vec<Rec>,
}

impl Sink {
    pub(crate) fn create(path: PathBuf, generation: u64, start_ns: u64) -> std::io::Result<Sink> {
        let file = File::create(&path)?;
        let mut s = Sink {
            out: Arc::new(Mutex::new(Out {
                file,
                failed: false,
                error: None,
            })),
            path,
            buf: Vec::with_capacity(1 << 20),
            spare: Vec::new(),
            events: 0,
            names: HashMap::default(),
            labels: HashMap::default(),
            recent: HashMap::default(),
            next_flow: 1,
            generation,
            start_ns,
            carry: Vec::new(),
        };
        for (pid, name) in [
            (PID_STREAMS, "sluice streams (host enqueue)"),
            (PID_DEVICE, "sluice streams (device, sampled)"),
            (PID_THREADS, "sluice calling threads"),
        ] {
            s.event("M", "process_name", "", pid, 0, 0, |j| {
                j.args(|a| a.str("name", name))
            });
            s.event("M", "process_sort_index", "", pid, 0, 0, |j| {
                j.args(|a| a.u64("sort_index", pid as u64))
            });
        }
        match s.flush() {
            Some(e) => Err(e),
            None => Ok(s),
        }
    }

    /// Writes one event: `{"ph":..,"name":..,"cat":..,"pid":..,"tid":..,"ts":..` then
    /// what `more` adds, then `}`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn event(
        &mut self,
        ph: &str,
        name: &str,
        cat: &str,
        pid: u32,
        tid: u64,
        ts_ns: u64,
        more: impl FnOnce(&mut Json<'_>),
    ) {
        self.buf
            .extend_from_slice(if self.events == 0 { b"[\n" } else { b",\n" });
        self.events += 1;
        let mut j = Json(&mut self.buf);
        j.0.extend_from_slice(b"{\"ph\":\"");
        j.0.extend_from_slice(ph.as_bytes());
        j.0.extend_from_slice(b"\",\"name\":");
        j.string(name);
        if !cat.is_empty() {
            j.str("cat", cat);
        }
        j.u64("pid", pid as u64);
        j.u64("tid", tid);
        j.ts("ts", ts_ns);
        more(&mut j);
        j.0.push(b'}');
        if self.buf.len() >= FLUSH_AT {
            if let Some(e) = self.flush() {
                lock_out(&self.out).error = Some(e);
            }
        }
    }

    /// Names track (pid, tid) `name`, unless it already has that name.
    pub(crate) fn track(&mut self, pid: u32, tid: u64, name: &str, sort: u64) {
        if self.names.get(&(pid, tid)).is_some_and(|n| &**n == name) {
            return;
        }
        self.names.insert((pid, tid), name.into());
        self.event("M", "thread_name", "", pid, tid, 0, |j| {
            j.args(|a| a.str("name", name))
        });
        self.event("M", "thread_sort_index", "", pid, tid, 0, |j| {
            j.args(|a| a.u64("sort_index", sort))
        });
    }

    /// Names stream `id`'s track on `pid` after its label, unless it already is.
    pub(crate) fn stream_track(&mut self, pid: u32, id: u64, label: Option<Arc<str>>) {
        if self.labels.get(&(pid, id)).is_some_and(|l| *l == label) {
            return;
        }
        self.track(pid, id, &stream_track_name(id, label.as_deref()), id);
        self.labels.insert((pid, id), label);
    }

    /// Remembers that recording `seq` of stream `stream` was made at `ts`.
    pub(crate) fn remember(&mut self, stream: u64, seq: u64, ts: u64) {
        let r = self.recent.entry(stream).or_default();
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back((seq, ts));
    }

    /// When recording `seq` of stream `stream` was made, if it was traced.
    pub(crate) fn recall(&self, stream: u64, seq: u64) -> Option<u64> {
        let r = self.recent.get(&stream)?;
        r.binary_search_by_key(&seq, |e| e.0).ok().map(|i| r[i].1)
    }

    pub(crate) fn forget_stream(&mut self, stream: u64) {
        self.recent.remove(&stream);
    }

    pub(crate) fn new_flow(&mut self) -> u64 {
        self.next_flow += 1;
        self.next_flow - 1
    }

    /// Formats the records of every thread's buffer that started before `cut`
    /// (see `buf`), in time order; keeps the others for the next drain.
    pub(crate) fn drain(&mut self, cut: u64) {
        let mut batch = std::mem::take(&mut self.carry);
        let had = batch.len();
        buf::take_all(&mut batch);
        if batch.len() == had && had == 0 {
            return;
        }
        // Stable: an op's records stay together and in order (they share its time).
        batch.sort_by_key(Rec::t0);
        let keep = batch.partition_point(|r| r.t0() < cut);
        self.carry = batch.split_off(keep);
        let mut waits: smallvec::SmallVec<[(u64, u64); 4]> = smallvec::SmallVec::new();
        for r in batch {
            match r {
                Rec::Wait { src, seq, .. } => waits.push((src, seq)),
                Rec::Label { stream, label, .. } => {
                    self.stream_track(PID_STREAMS, stream, label);
                }
                Rec::Op(o) => {
                    if o.waited.1 != 0 {
                        waits.push(o.waited);
                    }
                    if o.t0 >= self.start_ns {
                        self.op(&o, &waits);
                    }
                    waits.clear();
                }
                Rec::Capture {
                    t,
                    stream,
                    begin,
                    capture,
                    ok,
                } => {
                    if t < self.start_ns {
                        continue;
                    }
                    let ph = if begin { "B" } else { "E" };
                    self.event(ph, "capture", "graph", PID_STREAMS, stream, t, |j| {
                        if !begin {
                            j.args(|a| {
                                a.u64("capture", capture);
                                a.u64("ok", ok as u64);
                            });
                        }
                    });
                }
                Rec::Gone { stream, .. } => self.forget_stream(stream),
            }
        }
    }

    /// One op's span, and an arrow from each traced recording it waited on.
    fn op(&mut self, o: &buf::OpRec, from: &[(u64, u64)]) {
        let me = o.stream;
        let mid = o.t0 + o.dur as u64 / 2;
        if !self.labels.contains_key(&(PID_STREAMS, me)) {
            self.stream_track(PID_STREAMS, me, None);
        }
        for &(src, src_seq) in from {
            if let Some(at) = self.recall(src, src_seq) {
                let id = self.new_flow();
                self.event("s", "wait", "wait", PID_STREAMS, src, at, |j| {
                    j.u64("id", id)
                });
                self.event("f", "wait", "wait", PID_STREAMS, me, mid, |j| {
                    j.u64("id", id);
                    j.str("bp", "e");
                });
            }
        }
        let seq = o.seq;
        self.event("X", o.name, o.cat.name(), PID_STREAMS, me, o.t0, |j| {
            j.ts("dur", o.dur as u64);
            j.args(|a| {
                if seq != 0 {
                    a.u64("seq", seq);
                }
                match o.arg_kind {
                    ArgKind::Bytes => a.u64("bytes", o.arg),
                    ArgKind::GraphExec => a.u64("graph_exec", o.arg),
                    ArgKind::None => {}
                }
                if !from.is_empty() {
                    a.u64("waits", from.len() as u64);
                }
                if o.captured {
                    a.u64("captured", 1);
                }
            });
        });
        if seq != 0 {
            self.remember(me, seq, mid);
        }
    }

    /// Writes the buffered events to the file now, with the sink's lock held.
    /// Returns a write error not yet reported.
    pub(crate) fn flush(&mut self) -> Option<std::io::Error> {
        let mut out = lock_out(&self.out);
        out.write(&self.buf);
        self.buf.clear();
        out.error.take()
    }

    /// The buffered events, for the flush thread to write after releasing the
    /// sink's lock; take the file's lock (`out`) before releasing it.
    pub(crate) fn detach(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.buf, std::mem::take(&mut self.spare))
    }

    /// Gives back a buffer that `detach` handed out, once written.
    pub(crate) fn reattach(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if self.spare.capacity() < buf.capacity() {
            self.spare = buf;
        }
    }

    /// Closes the array and the file.
    pub(crate) fn finish(mut self) -> std::io::Result<()> {
        if self.events == 0 {
            self.buf.extend_from_slice(b"[");
        }
        self.buf.extend_from_slice(b"\n]\n");
        if let Some(e) = self.flush() {
            return Err(e);
        }
        let out = lock_out(&self.out);
        if out.failed {
            return Err(std::io::Error::other("an earlier write failed"));
        }
        out.file.sync_data()
    }
}

/// A hasher for the sink's small integer keys (FxHash's multiply-rotate): the
/// default SipHash showed in profiles of traced ops.
#[derive(Clone, Copy, Default)]
pub(crate) struct Fast;

pub(crate) struct FastHasher(u64);

impl std::hash::BuildHasher for Fast {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Writes the fields of one JSON object into a buffer.
pub(crate) struct Json<'a>(&'a mut Vec<u8>);

impl Json<'_> {
    /// `,"k":` (keys are plain ASCII and need no escaping).
    fn key(&mut self, k: &str) {
        self.0.extend_from_slice(b",\"");
        self.0.extend_from_slice(k.as_bytes());
        self.0.extend_from_slice(b"\":");
    }

    fn string(&mut self, s: &str) {
        self.0.push(b'"');
        let b = s.as_bytes();
        if !b.iter().any(|&c| c == b'"' || c == b'\\' || c < 0x20) {
            self.0.extend_from_slice(b);
        } else {
            for &c in b {
                match c {
                    b'"' => self.0.extend_from_slice(b"\\\""),
                    b'\\' => self.0.extend_from_slice(b"\\\\"),
                    b'\n' => self.0.extend_from_slice(b"\\n"),
                    b'\t' => self.0.extend_from_slice(b"\\t"),
                    c if c < 0x20 => {
                        let _ = write!(self.0, "\\u{:04x}", c);
                    }
                    c => self.0.push(c),
                }
            }
        }
        self.0.push(b'"');
    }

    /// Decimal digits of `v`, without `fmt`.
    fn digits(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.0.extend_from_slice(&d[i..]);
    }

    pub(crate) fn str(&mut self, k: &str, v: &str) {
        self.key(k);
        self.string(v);
    }

    pub(crate) fn u64(&mut self, k: &str, v: u64) {
        self.key(k);
        self.digits(v);
    }

    /// A time in µs, from ns (three decimals, no rounding).
    pub(crate) fn ts(&mut self, k: &str, ns: u64) {
        self.key(k);
        self.digits(ns / 1000);
        let f = ns % 1000;
        self.0.extend_from_slice(&[
            b'.',
            b'0' + (f / 100) as u8,
            b'0' + (f / 10 % 10) as u8,
            b'0' + (f % 10) as u8,
        ]);
    }

    /// An `args` object.
    pub(crate) fn args(&mut self, f: impl FnOnce(&mut Json<'_>)) {
        self.0.extend_from_slice(b",\"args\":{");
        let at = self.0.len();
        f(self);
        // The first field's comma is not wanted inside the braces.
        if self.0.get(at) == Some(&b',') {
            self.0.remove(at);
        }
        self.0.push(b'}');
    }
}

//! Sync objects: the dependency engine (MXNet's async engine, seed 002).
//!
//! A sync object holds at most one writer recording and at most one reader
//! recording per stream. An operation on stream S with read set R and write set W:
//! - begin: for r in R, S waits on r's writer unless it is on S or S already has a
//!   reader entry (which came after that writer, since writes clear readers); for w
//!   in W, S waits on w's writer and every reader not on S. Waits are deduplicated per
//!   source stream (newest only) and skip work known complete. The host never blocks.
//! - end: one event is recorded on S; reads replace S's reader entry, writes clear
//!   the readers and become the writer.
//!
//! Library ops (copies, launches, callbacks) run begin/enqueue/end while holding the
//! objects' locks, taken in id order, so they are atomic with respect to each other.
//! Foreign ops (`op_begin`/`op_end`) are ordered at begin for their waits and at end
//! for publication.

use crate::device::next_id;
use crate::error::{Error, ErrorCode, Result};
use crate::event::{Publish, RecRef, Recording};
use crate::inline::Small;
use crate::objlock::ObjLock;
use crate::stream::Stream;
use smallvec::SmallVec;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

#[derive(Clone, Default)]
pub(crate) struct SyncState {
    pub(crate) writer: Option<RecRef>,
    pub(crate) readers: SmallVec<[RecRef; 2]>,
    /// A fresh stream-ordered allocation: valid only in this stream's order until
    /// the first write on it or the first use on another stream.
    pub(crate) alloc_on: Option<Arc<Stream>>,
    /// `stream::completions()` when completed recordings were last pruned.
    pruned_at: u64,
    /// The id of the live capture whose ops touched this object, 0 when none; the
    /// capture keeps its ops' recordings in its own copy of the state.
    pub(crate) capture: u64,
}

/// A per-object dependency record: stands for a buffer, or for foreign memory.
// The id and the state share one cache line.
#[repr(C, align(64))]
pub struct SyncObject {
    pub id: u64,
    pub(crate) state: ObjLock<SyncState>,
    /// The memory this object stands for, if sluice owns it (kept alive by graphs).
    pub(crate) owner: OnceLock<std::sync::Weak<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for SyncObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sync object #{}", self.id)
    }
}

/// Engine modes. `Sync` synchronises the host after every tracked op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EngineMode {
    Async = 0,
    Sync = 1,
}

/// The engine mode as a `u8`; `MODE_UNSET` until first read from `SLUICE_ENGINE`
/// or set (a plain static, so every op reads one byte).
static MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
const MODE_UNSET: u8 = u8::MAX;

#[cold]
fn mode_from_env() -> u8 {
    let m = match std::env::var("SLUICE_ENGINE").as_deref() {
        Ok("sync") => EngineMode::Sync,
        _ => EngineMode::Async,
    } as u8;
    // A mode set meanwhile wins.
    match MODE.compare_exchange(MODE_UNSET, m, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => m,
        Err(now) => now,
    }
}

/// The process-wide engine mode (from `SLUICE_ENGINE`, default async).
#[inline(always)]
pub fn engine_mode() -> EngineMode {
    let m = match MODE.load(Ordering::Relaxed) {
        MODE_UNSET => mode_from_env(),
        m => m,
    };
    if m == EngineMode::Sync as u8 {
        EngineMode::Sync
    } else {
        EngineMode::Async
    }
}

pub fn set_engine_mode(mode: EngineMode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

impl SyncObject {
    pub fn new() -> Arc<SyncObject> {
        Arc::new(SyncObject {
            id: next_id(),
            state: ObjLock::new(SyncState::default()),
            owner: OnceLock::new(),
        })
    }

    /// A sync object for memory just allocated in `stream`'s order.
    pub(crate) fn allocated_on(stream: &Arc<Stream>) -> Arc<SyncObject> {
        Arc::new(SyncObject {
            id: next_id(),
            state: ObjLock::new(SyncState {
                alloc_on: Some(stream.clone()),
                ..SyncState::default()
            }),
            owner: OnceLock::new(),
        })
    }

    /// Number of reader entries (at most one per stream).
    pub fn reader_count(&self) -> usize {
        self.state.lock().readers.len()
    }

    pub fn has_writer(&self) -> bool {
        self.state.lock().writer.is_some()
    }

    fn pending(&self, include_readers: bool, op: &str) -> Result<Vec<RecRef>> {
        let st = self.state.lock();
        if st.capture != 0 {
            let cid = st.capture;
            drop(st);
            crate::capture::poison(cid, op);
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                format!("{op} on {self:?} is not allowed while a capturing stream uses it"),
            ));
        }
        let mut v: Vec<RecRef> = st.writer.iter().cloned().collect();
        if include_readers {
            v.extend(st.readers.iter().cloned());
        }
        Ok(v)
    }

    /// Blocks until the last writer's work completed.
    pub fn wait_read(&self) -> Result<()> {
        for r in self.pending(false, "host wait_read")? {
            r.synchronize()?;
        }
        Ok(())
    }

    /// Blocks until the last writer's and every reader's work completed.
    pub fn wait_write(&self) -> Result<()> {
        for r in self.pending(true, "host wait_write")? {
            r.synchronize()?;
        }
        Ok(())
    }

    /// All outstanding recordings (writer and readers), for frees.
    pub(crate) fn outstanding(&self) -> Vec<RecRef> {
        let st = self.state.lock();
        st.writer.iter().chain(st.readers.iter()).cloned().collect()
    }
}

/// A sync object borrowed for one call, without touching its reference count:
/// from a caller's `&Arc` or from a handle-table slot read while pinned.
#[derive(Clone, Copy)]
pub struct ObjRef<'a> {
    ptr: NonNull<SyncObject>,
    _life: PhantomData<&'a SyncObject>,
}

impl<'a> ObjRef<'a> {
    #[inline(always)]
    pub fn new(obj: &'a Arc<SyncObject>) -> Self {
        ObjRef {
            ptr: NonNull::from(&**obj),
            _life: PhantomData,
        }
    }

    /// # Safety
    /// `obj` lives in an `Arc` that stays alive for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn in_arc(obj: &'a SyncObject) -> Self {
        ObjRef {
            ptr: NonNull::from(obj),
            _life: PhantomData,
        }
    }

    /// A counted reference, for keeping the object beyond the call.
    pub fn to_arc(self) -> Arc<SyncObject> {
        // SAFETY: every ObjRef points into a live Arc (see the constructors).
        unsafe {
            Arc::increment_strong_count(self.ptr.as_ptr());
            Arc::from_raw(self.ptr.as_ptr())
        }
    }
}

impl std::ops::Deref for ObjRef<'_> {
    type Target = SyncObject;
    #[inline(always)]
    fn deref(&self) -> &SyncObject {
        // SAFETY: alive for 'a (see the constructors).
        unsafe { self.ptr.as_ref() }
    }
}

/// One object of an op and how it is accessed: the object's address with the
/// write flag in bit 0 (objects are 64-byte aligned), so that an access is one word
/// and moving it never splits a store.
#[derive(Clone, Copy)]
pub struct Access<'a> {
    // The write flag's bit is free because objects are aligned.
    bits: usize,
    _life: PhantomData<&'a SyncObject>,
}

const _: () = assert!(std::mem::align_of::<SyncObject>() >= 2);

impl<'a> Access<'a> {
    #[inline(always)]
    pub fn new(obj: ObjRef<'a>, write: bool) -> Self {
        Access {
            bits: obj.ptr.as_ptr() as usize | write as usize,
            _life: PhantomData,
        }
    }

    #[inline(always)]
    pub fn obj(self) -> ObjRef<'a> {
        ObjRef {
            // SAFETY: made from a non-null, aligned pointer in `new`.
            ptr: unsafe { NonNull::new_unchecked((self.bits & !1) as *mut SyncObject) },
            _life: PhantomData,
        }
    }

    #[inline(always)]
    pub fn write(self) -> bool {
        self.bits & 1 != 0
    }

    /// The object's state. The caller holds the object's lock.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &'a mut SyncState {
        let obj: &'a SyncObject = unsafe { &*((self.bits & !1) as *const SyncObject) };
        // SAFETY: locked by the caller; each object appears once in a set.
        unsafe { obj.state.get() }
    }
}

/// An op's accesses, sorted by object id, each object once; inline for up to 4
/// objects (no allocation on the common path).
pub struct AccessSet<'a>(Small<Access<'a>, 4>);

impl<'a> AccessSet<'a> {
    /// Room for `n` accesses.
    #[inline(always)]
    pub fn with_capacity(n: usize) -> Self {
        AccessSet(Small::with_capacity(n))
    }

    #[inline(always)]
    pub fn push(&mut self, obj: ObjRef<'a>, write: bool) {
        self.0.push(Access::new(obj, write));
    }

    /// Sorts by id and merges duplicates; an object both read and written is a write.
    #[inline(always)]
    pub fn normalize(&mut self) {
        let v = &mut *self.0;
        let id = |a: &Access<'_>| a.obj().id;
        match v.len() {
            0 | 1 => {}
            // The common two-object op, without the general sort and dedup.
            2 => match id(&v[0]).cmp(&id(&v[1])) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Greater => v.swap(0, 1),
                std::cmp::Ordering::Equal => {
                    v[0].bits |= v[1].bits & 1;
                    self.0.truncate(1);
                }
            },
            _ => {
                v.sort_unstable_by_key(|a| (id(a), !a.write()));
                let mut kept = 1;
                for i in 1..v.len() {
                    if id(&v[i]) != id(&v[kept - 1]) {
                        v[kept] = v[i];
                        kept += 1;
                    }
                }
                self.0.truncate(kept);
            }
        }
    }
}

impl<'a> std::ops::Deref for AccessSet<'a> {
    type Target = [Access<'a>];
    #[inline(always)]
    fn deref(&self) -> &[Access<'a>] {
        &self.0
    }
}

/// The recordings an op must wait on, newest per source stream. The pointers stay
/// valid while the objects they were read from stay locked and unchanged.
pub(crate) struct Waits {
    recs: Small<NonNull<Recording>, 4>,
    /// Recordings made while collecting, kept alive until the waits are issued.
    temps: Vec<RecRef>,
}

impl Waits {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Waits {
            recs: Small::new(),
            temps: Vec::new(),
        }
    }

    /// Adds `rec` unless an equal-or-newer one from its stream is there.
    #[inline(always)]
    fn add(&mut self, rec: &Recording) {
        // SAFETY: every stored pointer is still valid (see the type's doc).
        let get = |p: &NonNull<Recording>| unsafe { p.as_ref() };
        match self
            .recs
            .iter_mut()
            .find(|r| get(r).stream_id() == rec.stream_id())
        {
            Some(r) if get(r).seq >= rec.seq => {}
            Some(r) => *r = NonNull::from(rec),
            None => self.recs.push(NonNull::from(rec)),
        }
    }

    /// Adds a recording made while collecting.
    fn add_temp(&mut self, rec: RecRef) {
        let p = NonNull::from(&*rec);
        self.temps.push(rec);
        // SAFETY: the node behind `p` is kept alive by `temps`.
        self.add(unsafe { p.as_ref() });
    }
}

/// The access set of `reads` and `writes` given as `Arc`s.
#[inline(always)]
pub fn access_set<'a>(
    reads: &'a [Arc<SyncObject>],
    writes: &'a [Arc<SyncObject>],
) -> AccessSet<'a> {
    let mut v = AccessSet::with_capacity(reads.len() + writes.len());
    for (objs, write) in [(reads, false), (writes, true)] {
        for o in objs {
            v.push(ObjRef::new(o), write);
        }
    }
    v.normalize();
    v
}

/// The objects of a set, locked in the set's (id) order; unlocked on drop.
struct Locked<'s, 'a> {
    set: &'s [Access<'a>],
}

impl<'s, 'a> Locked<'s, 'a> {
    #[inline(always)]
    fn new(set: &'s [Access<'a>]) -> Self {
        for a in set {
            a.obj().state_lock().lock_raw();
        }
        Locked { set }
    }
}

impl Drop for Locked<'_, '_> {
    #[inline(always)]
    fn drop(&mut self) {
        for a in self.set {
            // SAFETY: locked in `new`.
            unsafe { a.obj().state_lock().unlock() };
        }
    }
}

impl<'a> ObjRef<'a> {
    #[inline(always)]
    fn state_lock(self) -> &'a ObjLock<SyncState> {
        // SAFETY: alive for 'a (see the constructors).
        unsafe { &(*self.ptr.as_ptr()).state }
    }
}

/// Adds to `need` what an op on stream `me` waits for before accessing an object in
/// state `st`: for a write, the writer and every reader of other streams; for a
/// read, the writer of another stream, unless `me` already has a reader entry (it
/// was published after that writer, since writes clear the readers).
#[inline(always)]
pub(crate) fn waits_for(st: &SyncState, me: u64, write: bool, need: &mut Waits) {
    if write {
        for r in st.writer.iter().chain(st.readers.iter()) {
            if r.stream_id() != me {
                need.add(r);
            }
        }
    } else if !st.readers.iter().any(|r| r.stream_id() == me) {
        if let Some(w) = st.writer.as_ref().filter(|w| w.stream_id() != me) {
            need.add(w);
        }
    }
}

/// Publishes `rec`, recorded on stream `me` after an access, into `st`: a write
/// clears the readers and becomes the writer; a read replaces `me`'s reader entry.
/// Replaced references go to `publish`.
#[inline(always)]
pub(crate) fn publish_into(
    st: &mut SyncState,
    me: u64,
    write: bool,
    rec: RecRef,
    publish: &mut Publish<'_>,
) {
    if write {
        while let Some(old) = st.readers.pop() {
            publish.release(old);
        }
        if let Some(old) = st.writer.replace(rec) {
            publish.release(old);
        }
    } else {
        match st.readers.iter_mut().find(|x| x.stream_id() == me) {
            Some(slot) => {
                // Recorded and published under the object's lock and the stream's
                // push lock, so the entry it replaces is older.
                debug_assert!(slot.seq < rec.seq, "a reader entry went backwards");
                publish.release(std::mem::replace(slot, rec))
            }
            None => st.readers.push(rec),
        }
    }
}

/// Drops the recordings of `st` known complete (through a host wait), when some
/// stream's completion advanced since the last look. Every reader was recorded after
/// the writer it saw, so a completed reader means a completed writer too.
#[inline(always)]
fn prune(st: &mut SyncState) {
    let completions = crate::event::completions();
    if st.pruned_at != completions {
        st.pruned_at = completions;
        let before = st.readers.len();
        st.readers.retain(|r| !r.known_complete());
        if st.readers.len() < before || st.writer.as_ref().is_some_and(|w| w.known_complete()) {
            st.writer = None;
        }
    }
}

/// Collects the recordings `stream` must wait on before the op's accesses.
#[inline(always)]
fn collect_waits(stream: &Stream, locked: &Locked<'_, '_>, need: &mut Waits) -> Result<()> {
    let me = stream.id;
    for a in locked.set {
        // SAFETY: locked.
        let st = unsafe { a.state() };
        if let Some(home) = &st.alloc_on {
            if home.id != me && !home.is_capturing() {
                // Order this first foreign use after the allocation point.
                let rec = home.record(false)?;
                match &st.writer {
                    None => st.writer = Some(rec),
                    Some(_) => need.add_temp(rec),
                }
                st.alloc_on = None;
            } else if home.id == me && a.write() {
                st.alloc_on = None;
            }
        }
        prune(st);
        waits_for(st, me, a.write(), need);
    }
    Ok(())
}

/// Issues the waits; the states they were collected from are still locked.
/// Returns how many were issued; the caller counts them.
#[inline(always)]
pub(crate) fn issue_waits(stream: &Stream, need: &Waits) -> Result<u64> {
    for (i, r) in need.recs.iter().enumerate() {
        // SAFETY: collected under the locks the caller still holds.
        if let Err(e) = stream.wait_pushed(unsafe { r.as_ref() }) {
            stream.stats.waits.fetch_add(i as u64, Ordering::Relaxed);
            return Err(e);
        }
    }
    Ok(need.recs.len() as u64)
}

/// The part of an op that touches the stream, under its push lock so that the
/// op's waits, its work and its recording are contiguous on the stream: issues the
/// waits, runs `enqueue`, records one event with one reference per object (plus one
/// when `keep`), and hands it to `publish_all` with the push lock still held.
#[inline(always)]
pub(crate) fn push_op(
    stream: &Stream,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    let mut push = stream.push_lock();
    let waits = issue_waits(stream, need)?;
    let refs = objects + keep as usize;
    let rec = match enqueue().and_then(|()| stream.record_in(&mut push, false, refs, waits)) {
        Ok(r) => r,
        Err(e) => {
            stream.stats.waits.fetch_add(waits, Ordering::Relaxed);
            return Err(e);
        }
    };
    let mut publish = Publish::new(stream, push);
    publish_all(&rec, &mut publish);
    if keep {
        Ok(Some(rec))
    } else {
        // `objects` references went to the objects; this one was never counted.
        std::mem::forget(rec);
        Ok(None)
    }
}

#[inline(always)]
fn after_op(stream: &Stream) -> Result<()> {
    if engine_mode() == EngineMode::Sync && !stream.is_capturing() {
        stream.stats.engine_syncs.fetch_add(1, Ordering::Relaxed);
        stream.synchronize()?;
    }
    Ok(())
}

/// Runs one tracked op atomically: waits, `enqueue`, one recording, publication.
/// With no objects there is nothing to order or publish, so nothing is recorded.
#[inline(always)]
pub fn run_op(
    stream: &Stream,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    run_op_inner(stream, set, enqueue, false).map(drop)
}

/// [`run_op`], also returning the op's recording (None when nothing was recorded).
#[inline(always)]
pub fn run_op_recorded(
    stream: &Stream,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<Option<RecRef>> {
    run_op_inner(stream, set, enqueue, true)
}

#[inline(always)]
fn run_op_inner(
    stream: &Stream,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
    keep: bool,
) -> Result<Option<RecRef>> {
    if set.is_empty() {
        stream.push(enqueue)?;
        after_op(stream)?;
        return Ok(None);
    }
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return cap.run_op(stream, set, enqueue, keep);
        }
    }
    let me = stream.id;
    let rec = {
        let locked = Locked::new(set);
        let mut need = Waits::new();
        collect_waits(stream, &locked, &mut need)?;
        push_op(stream, &need, set.len(), keep, enqueue, |rec, publish| {
            for a in locked.set {
                // SAFETY: locked; the reference is one of the `objects` counted.
                publish_into(
                    unsafe { a.state() },
                    me,
                    a.write(),
                    unsafe { rec.dup_counted() },
                    publish,
                );
            }
        })?
    };
    after_op(stream)?;
    Ok(rec)
}

/// Begins a foreign op: issues the waits for its accesses (with the objects
/// locked, so the waits are ordered against library ops on them).
#[inline(always)]
pub fn op_begin(stream: &Stream, set: &[Access<'_>]) -> Result<()> {
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return cap.op_begin(stream, set);
        }
    }
    let locked = Locked::new(set);
    let mut need = Waits::new();
    collect_waits(stream, &locked, &mut need)?;
    let waits = {
        let _push = stream.push_lock();
        issue_waits(stream, &need)?
    };
    stream.stats.waits.fetch_add(waits, Ordering::Relaxed);
    Ok(())
}

/// Ends a foreign op: records one event and publishes it, with the objects locked
/// from before the record until after the publication, as library ops do. (Recording
/// first and locking afterwards let another op on the stream publish a newer
/// reader in between, which this op's older one then overwrote.)
#[inline(always)]
pub fn op_end(stream: &Stream, set: &[Access<'_>]) -> Result<()> {
    if set.is_empty() {
        return after_op(stream);
    }
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            cap.op_end(stream, set)?;
            return after_op(stream);
        }
    }
    let me = stream.id;
    {
        let locked = Locked::new(set);
        push_op(
            stream,
            &Waits::new(),
            set.len(),
            false,
            || Ok(()),
            |rec, publish| {
                for a in locked.set {
                    // SAFETY: locked; the reference is one of the `objects` counted.
                    publish_into(
                        unsafe { a.state() },
                        me,
                        a.write(),
                        unsafe { rec.dup_counted() },
                        publish,
                    );
                }
            },
        )?;
    }
    after_op(stream)
}

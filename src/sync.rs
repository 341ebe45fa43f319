//! Sync objects: the dependency record of one buffer or of foreign memory (at most
//! one writer recording and one reader recording per stream), the host waits on
//! them, and the access sets that ops declare. How an op waits and publishes is in
//! [`crate::engine`].

use crate::device::next_id;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::inline::Small;
use crate::objlock::ObjLock;
use crate::stream::Stream;
use smallvec::SmallVec;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

#[derive(Clone, Default)]
pub(crate) struct SyncState {
    pub(crate) writer: Option<RecRef>,
    pub(crate) readers: SmallVec<[RecRef; 2]>,
    /// A fresh stream-ordered allocation: valid only in this stream's order until
    /// the first write on it or the first use on another stream.
    pub(crate) alloc_on: Option<Arc<Stream>>,
    /// `stream::completions()` when completed recordings were last pruned.
    pub(crate) pruned_at: u64,
    /// The id of the live capture whose ops touched this object, 0 when none; the
    /// capture keeps its ops' recordings in its own copy of the state.
    pub(crate) capture: u64,
    /// Bumped by every publication (foreign ops compare it between begin and end).
    pub(crate) version: u64,
    /// Bumped by every published write (a foreign read compares it instead of
    /// reading the writer's recording).
    pub(crate) writes: u64,
    /// Foreign ops open now (begun, not ended) that read / write the object.
    pub(crate) open_reads: u32,
    pub(crate) open_writes: u32,
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
    pub(crate) unsafe fn state(&self) -> &'a mut SyncState {
        let obj: &'a SyncObject = unsafe { &*((self.bits & !1) as *const SyncObject) };
        // SAFETY: locked by the caller; each object appears once in a set.
        unsafe { obj.state.get() }
    }
}

/// An op's accesses, sorted by object id, each object once; inline for up to `N`
/// objects (no allocation on the common path).
pub struct AccessSet<'a, const N: usize = 4>(Small<Access<'a>, N>);

impl<'a> AccessSet<'a> {
    /// Room for `n` accesses.
    #[inline(always)]
    pub fn with_capacity(n: usize) -> Self {
        AccessSet::with_room(n)
    }
}

impl<'a, const N: usize> AccessSet<'a, N> {
    /// Room for `n` accesses (inline up to `N`).
    #[inline(always)]
    pub(crate) fn with_room(n: usize) -> Self {
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
            // Already strictly increasing (objects named in creation order): done.
            _ if v.windows(2).all(|w| id(&w[0]) < id(&w[1])) => {}
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

impl<'a, const N: usize> std::ops::Deref for AccessSet<'a, N> {
    type Target = [Access<'a>];
    #[inline(always)]
    fn deref(&self) -> &[Access<'a>] {
        &self.0
    }
}

/// Objects an owned set holds inline: an open foreign op of up to this many
/// objects allocates nothing for them.
pub(crate) const OWNED_INLINE: usize = 16;

/// A normalised access set that holds one counted reference to each of its
/// objects, for an op that outlives the call that named them (an open foreign op).
pub struct OwnedAccessSet(AccessSet<'static, OWNED_INLINE>);

impl OwnedAccessSet {
    /// Takes a counted reference to each object of `set` (normalised by the caller).
    #[inline(always)]
    pub fn new(set: AccessSet<'_, OWNED_INLINE>) -> Self {
        for a in set.iter() {
            // SAFETY: every access points into a live Arc (see ObjRef's constructors).
            unsafe { Arc::increment_strong_count(a.obj().ptr.as_ptr()) };
        }
        // SAFETY: each object now lives while its counted reference, dropped with
        // the set, does; `get` lends the accesses for no longer than the set.
        OwnedAccessSet(unsafe {
            std::mem::transmute::<AccessSet<'_, OWNED_INLINE>, AccessSet<'static, OWNED_INLINE>>(
                set,
            )
        })
    }

    /// The set of `reads` and `writes` (an object in both counts as written).
    pub fn of(reads: &[Arc<SyncObject>], writes: &[Arc<SyncObject>]) -> Self {
        Self::new(access_set_n(reads, writes))
    }

    /// The accesses, valid while the set is.
    #[inline(always)]
    pub fn get(&self) -> &[Access<'_>] {
        &self.0
    }
}

impl Drop for OwnedAccessSet {
    #[inline(always)]
    fn drop(&mut self) {
        for a in self.0.iter() {
            // SAFETY: the reference taken in `new`, dropped once.
            unsafe { Arc::decrement_strong_count(a.obj().ptr.as_ptr()) };
        }
    }
}

impl<'a> ObjRef<'a> {
    #[inline(always)]
    pub(crate) fn state_lock(self) -> &'a ObjLock<SyncState> {
        // SAFETY: alive for 'a (see the constructors).
        unsafe { &(*self.ptr.as_ptr()).state }
    }
}

/// The access set of `reads` and `writes` given as `Arc`s.
#[inline(always)]
pub fn access_set<'a>(
    reads: &'a [Arc<SyncObject>],
    writes: &'a [Arc<SyncObject>],
) -> AccessSet<'a> {
    access_set_n(reads, writes)
}

#[inline(always)]
fn access_set_n<'a, const N: usize>(
    reads: &'a [Arc<SyncObject>],
    writes: &'a [Arc<SyncObject>],
) -> AccessSet<'a, N> {
    let mut v = AccessSet::with_room(reads.len() + writes.len());
    for (objs, write) in [(reads, false), (writes, true)] {
        for o in objs {
            v.push(ObjRef::new(o), write);
        }
    }
    v.normalize();
    v
}

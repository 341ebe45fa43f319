//! Access sets: the sync objects an op declares, each read or written, borrowed
//! for one call (`ObjRef`, `Access`, `AccessSet`) or held for an open foreign op
//! (`OwnedAccessSet`).

use super::{SyncCore, SyncObject};
use crate::inline::Small;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// A sync object borrowed for one call, without touching its reference count:
/// from a caller's `&Arc` or from a handle-table slot read while pinned (or, in an
/// open foreign op, kept alive by the op's open counts; see [`OwnedAccessSet`]).
/// Points to the object's core.
#[derive(Clone, Copy)]
pub struct ObjRef<'a> {
    ptr: NonNull<SyncCore>,
    _life: PhantomData<&'a SyncCore>,
}

impl<'a> ObjRef<'a> {
    #[inline(always)]
    pub fn new(obj: &'a Arc<SyncObject>) -> Self {
        ObjRef {
            ptr: obj.core,
            _life: PhantomData,
        }
    }

    /// # Safety
    /// `obj` lives in an `Arc` that stays alive for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn in_arc(obj: &'a SyncObject) -> Self {
        ObjRef {
            ptr: obj.core,
            _life: PhantomData,
        }
    }

    /// A counted reference, for keeping the object beyond the call. None when the
    /// object's last `Arc` is gone (only an open op's access can see that: its
    /// open count keeps the core, orphaned, until the op ends).
    pub fn to_arc(self) -> Option<Arc<SyncObject>> {
        self.arc.upgrade()
    }
}

impl std::ops::Deref for ObjRef<'_> {
    type Target = SyncCore;
    #[inline(always)]
    fn deref(&self) -> &SyncCore {
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
    _life: PhantomData<&'a SyncCore>,
}

const _: () = assert!(std::mem::align_of::<SyncCore>() >= 2);

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
            ptr: unsafe { NonNull::new_unchecked((self.bits & !1) as *mut SyncCore) },
            _life: PhantomData,
        }
    }

    #[inline(always)]
    pub fn write(self) -> bool {
        self.bits & 1 != 0
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

    /// Room for `additional` more accesses.
    #[inline(always)]
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.0.reserve(additional);
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

/// A normalised access set for an op that outlives the call that named its
/// objects (an open foreign op). Its objects stay alive in one of two ways:
/// - the op is counted open on every object (its reads in the reader slots, its
///   writes in the state, see [`crate::engine::op_begin`]): an object whose last
///   `Arc` goes meanwhile is orphaned, not freed, and the op's end frees it; the
///   set holds no reference, so a pair writes no line the object's other users
///   write;
/// - otherwise (an op begun in a capture) [`OwnedAccessSet::keep`] took one counted
///   reference to each object, dropped with the set.
pub struct OwnedAccessSet {
    set: AccessSet<'static, OWNED_INLINE>,
    kept: bool,
}

impl OwnedAccessSet {
    /// The set, holding nothing yet.
    ///
    /// # Safety
    /// Every object of `set` (normalised by the caller) stays alive until the op
    /// is counted open on it, or [`OwnedAccessSet::keep`] ran, or the set is
    /// dropped unused.
    #[inline(always)]
    pub(crate) unsafe fn borrowed(set: AccessSet<'_, OWNED_INLINE>) -> Self {
        OwnedAccessSet {
            // SAFETY: the caller's contract; `get` lends the accesses for no longer
            // than the set.
            set: unsafe {
                std::mem::transmute::<AccessSet<'_, OWNED_INLINE>, AccessSet<'static, OWNED_INLINE>>(
                    set,
                )
            },
            kept: false,
        }
    }

    /// An empty set, to be filled in place through [`OwnedAccessSet::fill`].
    #[inline(always)]
    pub(crate) fn empty() -> Self {
        OwnedAccessSet {
            set: AccessSet::with_room(0),
            kept: false,
        }
    }

    /// The set to fill in place (then normalised by the caller).
    ///
    /// # Safety
    /// As for [`OwnedAccessSet::borrowed`]: every object pushed stays alive until
    /// the op is counted open on it, or [`OwnedAccessSet::keep`] ran, or the set is
    /// dropped unused.
    #[inline(always)]
    pub(crate) unsafe fn fill<'g>(&mut self) -> &mut AccessSet<'g, OWNED_INLINE> {
        // SAFETY: only the lifetime changes; the caller's contract covers it.
        unsafe {
            &mut *(&mut self.set as *mut AccessSet<'static, OWNED_INLINE>)
                .cast::<AccessSet<'g, OWNED_INLINE>>()
        }
    }

    /// Takes a counted reference to each object, for an op not counted open on
    /// them. Once, while the objects are alive (under the caller's borrow).
    pub(crate) fn keep(&mut self) {
        debug_assert!(!self.kept);
        for a in self.set.iter() {
            // SAFETY: the object is alive (the contract of `borrowed`), so its
            // `Arc` has a strong count above 0.
            unsafe { Arc::increment_strong_count(a.obj().arc.as_ptr()) };
        }
        self.kept = true;
    }

    /// The accesses, valid while the set is (and, for a set that is not kept,
    /// while the op is counted open on them).
    #[inline(always)]
    pub fn get(&self) -> &[Access<'_>] {
        &self.set
    }
}

impl Drop for OwnedAccessSet {
    #[inline(always)]
    fn drop(&mut self) {
        if self.kept {
            for a in self.set.iter() {
                // SAFETY: the reference taken in `keep`, dropped once; the core
                // lives while its `Arc` does.
                unsafe { Arc::decrement_strong_count(a.obj().arc.as_ptr()) };
            }
        }
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
pub(crate) fn access_set_n<'a, const N: usize>(
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

//! A fixed-capacity vector on the stack, for the op path's small per-call sets.
//! Callers check the capacity first and take a `Vec` path above it, so both paths
//! share code written over slices.

use std::mem::MaybeUninit;

pub(crate) struct InlineVec<T, const N: usize> {
    len: usize,
    items: [MaybeUninit<T>; N],
}

impl<T, const N: usize> InlineVec<T, N> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        InlineVec {
            len: 0,
            items: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Appends `v`. The caller keeps the length within `N`.
    #[inline(always)]
    pub(crate) fn push(&mut self, v: T) {
        assert!(self.len < N, "InlineVec capacity exceeded");
        self.items[self.len].write(v);
        self.len += 1;
    }

    #[inline(always)]
    pub(crate) fn truncate(&mut self, len: usize) {
        while self.len > len {
            self.len -= 1;
            // SAFETY: items below the old length are initialised; the length
            // was lowered first, so a panicking drop cannot drop it twice.
            unsafe { self.items[self.len].assume_init_drop() };
        }
    }

    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` items are initialised.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), self.len) }
    }

    #[inline(always)]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the first `len` items are initialised.
        unsafe { std::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T, const N: usize> Drop for InlineVec<T, N> {
    #[inline(always)]
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            self.truncate(0);
        }
    }
}

/// Inline up to `N` items, on the heap above: a `SmallVec` reduced to what the op
/// path uses, so that indexing is a plain slice access after one branch.
pub(crate) enum Small<T, const N: usize> {
    Inline(InlineVec<T, N>),
    Heap(Vec<T>),
}

impl<T, const N: usize> Small<T, N> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Small::Inline(InlineVec::new())
    }

    /// Room for `n` items without spilling later.
    #[inline(always)]
    pub(crate) fn with_capacity(n: usize) -> Self {
        if n <= N {
            Small::new()
        } else {
            Small::Heap(Vec::with_capacity(n))
        }
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, v: T) {
        match self {
            Small::Inline(a) if a.len < N => a.push(v),
            _ => self.push_spilled(v),
        }
    }

    /// Room for `additional` more items without spilling later.
    #[inline(always)]
    pub(crate) fn reserve(&mut self, additional: usize) {
        match self {
            Small::Inline(a) if a.len + additional <= N => {}
            _ => self.reserve_spilled(additional),
        }
    }

    #[cold]
    fn reserve_spilled(&mut self, additional: usize) {
        match self {
            Small::Inline(a) => {
                let capacity = a.len + additional;
                self.spill(capacity);
            }
            Small::Heap(h) => h.reserve(additional),
        }
    }

    #[cold]
    fn push_spilled(&mut self, v: T) {
        self.spill(2 * N);
        if let Small::Heap(h) = self {
            h.push(v);
        }
    }

    /// Moves inline items to the heap, with room for `capacity` (a heap set stays).
    fn spill(&mut self, capacity: usize) {
        if let Small::Inline(a) = self {
            let mut heap = Vec::with_capacity(capacity);
            let n = std::mem::replace(&mut a.len, 0);
            for item in &mut a.items[..n] {
                // SAFETY: initialised below the old length, which is now 0, so
                // each item is moved out exactly once.
                heap.push(unsafe { item.assume_init_read() });
            }
            *self = Small::Heap(heap);
        }
    }

    #[inline(always)]
    pub(crate) fn truncate(&mut self, len: usize) {
        match self {
            Small::Inline(a) => a.truncate(len),
            Small::Heap(h) => h.truncate(len),
        }
    }
}

impl<T, const N: usize> std::ops::Deref for Small<T, N> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        match self {
            Small::Inline(a) => a.as_slice(),
            Small::Heap(h) => h,
        }
    }
}

impl<T, const N: usize> std::ops::DerefMut for Small<T, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Small::Inline(a) => a.as_mut_slice(),
            Small::Heap(h) => h,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{InlineVec, Small};

    #[test]
    fn small_spills_to_the_heap_keeping_order_and_counts() {
        let probe = std::rc::Rc::new(());
        let mut v: Small<(u32, std::rc::Rc<()>), 2> = Small::new();
        for i in 0..5 {
            v.push((i, probe.clone()));
        }
        assert!(matches!(v, Small::Heap(_)));
        assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(std::rc::Rc::strong_count(&probe), 6);
        v.truncate(2);
        assert_eq!(std::rc::Rc::strong_count(&probe), 3);
        drop(v);
        assert_eq!(std::rc::Rc::strong_count(&probe), 1);
        assert!(matches!(Small::<u8, 2>::with_capacity(3), Small::Heap(_)));
    }

    #[test]
    fn reserve_spills_once_keeping_what_it_holds() {
        let mut v: Small<u32, 2> = Small::new();
        v.reserve(2);
        assert!(matches!(v, Small::Inline(_)));
        v.push(7);
        v.reserve(5);
        let Small::Heap(h) = &v else {
            panic!("a reserve beyond N spills")
        };
        assert!(h.capacity() >= 6);
        let cap = h.capacity();
        for i in 0..5 {
            v.push(i);
        }
        assert_eq!(&*v, &[7, 0, 1, 2, 3, 4]);
        assert!(matches!(&v, Small::Heap(h) if h.capacity() == cap));
    }

    use std::rc::Rc;

    #[test]
    fn pushes_truncates_and_drops_what_it_holds() {
        let probe = Rc::new(());
        let mut v: InlineVec<Rc<()>, 3> = InlineVec::new();
        for _ in 0..3 {
            v.push(probe.clone());
        }
        assert_eq!(v.as_slice().len(), 3);
        assert_eq!(Rc::strong_count(&probe), 4);
        v.truncate(1);
        assert_eq!(Rc::strong_count(&probe), 2);
        v.as_mut_slice()[0] = Rc::new(());
        assert_eq!(Rc::strong_count(&probe), 1);
        v.push(probe.clone());
        drop(v);
        assert_eq!(Rc::strong_count(&probe), 1);
    }

    #[test]
    #[should_panic(expected = "capacity exceeded")]
    fn refuses_to_overflow() {
        let mut v: InlineVec<u8, 1> = InlineVec::new();
        v.push(1);
        v.push(2);
    }
}

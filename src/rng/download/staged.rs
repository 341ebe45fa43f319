//! The staged path: the caller's memory is pageable, so pieces go through pinned
//! slots (cached per device, bounded), two per thread: one copy is on the wire
//! while the thread moves the other slot's piece out and checksums it.

use super::pool::{pool, run};
use super::{copy_piece, finish, lock, threads_for, Dst, Failure, CHUNK};
use crate::device::Device;
use crate::error::Result;
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::stream::Stream;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Staged pieces, and the size of a slot.
const STAGED_PIECE: usize = 1 << 20;
/// Slots kept per device between calls (16 MiB of pinned memory at most).
const CACHED_SLOTS: usize = 16;

/// The staged path: each thread owns two pinned slots; it issues the copy of its
/// next piece into one while it moves the other's out and checksums it.
pub(super) fn into(
    src: &Buffer,
    io: &Stream,
    dst: usize,
    len: usize,
    crcs: &[AtomicU32],
) -> Result<()> {
    let pieces = len.div_ceil(STAGED_PIECE);
    let threads = if threads_for(len) && pieces > 1 {
        pool().prewake();
        pool().helpers() + 1
    } else {
        1
    }
    .min(pieces);
    let mut slots = SlotLease::take(&io.device, 2 * threads)?;
    let next = AtomicUsize::new(0);
    let who = AtomicUsize::new(0);
    let fail = Failure::default();
    let dst = Dst(dst);
    let per_chunk = STAGED_PIECE / CHUNK;
    let slot_list = &slots.slots;
    // Claims the next piece and issues its copy into `slot`.
    let issue = |slot: &Arc<Buffer>| -> Option<(usize, Option<RecRef>)> {
        if fail.any() {
            return None;
        }
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= pieces {
            return None;
        }
        let off = k * STAGED_PIECE;
        let n = (len - off).min(STAGED_PIECE);
        match copy_piece(src, io, off, slot.addr, n, Some(slot)) {
            Ok(r) => Some((k, r)),
            Err(e) => {
                fail.set(e);
                None
            }
        }
    };
    let work = || {
        let me = who.fetch_add(1, Ordering::Relaxed);
        if 2 * me + 2 > slot_list.len() {
            return; // more threads came than slots were taken for
        }
        let (mut a, mut b) = (&slot_list[2 * me], &slot_list[2 * me + 1]);
        let mut cur = issue(a);
        while let Some((k, rec)) = cur {
            let nxt = issue(b);
            if let Some(r) = &rec {
                if let Err(e) = r.synchronize() {
                    fail.set(e);
                    return;
                }
            }
            let off = k * STAGED_PIECE;
            let n = (len - off).min(STAGED_PIECE);
            let host = a.host_ptr().expect("pinned memory has a host address");
            for c in 0..n.div_ceil(CHUNK) {
                let at = c * CHUNK;
                let m = (n - at).min(CHUNK);
                // SAFETY: the copy into slot `a` completed and the slot is this
                // thread's alone until it issues into it again.
                let from = unsafe { std::slice::from_raw_parts(host.add(at) as *const u8, m) };
                // SAFETY: piece k is this thread's alone (claimed in `issue`).
                let to = unsafe { dst.slice(off + at, m) };
                crcs[k * per_chunk + c].store(copy_and_crc(to, from), Ordering::Relaxed);
            }
            std::mem::swap(&mut a, &mut b);
            cur = nxt;
        }
    };
    let panicked = run(threads > 1, &work);
    let (r, drained) = finish(io, panicked, &fail);
    // Where copies into the slots may still be in flight, they are not handed out
    // again (dropping them waits for their recorded uses before the memory is reused).
    slots.keep = drained;
    r
}

/// Copies `from` into `to` and returns the CRC32C of the bytes, in blocks small
/// enough that the checksum reads them from the cache the copy just filled.
fn copy_and_crc(to: &mut [u8], from: &[u8]) -> u32 {
    const BLOCK: usize = 32 << 10;
    let mut crc = 0;
    for (t, f) in to.chunks_mut(BLOCK).zip(from.chunks(BLOCK)) {
        t.copy_from_slice(f);
        crc = crc32c::crc32c_append(crc, f);
    }
    crc
}

type SlotCache = Mutex<Vec<((u32, u32), Vec<Arc<Buffer>>)>>;

fn slot_cache() -> &'static SlotCache {
    static CACHE: OnceLock<SlotCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Pinned slots of [`STAGED_PIECE`] bytes, taken from the device's cache (or
/// allocated) for one download and given back after it.
struct SlotLease {
    key: (u32, u32),
    slots: Vec<Arc<Buffer>>,
    keep: bool,
}

impl SlotLease {
    fn take(device: &Arc<Device>, n: usize) -> Result<SlotLease> {
        let key = (device.kind() as u32, device.ordinal());
        let taken = {
            let mut c = lock(slot_cache());
            match c.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => {
                    let at = v.len().saturating_sub(n);
                    v.split_off(at)
                }
                None => Vec::new(),
            }
        };
        // On failure, the slots taken so far go back to the cache with `lease`.
        let mut lease = SlotLease {
            key,
            slots: taken,
            keep: true,
        };
        while lease.slots.len() < n {
            lease
                .slots
                .push(Buffer::alloc_pinned(device, STAGED_PIECE)?);
        }
        Ok(lease)
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        if !self.keep || self.slots.is_empty() {
            return;
        }
        let mut c = lock(slot_cache());
        let v = match c.iter().position(|(k, _)| *k == self.key) {
            Some(i) => &mut c[i].1,
            None => {
                c.push((self.key, Vec::new()));
                &mut c.last_mut().expect("just pushed").1
            }
        };
        let room = CACHED_SLOTS.saturating_sub(v.len());
        v.extend(self.slots.drain(..).take(room));
    }
}

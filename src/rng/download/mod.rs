//! Checkpoint downloads (issue 13): the states copied device to host in pieces on
//! the device's io stream, each piece one op with its own recording, and
//! checksummed (CRC32C) on host threads while later pieces are on the wire.
//!
//! Two paths, by where the bytes go:
//! - **direct**: the caller's buffer is page-locked (the backend says so): every
//!   piece is copied straight into it, all issued at once; host threads checksum
//!   each chunk of it once its piece's copy completed. Pieces shrink towards the
//!   end, so that little CRC work is left after the last copy.
//! - **staged**: pageable memory: pieces go through pinned slots (cached per
//!   device, bounded), two per thread, so that one copy is on the wire while the
//!   thread moves the other slot's piece out and checksums it.
//!
//! Into page-locked memory on CUDA, the states come instead in one bulk copy, with
//! the CRC32C computed by a kernel beside it (`direct.rs`).
//!
//! The checksum runs in chunks of [`CHUNK`] bytes, so that the last piece's work is
//! spread over the threads and the tail after the last copy is short; the chunks'
//! CRCs are folded with a precomputed shift operator. The threads are a small pool,
//! started once, that spin a while between jobs instead of sleeping (a sleeping
//! core's wake-up can outlast a small checkpoint's copy); small checkpoints stay on
//! the calling thread. Waits for copies poll their recordings. On any error,
//! everything issued is waited for before the error is returned: nothing stays in
//! flight into the caller's buffer or a slot.
//!
//! Files: `direct.rs` and `staged.rs` hold the two paths, `pool.rs` the helper
//! threads; the CRC arithmetic is `rng/crc.rs`.

mod direct;
mod pool;
mod staged;

use crate::counters::CopyDir;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::sync::access_set;
use crate::trace::OpKind;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::crc;
use super::device::DeviceCrc;
use pool::Spin;

/// The unit of host work: one CRC (and, staged, one move out of a slot).
pub(super) const CHUNK: usize = 32 << 10;
/// Up to this many bytes, one thread (the caller's) does all the host work.
const ONE_THREAD_MAX: usize = 256 << 10;
/// How long a wait for a copy polls before it blocks in the driver.
const POLL_SPIN: Duration = Duration::from_millis(1);

/// Copies `src` into `body` (device to host) on `io`, ordered after the last write
/// of `src` and nothing else, and returns the CRC32C continued from `crc` over it.
/// Where `body` and `word` (4 bytes) are page-locked and the device runs the CRC
/// kernel, `body` comes in one bulk copy and the checksum from the device, through
/// `word` (which then holds scratch bytes).
pub(crate) fn download_with_crc(
    src: &Buffer,
    io: &Stream,
    body: &mut [u8],
    crc: u32,
    word: &mut [u8],
) -> Result<u32> {
    let len = body.len();
    debug_assert!(len <= src.size);
    if len == 0 {
        return Ok(crc);
    }
    let direct = io.device.backend.host_ptr_is_pinned(body.as_ptr(), len);
    if direct && word.len() == 4 && io.device.backend.host_ptr_is_pinned(word.as_ptr(), 4) {
        if let Some(dc) = DeviceCrc::of(&io.device)? {
            let dst = body.as_mut_ptr() as u64;
            let raw = direct::with_device_crc(src, io, &dc, dst, len, word)?;
            return Ok(crc::append_raw(crc, raw, len));
        }
    }
    let chunks = len.div_ceil(CHUNK);
    let crcs: Vec<AtomicU32> = (0..chunks).map(|_| AtomicU32::new(0)).collect();
    let dst = body.as_mut_ptr() as usize;
    if direct {
        direct::into(src, io, dst, len, &crcs)?;
    } else {
        staged::into(src, io, dst, len, &crcs)?;
    }
    Ok(crc::fold(crc, &crcs, len))
}

/// The caller's bytes, shared by the threads; each writes or reads disjoint ranges
/// only, after the copy into them completed.
#[derive(Clone, Copy)]
pub(super) struct Dst(usize);

impl Dst {
    /// # Safety
    /// `[off, off+len)` lies in the caller's buffer, its copy completed, and no
    /// other thread touches it meanwhile.
    pub(super) unsafe fn slice<'a>(self, off: usize, len: usize) -> &'a mut [u8] {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts_mut((self.0 + off) as *mut u8, len) }
    }
}

/// The first error of any thread; the others stop at their next step.
#[derive(Default)]
pub(super) struct Failure {
    failed: AtomicBool,
    first: Mutex<Option<Error>>,
}

impl Failure {
    pub(super) fn set(&self, e: Error) {
        let mut f = self.first.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
        self.failed.store(true, Ordering::Release);
    }

    pub(super) fn any(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(super) fn take(&self) -> Option<Error> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// One D2H copy of `len` bytes of `src` at `off` to host address `to`, ordered
/// after `src`'s last write; `slot` is written too when given. Returns its
/// recording, or waits for it where none was kept.
pub(super) fn copy_piece(
    src: &Buffer,
    io: &Stream,
    off: usize,
    to: u64,
    len: usize,
    slot: Option<&Buffer>,
) -> Result<Option<RecRef>> {
    let from = src.range(off, len, "checkpoint")?;
    let r = [src.sync.clone()];
    let w = slot.map(|s| s.sync.clone());
    let w = w.as_slice();
    let rec = crate::engine::run_op_recorded(
        io,
        OpKind::Copy(CopyDir::D2H, len as u64),
        &access_set(&r, w),
        || io.device.backend.memcpy_async(to, from, len, io.raw()),
    )?;
    if rec.is_none() {
        io.synchronize()?;
    }
    Ok(rec)
}

/// Waits for everything issued on `io` after a failure (best effort: the first
/// error is the one reported).
pub(super) fn drain_after_failure(io: &Stream) -> bool {
    io.synchronize().is_ok()
}

pub(super) fn threads_for(len: usize) -> bool {
    len > ONE_THREAD_MAX
}

/// Which of one stream's copies completed. They run in order, so a copy's
/// completion implies every earlier one's. One thread at a time polls the driver;
/// the others spin on `through`.
pub(super) struct Landed<'a> {
    recs: &'a [Option<RecRef>],
    /// Pieces `[0, through)` completed.
    through: AtomicUsize,
    polling: AtomicBool,
}

impl<'a> Landed<'a> {
    pub(super) fn new(recs: &'a [Option<RecRef>]) -> Self {
        Landed {
            recs,
            through: AtomicUsize::new(0),
            polling: AtomicBool::new(false),
        }
    }

    /// Waits until piece `k` completed: true; false when another thread failed.
    /// Polls for up to [`POLL_SPIN`], then blocks in the driver.
    pub(super) fn wait(&self, k: usize, fail: &Failure) -> Result<bool> {
        let mut spin = Spin::new();
        loop {
            if self.through.load(Ordering::Acquire) > k {
                return Ok(true);
            }
            if fail.any() {
                return Ok(false);
            }
            let Some(r) = &self.recs[k] else {
                break; // waited for when issued
            };
            if spin.elapsed() >= POLL_SPIN {
                r.synchronize()?;
                break;
            }
            if !self.polling.swap(true, Ordering::Acquire) {
                let q = r.query();
                self.polling.store(false, Ordering::Release);
                if q? {
                    r.pool.peek_deferred()?;
                    break;
                }
            }
            spin.pause();
        }
        crate::atomic_max::fetch_max_usize(&self.through, k + 1, Ordering::Release);
        Ok(true)
    }
}

/// After the threads: the first error, with everything issued waited for; and
/// whether nothing can be in flight any more.
pub(super) fn finish(io: &Stream, panicked: bool, fail: &Failure) -> (Result<()>, bool) {
    let err = fail.take().or_else(|| {
        panicked.then(|| Error::new(ErrorCode::Panic, "a checkpoint download thread panicked"))
    });
    match err {
        None => (Ok(()), true),
        Some(e) => {
            let drained = drain_after_failure(io);
            (Err(e), drained)
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

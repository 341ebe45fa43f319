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
//! The checksum runs in chunks of [`CHUNK`] bytes, so that the last piece's work is
//! spread over the threads and the tail after the last copy is short; the chunks'
//! CRCs are folded with a precomputed shift operator. The threads are a small pool,
//! started once, that spin a while between jobs instead of sleeping (a sleeping
//! core's wake-up can outlast a small checkpoint's copy); small checkpoints stay on
//! the calling thread. Waits for copies poll their recordings. On any error,
//! everything issued is waited for before the error is returned: nothing stays in
//! flight into the caller's buffer or a slot.

use crate::counters::CopyDir;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::event::RecRef;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::sync::access_set;
use crate::trace::OpKind;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The unit of host work: one CRC (and, staged, one move out of a slot).
pub(crate) const CHUNK: usize = 32 << 10;
/// Direct pieces, from the end: the last one this big, each earlier one twice the
/// next, up to the max.
const LAST_PIECE: usize = 256 << 10;
const DIRECT_PIECE_MAX: usize = 16 << 20;
/// Staged pieces, and the size of a slot.
pub(crate) const STAGED_PIECE: usize = 1 << 20;
/// Slots kept per device between calls (16 MiB of pinned memory at most).
const CACHED_SLOTS: usize = 16;
/// Up to this many bytes, one thread (the caller's) does all the host work.
const ONE_THREAD_MAX: usize = 256 << 10;
/// Threads taking part at most, the caller included.
const MAX_THREADS: usize = 8;
/// How long a helper spins for the next job before it sleeps.
const IDLE_SPIN: Duration = Duration::from_micros(500);
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
        if let Some(crc_stream) = super::device::crc_stream(&io.device)? {
            let dst = body.as_mut_ptr() as u64;
            let raw = direct_device_crc(src, io, &crc_stream, dst, len, word)?;
            return Ok(append_raw(crc, raw, len));
        }
    }
    let chunks = len.div_ceil(CHUNK);
    let crcs: Vec<AtomicU32> = (0..chunks).map(|_| AtomicU32::new(0)).collect();
    let dst = body.as_mut_ptr() as usize;
    if direct {
        direct_into(src, io, dst, len, &crcs)?;
    } else {
        staged_into(src, io, dst, len, &crcs)?;
    }
    Ok(fold(crc, &crcs, len))
}

/// The CRC32C continued from `crc` over `len` bytes whose raw CRC (zero initial
/// value, no final XOR) is `raw`: the register `!crc` carried past `len` bytes,
/// plus `raw`.
fn append_raw(crc: u32, raw: u32, len: usize) -> u32 {
    !(super::device::crc_shift(!crc, len) ^ raw)
}

/// The direct path with the checksum on the device: one bulk copy into the
/// caller's page-locked `dst` on `io`; beside it, on `crc_stream`, the CRC kernel
/// over the same bytes into a zeroed device word, copied into `word`. Both wait
/// for the last write of `src` and nothing else. Returns the raw CRC.
fn direct_device_crc(
    src: &Buffer,
    io: &Stream,
    crc_stream: &Arc<Stream>,
    dst: u64,
    len: usize,
    word: &mut [u8],
) -> Result<u32> {
    let data = src.range(0, len, "checkpoint")?;
    let copied = copy_piece(src, io, 0, dst, len, None)?;
    let scratch = match Buffer::alloc(crc_stream, 4) {
        Ok(b) => b,
        Err(e) => {
            drain_after_failure(io);
            return Err(e);
        }
    };
    let summed = (|| {
        crate::ops::memset(crc_stream, &scratch, 0, 0, 4)?;
        let (r, w) = ([src.sync.clone()], [scratch.sync.clone()]);
        if !super::device::crc32c_raw(crc_stream, data, len, scratch.addr, &access_set(&r, &w))? {
            return Err(Error::new(
                ErrorCode::Unsupported,
                "the RNG kernels have no CRC kernel",
            ));
        }
        let r = [scratch.sync.clone()];
        let set = access_set(&r, &[]);
        let to = word.as_mut_ptr() as u64;
        crate::engine::run_op_recorded(crc_stream, OpKind::Copy(CopyDir::D2H, 4), &set, || {
            let backend = &crc_stream.device.backend;
            backend.memcpy_async(to, scratch.addr, 4, crc_stream.raw())
        })
    })();
    let recs = match summed {
        Ok(rec) => [copied, rec],
        Err(e) => {
            drain_after_failure(io);
            drain_after_failure(crc_stream);
            return Err(e);
        }
    };
    let landed = Landed::new(&recs);
    let fail = Failure::default();
    for k in 0..recs.len() {
        if let Err(e) = landed.wait(k, &fail) {
            drain_after_failure(io);
            drain_after_failure(crc_stream);
            return Err(e);
        }
    }
    if recs[1].is_none() {
        crc_stream.synchronize()?;
    }
    Ok(u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
}

/// Continues `crc` over the chunks' CRCs, in order. Full groups of [`GROUP`]
/// chunks fold alone first (chains the CPU overlaps), then into `crc`.
fn fold(mut crc: u32, crcs: &[AtomicU32], len: usize) -> u32 {
    let (one, group) = shifts();
    let groups = len / (GROUP * CHUNK);
    for g in crcs.chunks_exact(GROUP).take(groups) {
        let x = g
            .iter()
            .fold(0, |x, c| one.apply(x) ^ c.load(Ordering::Relaxed));
        crc = group.apply(crc) ^ x;
    }
    for (j, c) in crcs.iter().enumerate().skip(groups * GROUP) {
        let c = c.load(Ordering::Relaxed);
        let n = (len - j * CHUNK).min(CHUNK);
        crc = if n == CHUNK {
            one.apply(crc) ^ c
        } else {
            super::device::crc_shift(crc, n) ^ c
        };
    }
    crc
}

/// Chunks folded alone before they join the whole.
const GROUP: usize = 8;

/// `crc32c_combine(a, b, CHUNK) == apply(a) ^ b`: appending `CHUNK` bytes to a
/// stream is a linear map on its CRC (zlib's combine is exactly that map, then the
/// XOR), here as four byte tables.
struct Shift([[u32; 256]; 4]);

impl Shift {
    fn new(len: usize) -> Shift {
        let col: [u32; 32] = std::array::from_fn(|i| crc32c::crc32c_combine(1 << i, 0, len));
        let mut t = [[0u32; 256]; 4];
        for (b, table) in t.iter_mut().enumerate() {
            for (v, e) in table.iter_mut().enumerate() {
                *e = (0..8)
                    .filter(|bit| v >> bit & 1 == 1)
                    .fold(0, |acc, bit| acc ^ col[8 * b + bit]);
            }
        }
        Shift(t)
    }

    fn apply(&self, x: u32) -> u32 {
        let t = &self.0;
        t[0][(x & 0xff) as usize]
            ^ t[1][(x >> 8 & 0xff) as usize]
            ^ t[2][(x >> 16 & 0xff) as usize]
            ^ t[3][(x >> 24) as usize]
    }
}

/// The shifts over one chunk and over a group of chunks.
fn shifts() -> &'static (Shift, Shift) {
    static SHIFTS: OnceLock<(Shift, Shift)> = OnceLock::new();
    SHIFTS.get_or_init(|| (Shift::new(CHUNK), Shift::new(GROUP * CHUNK)))
}

/// The caller's bytes, shared by the threads; each writes or reads disjoint ranges
/// only, after the copy into them completed.
#[derive(Clone, Copy)]
struct Dst(usize);

impl Dst {
    /// # Safety
    /// `[off, off+len)` lies in the caller's buffer, its copy completed, and no
    /// other thread touches it meanwhile.
    unsafe fn slice<'a>(self, off: usize, len: usize) -> &'a mut [u8] {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts_mut((self.0 + off) as *mut u8, len) }
    }
}

/// The first error of any thread; the others stop at their next step.
#[derive(Default)]
struct Failure {
    failed: AtomicBool,
    first: Mutex<Option<Error>>,
}

impl Failure {
    fn set(&self, e: Error) {
        let mut f = self.first.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
        self.failed.store(true, Ordering::Release);
    }

    fn any(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn take(&self) -> Option<Error> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// One D2H copy of `len` bytes of `src` at `off` to host address `to`, ordered
/// after `src`'s last write; `slot` is written too when given. Returns its
/// recording, or waits for it where none was kept.
fn copy_piece(
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
fn drain_after_failure(io: &Stream) -> bool {
    io.synchronize().is_ok()
}

fn threads_for(len: usize) -> bool {
    len > ONE_THREAD_MAX
}

/// Runs `work` on this thread, and on the pool's helpers too with `parallel`.
/// True when a run of it panicked (never unwinds: the caller must wait for what
/// was issued before returning).
fn run(parallel: bool, work: &(dyn Fn() + Sync)) -> bool {
    if parallel {
        broadcast(work)
    } else {
        catch_unwind(AssertUnwindSafe(work)).is_err()
    }
}

/// The direct path: every piece copied straight into the caller's page-locked
/// buffer, then each chunk checksummed once its piece completed.
fn direct_into(
    src: &Buffer,
    io: &Stream,
    dst: usize,
    len: usize,
    crcs: &[AtomicU32],
) -> Result<()> {
    let parallel = threads_for(len);
    if parallel {
        pool().prewake(); // helpers wake while the copies are issued
    }
    let starts = direct_starts(len);
    let mut recs: Vec<Option<RecRef>> = Vec::with_capacity(starts.len());
    for (k, &off) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(len);
        match copy_piece(src, io, off, (dst + off) as u64, end - off, None) {
            Ok(r) => recs.push(r),
            Err(e) => {
                drain_after_failure(io);
                return Err(e);
            }
        }
    }
    let landed = Landed::new(&recs);
    let next = AtomicUsize::new(0);
    let fail = Failure::default();
    let dst = Dst(dst);
    let work = || {
        while !fail.any() {
            let j = next.fetch_add(1, Ordering::Relaxed);
            if j >= crcs.len() {
                break;
            }
            let off = j * CHUNK;
            let k = starts.partition_point(|&s| s <= off) - 1;
            match landed.wait(k, &fail) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    fail.set(e);
                    break;
                }
            }
            // SAFETY: chunk j lies in piece k, whose copy completed; chunk j is
            // this thread's alone (claimed above).
            let bytes = unsafe { dst.slice(off, (len - off).min(CHUNK)) };
            crcs[j].store(crc32c::crc32c(bytes), Ordering::Relaxed);
        }
    };
    let panicked = run(parallel, &work);
    finish(io, panicked, &fail).0
}

/// The direct pieces' offsets: from the end, [`LAST_PIECE`] bytes (and the partial
/// chunk), then each piece twice the next up to [`DIRECT_PIECE_MAX`]; a rest under
/// two pieces joins the first. Chunk-aligned, increasing, from 0.
fn direct_starts(len: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    let (mut end, mut size) = (len, LAST_PIECE);
    while end > 0 {
        end = if end < 2 * size {
            0
        } else {
            (end - size) / CHUNK * CHUNK
        };
        starts.push(end);
        size = (2 * size).min(DIRECT_PIECE_MAX);
    }
    starts.reverse();
    starts
}

/// Which direct pieces completed. They run in order on one stream, so a piece's
/// completion implies every earlier one's. One thread at a time polls the driver;
/// the others spin on `through`.
struct Landed<'a> {
    recs: &'a [Option<RecRef>],
    /// Pieces `[0, through)` completed.
    through: AtomicUsize,
    polling: AtomicBool,
}

impl<'a> Landed<'a> {
    fn new(recs: &'a [Option<RecRef>]) -> Self {
        Landed {
            recs,
            through: AtomicUsize::new(0),
            polling: AtomicBool::new(false),
        }
    }

    /// Waits until piece `k` completed: true; false when another thread failed.
    /// Polls for up to [`POLL_SPIN`], then blocks in the driver.
    fn wait(&self, k: usize, fail: &Failure) -> Result<bool> {
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
        self.through.fetch_max(k + 1, Ordering::Release);
        Ok(true)
    }
}

/// A busy wait.
struct Spin {
    t0: Instant,
    n: u32,
}

impl Spin {
    fn new() -> Spin {
        Spin {
            t0: Instant::now(),
            n: 0,
        }
    }

    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Stays on the core: for a thread holding claimed work (yielding to a busy
    /// core's other threads could park it for a whole time slice).
    fn pause(&mut self) {
        for _ in 0..16 {
            std::hint::spin_loop();
        }
    }

    /// Pauses at first, then yields: for a thread holding no work.
    fn relax(&mut self) {
        self.n = self.n.saturating_add(1);
        if self.n < 64 {
            self.pause();
        } else {
            std::thread::yield_now();
        }
    }

    /// Relaxes until `ready` (true) or `limit` passed (`ready` once more).
    fn until(limit: Duration, ready: impl Fn() -> bool) -> bool {
        let mut s = Spin::new();
        while !ready() {
            if s.elapsed() >= limit {
                return ready();
            }
            s.relax();
        }
        true
    }
}

/// After the threads: the first error, with everything issued waited for; and
/// whether nothing can be in flight any more.
fn finish(io: &Stream, panicked: bool, fail: &Failure) -> (Result<()>, bool) {
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

/// The staged path: each thread owns two pinned slots; it issues the copy of its
/// next piece into one while it moves the other's out and checksums it.
fn staged_into(
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A small pool of helper threads, started on first use, that run one job at a
/// time beside the thread that gave it. Between jobs a helper spins for
/// [`IDLE_SPIN`] before it sleeps, so that back-to-back jobs find it awake.
struct Pool {
    /// Helper threads started (set once, before the pool is used).
    helpers: AtomicUsize,
    busy: AtomicBool,
    /// Bumped under `job`'s lock for each job and each early wake-up.
    generation: AtomicU64,
    /// Helpers asleep on `wake` (changed under `job`'s lock).
    sleeping: AtomicUsize,
    /// Helpers inside the job (only ever raised under `job`'s lock while it is set).
    running: AtomicUsize,
    panicked: AtomicBool,
    /// The job, while its giver runs it; a helper that comes after the giver
    /// finished finds none.
    job: Mutex<Option<Job>>,
    wake: Condvar,
    done: Condvar,
}

impl Pool {
    fn helpers(&self) -> usize {
        self.helpers.load(Ordering::Relaxed)
    }

    /// Sets the job (unless one runs and `job` is None) and wakes the helpers.
    fn publish(&self, job: Option<Job>) {
        let mut j = lock(&self.job);
        if job.is_none() && j.is_some() {
            return; // another job runs: leave it
        }
        *j = job;
        self.generation.fetch_add(1, Ordering::Release);
        let sleepers = self.sleeping.load(Ordering::Relaxed) > 0;
        drop(j);
        if sleepers {
            self.wake.notify_all();
        }
    }

    /// Wakes sleeping helpers (to spin) ahead of a job.
    fn prewake(&self) {
        if self.helpers() > 0 && !self.busy.load(Ordering::Relaxed) {
            self.publish(None);
        }
    }
}

#[derive(Clone, Copy)]
struct Job(&'static (dyn Fn() + Sync));

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let want = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, MAX_THREADS)
            - 1;
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            helpers: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            sleeping: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            job: Mutex::new(None),
            wake: Condvar::new(),
            done: Condvar::new(),
        }));
        let started = (0..want)
            .take_while(|i| {
                std::thread::Builder::new()
                    .name(format!("sluice-ckpt-{i}"))
                    .spawn(move || helper(pool))
                    .is_ok()
            })
            .count();
        pool.helpers.store(started, Ordering::Relaxed);
        pool
    })
}

fn helper(pool: &'static Pool) {
    let mut seen = pool.generation.load(Ordering::Acquire);
    loop {
        let moved = || pool.generation.load(Ordering::Acquire) != seen;
        if !Spin::until(IDLE_SPIN, moved) {
            let mut j = lock(&pool.job);
            pool.sleeping.fetch_add(1, Ordering::Relaxed);
            while !moved() {
                j = pool.wake.wait(j).unwrap_or_else(|p| p.into_inner());
            }
            pool.sleeping.fetch_sub(1, Ordering::Relaxed);
        }
        let job = {
            let j = lock(&pool.job);
            seen = pool.generation.load(Ordering::Acquire);
            match *j {
                Some(job) => {
                    pool.running.fetch_add(1, Ordering::Relaxed);
                    job
                }
                None => continue,
            }
        };
        if catch_unwind(AssertUnwindSafe(job.0)).is_err() {
            pool.panicked.store(true, Ordering::Relaxed);
        }
        if pool.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock, so that a giver about to sleep on `done` hears it.
            drop(lock(&pool.job));
            pool.done.notify_all();
        }
    }
}

/// Runs `f` on the calling thread and on the pool's helpers that start before the
/// caller's own run returns (none while another job runs); returns once every run
/// of it returned. True when one panicked, the caller's included.
fn broadcast(f: &(dyn Fn() + Sync)) -> bool {
    let pool = pool();
    if pool.helpers() == 0 || pool.busy.swap(true, Ordering::Acquire) {
        return catch_unwind(AssertUnwindSafe(f)).is_err();
    }
    // SAFETY: the reference outlives every use: helpers take it only while `job`
    // holds it (raising `running` under its lock), and this function clears `job`
    // and waits for `running` to reach 0 before returning or unwinding.
    let job =
        Job(unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(f) });
    pool.panicked.store(false, Ordering::Relaxed);
    pool.publish(Some(job));
    let mine = catch_unwind(AssertUnwindSafe(f));
    *lock(&pool.job) = None;
    // Helpers still inside have a chunk left at most: spin, then sleep.
    let idle = || pool.running.load(Ordering::Acquire) == 0;
    if !Spin::until(IDLE_SPIN, idle) {
        let mut j = lock(&pool.job);
        while !idle() {
            j = pool.done.wait(j).unwrap_or_else(|p| p.into_inner());
        }
    }
    let panicked = pool.panicked.load(Ordering::Relaxed);
    pool.busy.store(false, Ordering::Release);
    panicked || mine.is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_shift_is_crc32c_combine_with_nothing_appended() {
        for (a, len) in [
            (0u32, 1usize),
            (0xFFFF_FFFF, 64),
            (0x1234_5678, 4 << 20),
            (7, 12345),
        ] {
            assert_eq!(
                super::super::device::crc_shift(a, len),
                crc32c::crc32c_combine(a, 0, len),
                "{a:#x} past {len}"
            );
        }
    }

    /// The device CRC kernel's arithmetic, on the CPU: each segment's raw CRC,
    /// shifted past the bytes after it (as the kernel does, with the same powers),
    /// XORed together, then continued from a header's CRC as serialize does.
    #[test]
    fn the_device_crc_scheme_gives_crc32c() {
        use super::super::device::{crc_segment, crc_shift};
        let raw = |bytes: &[u8]| {
            bytes.iter().fold(0u32, |mut c, &b| {
                c ^= b as u32;
                for _ in 0..8 {
                    c = (c >> 1) ^ if c & 1 == 1 { 0x82F6_3B78 } else { 0 };
                }
                c
            })
        };
        let head = crc32c::crc32c(b"sluice checkpoint header");
        for len in [1usize, 15, 64, 1000, 4096, 64 * 1000 + 48, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8 ^ 0x5a).collect();
            let seg = crc_segment(len);
            assert_eq!(seg % 16, 0);
            let mut total = 0u32;
            for start in (0..len).step_by(seg) {
                let end = (start + seg).min(len);
                // The kernel's shift: one power of x per set bit of the distance.
                total ^= crc_shift(raw(&data[start..end]), len - end);
            }
            assert_eq!(
                append_raw(head, total, len),
                crc32c::crc32c_append(head, &data),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn the_shifts_are_crc32c_combine() {
        let (one, group) = shifts();
        for (a, b) in [
            (0u32, 0u32),
            (1, 2),
            (0xdead_beef, 0x1234_5678),
            (u32::MAX, 7),
        ] {
            assert_eq!(one.apply(a) ^ b, crc32c::crc32c_combine(a, b, CHUNK));
            let n = GROUP * CHUNK;
            assert_eq!(group.apply(a) ^ b, crc32c::crc32c_combine(a, b, n));
        }
    }

    #[test]
    fn folding_chunks_gives_the_crc_of_the_whole() {
        let head = crc32c::crc32c(b"head");
        for len in [
            3 * CHUNK + 77,
            GROUP * CHUNK,
            2 * GROUP * CHUNK + 3 * CHUNK + 77,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let crcs: Vec<AtomicU32> = data
                .chunks(CHUNK)
                .map(|c| AtomicU32::new(crc32c::crc32c(c)))
                .collect();
            assert_eq!(
                fold(head, &crcs, len),
                crc32c::crc32c_append(head, &data),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn direct_pieces_shrink_to_the_end_and_cover_the_checkpoint() {
        for len in [
            1,
            CHUNK - 1,
            LAST_PIECE,
            2 * LAST_PIECE - 1,
            2 * LAST_PIECE,
            (4 << 20) + 36,
            (64 << 20) + 5,
            256 << 20,
        ] {
            let s = direct_starts(len);
            assert_eq!(s[0], 0, "{len}");
            assert!(s.iter().all(|&o| o % CHUNK == 0), "{len}: {s:?}");
            assert!(s.windows(2).all(|w| w[0] < w[1]), "{len}: {s:?}");
            let sizes: Vec<usize> = s
                .iter()
                .zip(s.iter().skip(1).chain([&len]))
                .map(|(a, b)| b - a)
                .collect();
            let last = *sizes.last().unwrap();
            assert!(
                last >= len.min(LAST_PIECE) && last < 2 * LAST_PIECE + CHUNK,
                "{len}: {sizes:?}"
            );
            // Each piece at most twice the next (the first, under two pieces' worth, more).
            assert!(
                sizes[1..].windows(2).all(|w| w[0] <= 2 * w[1]),
                "{len}: {sizes:?}"
            );
            assert!(
                sizes[1..].iter().all(|&p| p <= DIRECT_PIECE_MAX),
                "{len}: {sizes:?}"
            );
        }
        assert_eq!(direct_starts(4 << 20).len(), 4);
    }

    #[test]
    fn broadcast_runs_the_job_to_the_end_and_reports_panics() {
        let n = AtomicUsize::new(0);
        let work = || while n.fetch_add(1, Ordering::Relaxed) < 10_000 {};
        assert!(!broadcast(&work));
        assert!(n.load(Ordering::Relaxed) >= 10_000);
        // The caller's own panic comes back as `true`, after the helpers left.
        assert!(broadcast(&|| panic!("the caller's run panics")));
        assert!(run(false, &|| panic!("a single run panics")));
        // A helper's panic (when one starts in time) neither hangs nor breaks the pool.
        let first = AtomicBool::new(true);
        let boom = || {
            if !first.swap(false, Ordering::Relaxed) {
                panic!("a helper's run panics");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let _ = broadcast(&boom);
        n.store(0, Ordering::Relaxed);
        assert!(!broadcast(&work));
        assert!(n.load(Ordering::Relaxed) >= 10_000);
    }
}

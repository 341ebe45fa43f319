//! The prefetcher: the next batch is copied host-to-device while the current one
//! computes.

use super::*;
use crate::error::{Error, ErrorCode, Result};
use crate::prefetch::{FillOutcome, NextError, Prefetcher, Ticket, MAX_SEGMENTS};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

/// The most segments a batch may have.
pub const SLUICE_PREFETCH_MAX_SEGMENTS: u32 = 8;
const _: () = assert!(SLUICE_PREFETCH_MAX_SEGMENTS as usize == MAX_SEGMENTS);
/// A fill callback's return value for "the input has ended".
pub const SLUICE_PREFETCH_END: i32 = 1;
/// A timeout meaning "wait as long as it takes".
pub const SLUICE_WAIT_FOREVER: u32 = u32::MAX;

/// A prefetcher. Thread safety: every function may be called from any thread at
/// once; batches are returned in sequence order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_prefetcher_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// A batch leased by `sluice_prefetcher_next` until `sluice_batch_release`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_batch_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// A pull-mode producer, run on the prefetcher's own threads: it writes up to
/// `fill->capacity[i]` bytes at `fill->host[i]`, sets `fill->len[i]`, and returns
/// 0, `SLUICE_PREFETCH_END` when the input has ended, or any other value for a
/// failure that the consumer receives in the batch's place, as
/// `SLUICE_ERROR_CALLBACK_FAILED` with the message "prefetcher batch N: fill failed:
/// the fill callback returned RC". It may block; it must not call
/// `sluice_prefetcher_destroy` on its own prefetcher. With several producer threads,
/// `SLUICE_PREFETCH_END` closes the input; fills already under way on other threads
/// still deliver their batches, in sequence order.
pub type sluice_prefetch_fill_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, fill: *mut sluice_prefetch_fill_t) -> i32>;

/// How to create a prefetcher.
#[repr(C)]
pub struct sluice_prefetcher_config_t {
    /// Slots (batches in flight): 1 to 64, 0 for the default of 2.
    pub depth: u32,
    /// Segments per batch, 1 to `SLUICE_PREFETCH_MAX_SEGMENTS`.
    pub segments: u32,
    /// The capacity in bytes of each segment (each > 0).
    pub capacity: [usize; 8],
    /// Pull mode: the fill callback, or NULL for push mode.
    pub fill: sluice_prefetch_fill_fn,
    /// Passed to `fill`.
    pub user_data: *mut c_void,
    /// Pull mode: the number of producer threads (0 means 1).
    pub producer_threads: u32,
}

/// A slot being filled in place: by `sluice_prefetcher_acquire` (then
/// `sluice_prefetcher_submit` or `sluice_prefetcher_cancel`), or by a fill callback.
#[repr(C)]
pub struct sluice_prefetch_fill_t {
    /// The batch's sequence number.
    pub seq: u64,
    /// Identifies the slot and its use; a fill is submitted or cancelled once. It is
    /// 0 in a fill callback's fill, which its return value ends.
    pub token: u64,
    /// Segments per batch.
    pub segments: u32,
    /// Pinned host memory of each segment.
    pub host: [*mut c_void; 8],
    /// Its capacity in bytes.
    pub capacity: [usize; 8],
    /// The bytes written, set by the producer (0 is allowed).
    pub len: [usize; 8],
}

/// One segment of a pushed batch.
#[repr(C)]
pub struct sluice_prefetch_segment_t {
    /// Host memory to copy from (NULL only when `len` is 0).
    pub ptr: *const c_void,
    /// Its length in bytes.
    pub len: usize,
}

/// A batch on the device.
#[repr(C)]
pub struct sluice_batch_view_t {
    /// The batch's sequence number (also set when a producer's error is returned).
    pub seq: u64,
    /// Segments per batch.
    pub segments: u32,
    /// Device address of each segment.
    pub device_ptr: [u64; 8],
    /// Its length in bytes.
    pub len: [usize; 8],
    /// Its sync object, for tracked kernels and copies (owned by the prefetcher:
    /// valid until it is destroyed, not to be destroyed by the caller).
    pub sync: [sluice_sync_t; 8],
    /// Its device buffer, for tracked copies (owned by the prefetcher like `sync`).
    pub buffer: [sluice_buffer_t; 8],
}

/// A prefetcher's counters.
#[repr(C)]
pub struct sluice_prefetcher_stats_t {
    /// Batches handed to consumers.
    pub batches: u64,
    /// Bytes copied host-to-device.
    pub bytes: u64,
    /// Nanoseconds producers waited for a free slot.
    pub producer_wait_ns: u64,
    /// Nanoseconds consumers waited in `next`.
    pub consumer_wait_ns: u64,
    /// Pinned staging bytes held (constant from create to destroy).
    pub pinned_bytes: u64,
    /// Host-to-device GB/s over the copies timed so far: batch 0's, then every
    /// eighth batch's once 8 MiB were copied since the last timed one, each timed
    /// when its slot is reused (so this trails by `depth` batches; 0 before the
    /// first). With producers on several threads, copies of different threads may
    /// overlap on the device: the rate is then that of one copy among them.
    pub copy_gbps: f64,
}

/// What the prefetcher's handle names: the core object and the sync handles of its
/// slots, which the batch views carry.
pub struct PrefetcherEntry {
    core: Arc<Prefetcher>,
    syncs: Vec<Vec<sluice_sync_t>>,
    buffers: Vec<Vec<sluice_buffer_t>>,
}

/// What a batch's handle names.
pub struct Lease {
    pf: Arc<PrefetcherEntry>,
    seq: u64,
}

struct UserData(*mut c_void);
// SAFETY: the caller promises user_data may be used from the producer threads.
unsafe impl Send for UserData {}
// SAFETY: as above.
unsafe impl Sync for UserData {}

/// Borrows one struct from C.
fn ref_in<'a, T>(p: *const T, name: &str) -> Result<&'a T> {
    Ok(&slice_in(p, 1, name)?[0])
}

fn timeout(ms: u32) -> Option<Duration> {
    (ms != SLUICE_WAIT_FOREVER).then(|| Duration::from_millis(ms as u64))
}

fn ticket(fill: &sluice_prefetch_fill_t) -> Ticket {
    Ticket {
        seq: fill.seq,
        slot: (fill.token >> 32) as u32,
        generation: fill.token as u32,
    }
}

/// Inserts `value` in its handle table and returns the new handle.
fn table_handle<H: Castable>(value: H::Target) -> H {
    let mut h = std::mem::MaybeUninit::<H>::uninit();
    write_new(h.as_mut_ptr(), value);
    // SAFETY: `write_new` wrote the handle's one field.
    unsafe { h.assume_init() }
}

/// The C view of a slot being filled; `token` 0 for a fill callback's.
fn fill_of(seq: u64, token: u64, host: &[(*mut u8, usize)]) -> sluice_prefetch_fill_t {
    let mut f = sluice_prefetch_fill_t {
        seq,
        token,
        segments: host.len() as u32,
        host: [std::ptr::null_mut(); 8],
        capacity: [0; 8],
        len: [0; 8],
    };
    for (i, &(p, c)) in host.iter().enumerate() {
        f.host[i] = p.cast();
        f.capacity[i] = c;
    }
    f
}

fn view_of(pf: &PrefetcherEntry, view: &crate::prefetch::BatchView) -> sluice_batch_view_t {
    let slot = view.slot as usize;
    let mut v = empty_view(view.seq);
    v.segments = view.segments.len() as u32;
    for (i, &(addr, len)) in view.segments.iter().enumerate() {
        v.device_ptr[i] = addr;
        v.len[i] = len;
        v.sync[i] = pf.syncs[slot][i];
        v.buffer[i] = pf.buffers[slot][i];
    }
    v
}

fn empty_view(seq: u64) -> sluice_batch_view_t {
    sluice_batch_view_t {
        seq,
        segments: 0,
        device_ptr: [0; 8],
        len: [0; 8],
        sync: [sluice_sync_t { bits: 0 }; 8],
        buffer: [sluice_buffer_t { bits: 0 }; 8],
    }
}

/// On a producer's error, the view (when given) carries the batch's number.
fn next_error(view_out: *mut sluice_batch_view_t, e: NextError) -> Error {
    if let (Some(seq), false) = (e.seq, view_out.is_null()) {
        write_out(view_out, empty_view(seq));
    }
    e.error
}

/// Creates a prefetcher on `device`: its copy streams and every slot's pinned and
/// device memory are allocated now and never grow. With `config->fill` set, its
/// producer threads start at once (pull mode); otherwise batches come from
/// `sluice_prefetcher_push` or `sluice_prefetcher_acquire` (push mode). Ownership:
/// the caller owns the new handle and destroys it with `sluice_prefetcher_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`config` or `prefetcher_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`); `SLUICE_ERROR_INVALID_ARGUMENT`
/// (`config->segments` 0 or over the maximum, a capacity of 0, or a depth over the
/// maximum).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_create(
    device: sluice_device_t,
    config: *const sluice_prefetcher_config_t,
    prefetcher_out: *mut sluice_prefetcher_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_create", || {
        let out = out_ptr(prefetcher_out, "prefetcher_out")?;
        let cfg = ref_in(config, "config")?;
        if cfg.segments == 0 || cfg.segments as usize > MAX_SEGMENTS {
            return Err(Error::invalid_argument(format!(
                "config->segments must be 1 to {MAX_SEGMENTS}, not {}",
                cfg.segments
            )));
        }
        let core = Prefetcher::create(
            &get(device)?,
            cfg.depth,
            &cfg.capacity[..cfg.segments as usize],
        )?;
        // One buffer and one sync handle per slot and segment, owned by the entry.
        let (mut syncs, mut buffers) = (Vec::new(), Vec::new());
        for slot in 0..core.depth() {
            let bufs = core.slot_buffers(slot);
            syncs.push(bufs.iter().map(|b| table_handle(b.sync.clone())).collect());
            buffers.push(bufs.into_iter().map(table_handle).collect());
        }
        let entry = Arc::new(PrefetcherEntry {
            core,
            syncs,
            buffers,
        });
        if let Some(fill) = cfg.fill {
            let user = UserData(cfg.user_data);
            let started = entry.core.start_producers(
                cfg.producer_threads,
                Arc::new(move |f: &mut crate::prefetch::Fill<'_>| {
                    let mut c = fill_of(f.ticket.seq, 0, f.host);
                    let u = &user;
                    // SAFETY: the caller's callback, with its own user_data.
                    let rc = unsafe { fill(u.0, &mut c) };
                    f.len.copy_from_slice(&c.len[..f.len.len()]);
                    match rc {
                        0 => FillOutcome::Ready,
                        SLUICE_PREFETCH_END => FillOutcome::End,
                        rc => FillOutcome::Failed(format!("the fill callback returned {rc}")),
                    }
                }),
            );
            if let Err(e) = started {
                close(&entry);
                return Err(e);
            }
        }
        write_new(out, entry);
        Ok(())
    })
}

fn close(pf: &PrefetcherEntry) {
    pf.core.close();
    for s in pf.syncs.iter().flatten() {
        let _ = remove(*s);
    }
    for b in pf.buffers.iter().flatten() {
        let _ = remove(*b);
    }
}

/// Destroys a prefetcher at any moment: blocked producers and consumers return
/// `SLUICE_ERROR_INVALID_HANDLE`; fills taken with `sluice_prefetcher_acquire`
/// are waited for until their producer submits or cancels them (which then fails
/// with `SLUICE_ERROR_INVALID_HANDLE`), so that no producer writes into freed
/// memory; the producer threads are joined; leased batches are ended (their handles
/// then give `SLUICE_ERROR_INVALID_HANDLE`); and the memory is freed once the
/// device work that uses it has completed.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_destroy(
    prefetcher: sluice_prefetcher_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_destroy", || {
        // Open fills end by submit or cancel, which must still find the handle.
        get(prefetcher)?.core.stop();
        close(&*remove(prefetcher)?);
        Ok(())
    })
}

/// Copies `num_segments` host ranges (one per segment) into a free slot's pinned
/// memory and enqueues the batch's H2D copy on the calling thread's copy stream
/// (a prefetcher has one per producer thread, up to 4).
/// Blocks while every slot is busy, up to `timeout_ms` (`SLUICE_WAIT_FOREVER`:
/// no limit; then `SLUICE_ERROR_TIMEOUT`). A length over a segment's capacity gives
/// `SLUICE_ERROR_OUT_OF_RANGE` and queues nothing. Writes the batch's sequence
/// number to `seq_out` when it is not NULL. On x86-64 the copy uses non-temporal
/// stores, which win when the slot's lines are out of the CPU's caches (several
/// producers); a lone producer whose slots stay cached copies faster itself, into
/// `sluice_prefetcher_acquire`'s slot (`docs/decisions.md`).
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`segments` NULL with `num_segments` > 0);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (a segment count other than the prefetcher's);
/// `SLUICE_ERROR_OUT_OF_RANGE` (a segment longer than its capacity);
/// `SLUICE_ERROR_INVALID_STATE` (the input is closed); `SLUICE_ERROR_TIMEOUT` (no slot
/// freed within `timeout_ms`).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_push(
    prefetcher: sluice_prefetcher_t,
    segments: *const sluice_prefetch_segment_t,
    num_segments: u32,
    timeout_ms: u32,
    seq_out: *mut u64,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_push", || {
        let segs = slice_in(segments, num_segments as usize, "segments")?;
        let data = segs
            .iter()
            .enumerate()
            .map(|(i, s)| slice_in(s.ptr.cast::<u8>(), s.len, &format!("segments[{i}].ptr")))
            .collect::<Result<Vec<&[u8]>>>()?;
        let seq = get(prefetcher)?.core.push(&data, timeout(timeout_ms))?;
        if !seq_out.is_null() {
            write_out(seq_out, seq);
        }
        Ok(())
    })
}

/// Takes a free slot for the caller to fill in place (zero-copy push): write into
/// `fill_out->host[i]`, set `fill_out->len[i]`, then `sluice_prefetcher_submit`, or
/// `sluice_prefetcher_cancel` to give it back. Blocks like `sluice_prefetcher_push`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`fill_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`); `SLUICE_ERROR_INVALID_STATE`
/// (the input is closed); `SLUICE_ERROR_TIMEOUT` (no slot freed within `timeout_ms`).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_acquire(
    prefetcher: sluice_prefetcher_t,
    timeout_ms: u32,
    fill_out: *mut sluice_prefetch_fill_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_acquire", || {
        let out = out_ptr(fill_out, "fill_out")?;
        let (t, view) = get(prefetcher)?.core.acquire(timeout(timeout_ms))?;
        let token = (t.slot as u64) << 32 | t.generation as u64;
        write_out(out, fill_of(t.seq, token, view.host()));
        Ok(())
    })
}

/// Submits a slot taken with `sluice_prefetcher_acquire`: enqueues the H2D copy of
/// `fill->len[i]` bytes of each segment. A length over the capacity gives
/// `SLUICE_ERROR_OUT_OF_RANGE`, and the consumer receives that error in the batch's
/// place.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`fill` NULL); `SLUICE_ERROR_INVALID_HANDLE` (a
/// stale `prefetcher`); `SLUICE_ERROR_INVALID_ARGUMENT` (a fill that is not open:
/// submitted, cancelled or forged); `SLUICE_ERROR_OUT_OF_RANGE` (a length over its
/// segment's capacity).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_submit(
    prefetcher: sluice_prefetcher_t,
    fill: *const sluice_prefetch_fill_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_submit", || {
        let f = ref_in(fill, "fill")?;
        let pf = get(prefetcher)?;
        let n = pf.core.capacities().len();
        pf.core.submit(ticket(f), &f.len[..n])
    })
}

/// Gives back a slot taken with `sluice_prefetcher_acquire`, unused: its sequence
/// number is skipped.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`fill` NULL); `SLUICE_ERROR_INVALID_HANDLE` (a
/// stale `prefetcher`); `SLUICE_ERROR_INVALID_ARGUMENT` (a fill that is not open).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_cancel(
    prefetcher: sluice_prefetcher_t,
    fill: *const sluice_prefetch_fill_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_cancel", || {
        let f = ref_in(fill, "fill")?;
        get(prefetcher)?.core.cancel(ticket(f))
    })
}

/// Ends the input: `next` returns what is in flight, then `SLUICE_ERROR_END_OF_DATA`.
/// Producers waiting for a slot, and later pushes, get `SLUICE_ERROR_INVALID_STATE`.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_close_input(
    prefetcher: sluice_prefetcher_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_close_input", || {
        get(prefetcher)?.core.close_input();
        Ok(())
    })
}

/// Leases the oldest ready batch to work on `stream`, waiting up to `timeout_ms`
/// for it on the host (its producer's submit, never its copy). `stream` waits on the
/// device for the batch's copy; kernels that name `view_out->sync[i]` are tracked.
/// Release it with `sluice_batch_release`. At the end of the input it returns
/// `SLUICE_ERROR_END_OF_DATA`. An error that belongs to one batch (its producer
/// failed, or its segments were too long) is returned in its place, with
/// `view_out->seq` set to its number and `view_out->segments` to 0; on other errors
/// `view_out` is not written. Ownership: the caller owns the batch handle until
/// `sluice_batch_release`, also after the prefetcher is destroyed.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`batch_out` or `view_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`, `stream`);
/// `SLUICE_ERROR_WRONG_DEVICE` (`stream` of another device; no batch is taken);
/// `SLUICE_ERROR_END_OF_DATA` (the input is closed and every batch was taken);
/// `SLUICE_ERROR_TIMEOUT` (no batch within `timeout_ms`);
/// `SLUICE_ERROR_CALLBACK_FAILED` (a pull-mode fill callback failed).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_next(
    prefetcher: sluice_prefetcher_t,
    stream: sluice_stream_t,
    timeout_ms: u32,
    batch_out: *mut sluice_batch_t,
    view_out: *mut sluice_batch_view_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_next", || {
        let out = out_ptr(batch_out, "batch_out")?;
        out_ptr(view_out, "view_out")?;
        let pf = get(prefetcher)?;
        let s = get(stream)?;
        let view = pf
            .core
            .next(&s, timeout(timeout_ms))
            .map_err(|e| next_error(view_out, e))?;
        write_out(view_out, view_of(&pf, &view));
        write_new(out, Arc::new(Lease { pf, seq: view.seq }));
        Ok(())
    })
}

/// Releases a leased batch in stream order: its slot is refilled only after the
/// work enqueued on the consumer's stream so far has completed on the device. The
/// host does not wait. Ownership: consumes the handle, also when it fails.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `batch`, or a second release).
#[no_mangle]
pub extern "C" fn sluice_batch_release(batch: sluice_batch_t) -> *mut sluice_error_t {
    boundary("sluice_batch_release", || {
        let lease = remove(batch)?;
        lease.pf.core.release(lease.seq).map_err(|e| {
            if e.code == ErrorCode::InvalidHandle {
                Error::new(
                    ErrorCode::InvalidHandle,
                    "the batch's prefetcher was destroyed (the batch ended then)",
                )
            } else {
                e
            }
        })
    })
}

/// Graph mode: copies the oldest batch, device to device as a tracked op on
/// `stream`, into `dst[i]` (one buffer per segment, each at least the segment's
/// capacity), and releases it at once in stream order. A graph captured over
/// `dst` can be replayed for every batch. Waits and errors as
/// `sluice_prefetcher_next`; `view_out` describes the batch, but its device
/// pointers and handles are the slot's, already released: read `dst` instead.
/// The arguments are checked before a batch is taken; a copy that fails after
/// that (a `dst[i]` that is the slot's own buffer) names the batch, which is
/// consumed, in `view_out->seq`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`view_out` NULL, or `dst` NULL with a
/// non-zero `num_dst`); `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`, `stream` or `dst[i]`,
/// named by its index); `SLUICE_ERROR_INVALID_ARGUMENT` (`num_dst` other than the
/// segment count); `SLUICE_ERROR_OUT_OF_RANGE` (a destination buffer smaller than its
/// segment's capacity); `SLUICE_ERROR_WRONG_DEVICE` (`stream` or a `dst[i]` of
/// another device); `SLUICE_ERROR_END_OF_DATA` (the input is closed and every
/// batch was taken); `SLUICE_ERROR_TIMEOUT` (no batch within `timeout_ms`).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_next_into(
    prefetcher: sluice_prefetcher_t,
    stream: sluice_stream_t,
    dst: *const sluice_buffer_t,
    num_dst: u32,
    timeout_ms: u32,
    view_out: *mut sluice_batch_view_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_next_into", || {
        out_ptr(view_out, "view_out")?;
        let handles = slice_in(dst, num_dst as usize, "dst")?;
        let bufs = handles
            .iter()
            .enumerate()
            .map(|(i, h)| get(*h).map_err(|e| e.context(format!("dst[{i}]"))))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&crate::Buffer> = bufs.iter().map(|b| &**b).collect();
        let pf = get(prefetcher)?;
        let s = get(stream)?;
        let view = pf
            .core
            .next_into(&s, &refs, timeout(timeout_ms))
            .map_err(|e| next_error(view_out, e))?;
        write_out(view_out, view_of(&pf, &view));
        Ok(())
    })
}

/// Writes the prefetcher's counters.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stats_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `prefetcher`).
#[no_mangle]
pub extern "C" fn sluice_prefetcher_stats(
    prefetcher: sluice_prefetcher_t,
    stats_out: *mut sluice_prefetcher_stats_t,
) -> *mut sluice_error_t {
    boundary("sluice_prefetcher_stats", || {
        out_value(stats_out, "stats_out", || {
            let s = get(prefetcher)?.core.stats();
            Ok(sluice_prefetcher_stats_t {
                batches: s.batches,
                bytes: s.bytes,
                producer_wait_ns: s.producer_wait_ns,
                consumer_wait_ns: s.consumer_wait_ns,
                pinned_bytes: s.pinned_bytes,
                copy_gbps: s.copy_gbps,
            })
        })
    })
}

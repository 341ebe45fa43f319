//! Sync objects and foreign ops.

use super::*;
use crate::engine::{self, EngineMode, ForeignOp, OpMemory};
use crate::epoch::Guard;
use crate::error::{Error, Result};
use crate::handle::{Reserved, Stale};
use crate::sync::{Access, AccessSet, ObjRef, SyncObject};
use std::cell::Cell;

/// A sync object: the dependency record of one buffer or of foreign memory. It
/// holds at most one writer event and one reader event per stream.
/// Thread safety: may be used from any thread at once; see `sluice_op_begin`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_sync_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// An open foreign op, between `sluice_op_begin` and `sluice_op_end`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_op_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// The dependency state of a sync object.
#[repr(C)]
pub struct sluice_sync_info_t {
    /// Process-unique id of the object.
    pub id: u64,
    /// Reader entries (at most one per stream).
    pub reader_count: u32,
    /// 1 when a writer event is recorded.
    pub has_writer: u32,
}

/// Runs `f` on the normalised access set of an op's handle arrays (NULL when the
/// count is 0), with every object borrowed under `pin`.
#[inline(always)]
pub(crate) fn with_access_set<'g, R>(
    pin: &'g Guard,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
    f: impl FnOnce(&[Access<'g>]) -> Result<R>,
) -> Result<R> {
    f(&access_set::<4>(pin, reads, num_reads, writes, num_writes)?)
}

/// The normalised access set of an op's handle arrays, borrowed under `pin`.
#[inline(always)]
fn access_set<'g, const N: usize>(
    pin: &'g Guard,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
) -> Result<AccessSet<'g, N>> {
    let mut set = AccessSet::with_room(0);
    fill_access_set(pin, reads, num_reads, writes, num_writes, &mut set)?;
    set.normalize();
    Ok(set)
}

/// Pushes the accesses of an op's handle arrays into `set` (empty), unnormalised.
#[inline(always)]
fn fill_access_set<'g, const N: usize>(
    pin: &'g Guard,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
    set: &mut AccessSet<'g, N>,
) -> Result<()> {
    let r = slice_in(reads, num_reads, "reads")?;
    let w = slice_in(writes, num_writes, "writes")?;
    set.reserve(r.len() + w.len());
    for (handles, write, name) in [(r, false, "reads"), (w, true, "writes")] {
        for (i, h) in handles.iter().enumerate() {
            match sluice_sync_t::table().get_pinned(pin, h.bits) {
                // SAFETY: table entries are Arcs, alive while `pin` lasts.
                Ok(o) => set.push(unsafe { ObjRef::in_arc(o) }, write),
                Err(e) => return Err(bad_sync(e, h.bits, name, i)),
            }
        }
    }
    Ok(())
}

#[cold]
fn bad_sync(e: Stale, bits: u64, name: &str, i: usize) -> Error {
    stale::<sluice_sync_t>(e, bits).context(format!("{name}[{i}]"))
}

/// Creates a standalone sync object, for memory sluice does not own (a libtorch
/// tensor, a caller's cudaMalloc). Ownership: the caller owns the new handle and
/// destroys it with `sluice_sync_destroy`; ops that use the object keep it alive.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`sync_out` NULL).
#[no_mangle]
pub extern "C" fn sluice_sync_create(sync_out: *mut sluice_sync_t) -> *mut sluice_error_t {
    boundary("sluice_sync_create", || {
        out_new(sync_out, "sync_out", || Ok(SyncObject::new()))
    })
}

/// Destroys a sync handle. Ownership: only the handle ends; the object lives on
/// while a buffer, another handle or enqueued work still holds it.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `sync`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_sync_destroy(sync: sluice_sync_t) -> *mut sluice_error_t {
    boundary("sluice_sync_destroy", || remove(sync).map(drop))
}

/// Blocks until the last writer's work has completed (not merely been enqueued).
/// A failed host callback on the writer's stream is reported here too; the stream's
/// own next synchronisation still reports it.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `sync`);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (the object's writer is in a capture);
/// `SLUICE_ERROR_CALLBACK_FAILED` (the host callback it waits for failed).
#[no_mangle]
pub extern "C" fn sluice_sync_wait_read(sync: sluice_sync_t) -> *mut sluice_error_t {
    boundary("sluice_sync_wait_read", || get(sync)?.wait_read())
}

/// Blocks until the last writer's and every reader's work has completed.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `sync`);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (a recording it waits for is in a capture);
/// `SLUICE_ERROR_CALLBACK_FAILED` (the host callback it waits for failed).
#[no_mangle]
pub extern "C" fn sluice_sync_wait_write(sync: sluice_sync_t) -> *mut sluice_error_t {
    boundary("sluice_sync_wait_write", || get(sync)?.wait_write())
}

/// Writes the object's dependency state.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`info_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `sync`).
#[no_mangle]
pub extern "C" fn sluice_sync_info(
    sync: sluice_sync_t,
    info_out: *mut sluice_sync_info_t,
) -> *mut sluice_error_t {
    boundary("sluice_sync_info", || {
        let out = out_ptr(info_out, "info_out")?;
        let s = get(sync)?;
        write_out(
            out,
            sluice_sync_info_t {
                id: s.id,
                reader_count: s.reader_count() as u32,
                has_writer: s.has_writer() as u32,
            },
        );
        Ok(())
    })
}

/// Begins a foreign op on `stream` that reads `reads` and writes `writes` (an object
/// in both counts as a write). `stream` is made to wait, on the device, for every
/// conflicting earlier op on other streams; the host never blocks. Enqueue the
/// foreign work on `sluice_stream_raw(stream)`, then call `sluice_op_end`.
/// Ownership: the caller owns the new op handle until `sluice_op_end` consumes it.
/// A buffer freed while the op is open on its sync object keeps its memory until
/// the op ends (see `sluice_buffer_free`).
///
/// Thread safety: ops from many threads may run at once. Two conflicting foreign
/// ops cannot both be open (neither has a recording the other could wait for):
/// beginning an op that writes an object another open op reads or writes, or reads
/// an object another open op writes, fails with `SLUICE_ERROR_INVALID_STATE` and
/// changes nothing; end the first op before beginning the second. Library ops
/// (copies, launches) do not see open foreign ops: they order against what was
/// published, so publish with `sluice_op_end` before they use the object. The
/// foreign work is enqueued outside sluice's per-stream push
/// lock: the CUDA driver can break stream order when a graph is launched on a
/// stream while another thread enqueues on it, so do not launch graphs as foreign
/// work on a stream that other threads use at the same time.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`op_out` NULL); `SLUICE_ERROR_NULL_ARGUMENT`
/// (`reads`/`writes` NULL with a non-zero count); `SLUICE_ERROR_INVALID_HANDLE` (a
/// stale `stream`, or a stale sync object, named by its index);
/// `SLUICE_ERROR_OUT_OF_RANGE` (a count whose byte size overflows);
/// `SLUICE_ERROR_INVALID_STATE` (an object that another foreign op still open on
/// another stream uses in a conflicting way).
#[no_mangle]
pub extern "C" fn sluice_op_begin(
    stream: sluice_stream_t,
    reads: *const sluice_sync_t,
    num_reads: usize,
    writes: *const sluice_sync_t,
    num_writes: usize,
    op_out: *mut sluice_op_t,
) -> *mut sluice_error_t {
    boundary("sluice_op_begin", || {
        let out = out_ptr(op_out, "op_out")?;
        // The objects are borrowed under the pin until the op is counted open on
        // them (or keeps them), as a library op's are for its whole call.
        let pin = crate::epoch::pin();
        let s = get_pinned(&pin, stream)?;
        let (mem, index) = match SPARE.try_with(Cell::take).ok().flatten() {
            Some(spare) => spare.into_parts(),
            None => (Box::new_uninit(), None),
        };
        // The set is filled in the op's memory. SAFETY: `pin` keeps the objects
        // alive until `begin_filled_in` returns.
        let begun = unsafe {
            ForeignOp::begin_filled_in(mem, s, |set| {
                fill_access_set(&pin, reads, num_reads, writes, num_writes, set)
            })
        };
        match begun {
            Ok(op) => {
                let table = sluice_op_t::table();
                let bits = match index {
                    Some(i) => table.insert_reserved(i, op),
                    None => table.insert(op),
                };
                write_bits(out, bits);
                Ok(())
            }
            Err((e, mem)) => {
                keep_spare(Spare { mem, index });
                Err(e)
            }
        }
    })
}

/// Ends a foreign op: records one event on its stream and publishes it to every
/// object of the op. Ownership: the op handle is consumed, also when an error is
/// returned. A buffer freed while this op was open on its sync object is released
/// here, once no foreign op is open on the object any more, ordered after this
/// op's work (see `sluice_buffer_free`).
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `op`, or ending it twice).
#[no_mangle]
pub extern "C" fn sluice_op_end(op: sluice_op_t) -> *mut sluice_error_t {
    boundary("sluice_op_end", || {
        let (op, index) = sluice_op_t::table()
            .remove_reserving(op.bits)
            .map_err(|e| stale::<sluice_op_t>(e, op.bits))?;
        let (ended, mem) = ForeignOp::end_into(op);
        keep_spare(Spare {
            mem,
            index: Some(index),
        });
        ended
    })
}

/// This thread's last ended op: its memory and its slot in the op table, both
/// reused by the thread's next `sluice_op_begin`, so that a begin/end pair
/// allocates nothing and writes no cache line that other threads' ops write (the
/// table's free-list head). One per thread covers the begin/end/begin pattern;
/// nested open ops beyond the first take memory and a slot the ordinary way.
struct Spare {
    mem: OpMemory,
    /// None when the memory came without a slot (a begin that failed first).
    index: Option<Reserved>,
}

impl Spare {
    fn into_parts(self) -> (OpMemory, Option<Reserved>) {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is moved out once; `me` is never dropped.
        unsafe { (std::ptr::read(&me.mem), std::ptr::read(&me.index)) }
    }
}

impl Drop for Spare {
    /// A spare replaced by a newer one, or left at thread exit: its slot goes back
    /// to the table's free list (its memory is freed).
    fn drop(&mut self) {
        if let Some(i) = self.index.take() {
            sluice_op_t::table().give_back(i);
        }
    }
}

thread_local! {
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

/// Keeps `spare` as the thread's spare (an older one is dropped); during thread
/// teardown it is dropped at once.
#[inline(always)]
fn keep_spare(spare: Spare) {
    // On failure the closure, and the spare with it, is dropped.
    let _ = SPARE.try_with(|c| c.set(Some(spare)));
}

/// Sets the process-wide engine mode: `SLUICE_ENGINE_ASYNC` or `SLUICE_ENGINE_SYNC`.
/// The initial mode comes from `SLUICE_ENGINE=async|sync`.
///
/// Errors: `SLUICE_ERROR_INVALID_ARGUMENT` (`mode` not a `SLUICE_ENGINE_*`).
#[no_mangle]
pub extern "C" fn sluice_engine_set_mode(mode: u32) -> *mut sluice_error_t {
    boundary("sluice_engine_set_mode", || {
        let m = EngineMode::from_u32(mode)
            .ok_or_else(|| Error::invalid_argument(format!("unknown engine mode {mode}")))?;
        engine::set_engine_mode(m);
        Ok(())
    })
}

/// The process-wide engine mode.
#[no_mangle]
pub extern "C" fn sluice_engine_mode() -> u32 {
    engine::engine_mode() as u32
}

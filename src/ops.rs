//! Tracked operations: copies, memsets, kernel launches, host callbacks and graph
//! launches. Each checks its arguments, then runs as one op of the engine
//! ([`engine::run_op`]) over the sync objects of what it reads and writes.

use crate::backend::LaunchDims;
use crate::counters::CopyDir;
use crate::engine;
use crate::error::{Error, Result};
use crate::graph::GraphExec;
use crate::memory::{Buffer, BufferKind};
use crate::module::Function;
use crate::stream::Stream;
use crate::sync::{self, SyncObject};
use crate::trace::OpKind;
use std::ffi::c_void;
use std::sync::Arc;

fn check_pair(stream: &Stream, bufs: &[&Buffer]) -> Result<()> {
    for b in bufs {
        stream
            .device
            .same_device_with(&b.device, || format!("{b:?}"))?;
    }
    Ok(())
}

/// Copies `len` bytes between two buffers on `stream`. Out-of-range is an error
/// and changes nothing; a zero length is a no-op.
pub fn copy(
    stream: &Stream,
    dst: &Buffer,
    dst_off: usize,
    src: &Buffer,
    src_off: usize,
    len: usize,
) -> Result<()> {
    check_pair(stream, &[dst, src])?;
    let d = dst.range(dst_off, len, "copy destination")?;
    let s = src.range(src_off, len, "copy source")?;
    if len == 0 {
        return Ok(());
    }
    if std::ptr::eq(dst, src) && d < s + len as u64 && s < d + len as u64 {
        return Err(Error::invalid_argument(
            "copy: source and destination ranges overlap",
        ));
    }
    let backend = &stream.device.backend;
    let (r, w) = (
        std::slice::from_ref(&src.sync),
        std::slice::from_ref(&dst.sync),
    );
    let kind = OpKind::Copy(CopyDir::of(src.kind, dst.kind), len as u64);
    engine::run_op(stream, kind, &sync::access_set(r, w), || {
        backend.memcpy_async(d, s, len, stream.raw)
    })?;
    Ok(())
}

/// Copies each `(dst, src, len)`, from offset 0 to offset 0, as one tracked op:
/// one wait per conflicting earlier op and one recording for all of them (what
/// `copy` per pair would issue once per pair). Checks every pair before enqueuing
/// any; pairs of length 0 are skipped.
pub fn copy_all(stream: &Stream, copies: &[(&Buffer, &Buffer, usize)]) -> Result<()> {
    let mut ranges = Vec::with_capacity(copies.len());
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let (mut total, mut dir) = (0u64, None);
    for &(dst, src, len) in copies {
        check_pair(stream, &[dst, src])?;
        let d = dst.range(0, len, "copy destination")?;
        let s = src.range(0, len, "copy source")?;
        if len == 0 {
            continue;
        }
        if std::ptr::eq(dst, src) {
            return Err(Error::invalid_argument(
                "copy: source and destination ranges overlap",
            ));
        }
        ranges.push((d, s, len));
        reads.push(src.sync.clone());
        writes.push(dst.sync.clone());
        total += len as u64;
        dir.get_or_insert(CopyDir::of(src.kind, dst.kind));
    }
    let Some(dir) = dir else { return Ok(()) };
    let backend = &stream.device.backend;
    let kind = OpKind::Copy(dir, total);
    engine::run_op(stream, kind, &sync::access_set(&reads, &writes), || {
        ranges
            .iter()
            .try_for_each(|&(d, s, len)| backend.memcpy_async(d, s, len, stream.raw))
    })?;
    Ok(())
}

/// Copies from pageable host memory into `dst`. Returns once `src` may be reused.
pub fn copy_from_host(stream: &Stream, dst: &Buffer, dst_off: usize, src: &[u8]) -> Result<()> {
    check_pair(stream, &[dst])?;
    let d = dst.range(dst_off, src.len(), "copy destination")?;
    stream.reject_in_capture("copy from pageable host memory")?;
    if src.is_empty() {
        return Ok(());
    }
    let backend = &stream.device.backend;
    let kind = OpKind::Copy(
        CopyDir::of(BufferKind::Registered, dst.kind),
        src.len() as u64,
    );
    engine::run_op(
        stream,
        kind,
        &sync::access_set(&[], std::slice::from_ref(&dst.sync)),
        || backend.memcpy_from_pageable(d, src, stream.raw),
    )?;
    Ok(())
}

/// Copies from `src` into pageable host memory; blocks until the bytes arrived.
pub fn copy_to_host(stream: &Stream, dst: &mut [u8], src: &Buffer, src_off: usize) -> Result<()> {
    check_pair(stream, &[src])?;
    let s = src.range(src_off, dst.len(), "copy source")?;
    stream.reject_in_capture("copy to pageable host memory")?;
    if dst.is_empty() {
        return Ok(());
    }
    let backend = &stream.device.backend;
    let d = dst.as_mut_ptr() as u64;
    let len = dst.len();
    let kind = OpKind::Copy(CopyDir::of(src.kind, BufferKind::Registered), len as u64);
    let rec = engine::run_op_recorded(
        stream,
        kind,
        &sync::access_set(std::slice::from_ref(&src.sync), &[]),
        || backend.memcpy_async(d, s, len, stream.raw),
    );
    let waited = match rec {
        Ok(Some(r)) => r.synchronize(),
        Ok(None) => stream.synchronize(),
        Err(e) => Err(e),
    };
    if waited.is_err() {
        // `dst` must not be returned to the caller with a copy into it in flight.
        let _ = backend.stream_synchronize(stream.raw);
    }
    waited
}

/// Sets `len` bytes of `dst` to `value`, in stream order.
pub fn memset(stream: &Stream, dst: &Buffer, off: usize, value: u8, len: usize) -> Result<()> {
    check_pair(stream, &[dst])?;
    let d = dst.range(off, len, "memset")?;
    if len == 0 {
        return Ok(());
    }
    let backend = &stream.device.backend;
    engine::run_op(
        stream,
        OpKind::Memset(len as u64),
        &sync::access_set(&[], std::slice::from_ref(&dst.sync)),
        || backend.memset_async(d, value, len, stream.raw),
    )?;
    Ok(())
}

#[inline(always)]
fn check_dims(d: &LaunchDims) -> Result<()> {
    if d.grid.contains(&0) || d.block.contains(&0) {
        return Err(Error::invalid_argument(format!(
            "launch dimensions must be non-zero (grid {:?}, block {:?})",
            d.grid, d.block
        )));
    }
    Ok(())
}

/// Launches `func` on `stream` as one tracked op over `reads` and `writes`.
///
/// `args` holds one pointer per kernel parameter; where the driver reports the
/// kernel's parameter count (CUDA 12.4+), a different count is an `InvalidArgument`.
///
/// # Safety
/// Each of `args` must point to a value of its parameter's type, and the kernel may
/// only touch memory it is allowed to.
pub unsafe fn launch(
    stream: &Stream,
    func: &Function,
    dims: LaunchDims,
    args: &mut [*mut c_void],
    reads: &[Arc<SyncObject>],
    writes: &[Arc<SyncObject>],
) -> Result<()> {
    let n = args.len();
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        launch_set(
            stream,
            func,
            dims,
            args.as_mut_ptr(),
            n,
            &sync::access_set(reads, writes),
        )
    }
}

/// [`launch`] over an access set built by the caller.
///
/// # Safety
/// As for [`launch`].
#[inline(always)]
pub(crate) unsafe fn launch_set(
    stream: &Stream,
    func: &Function,
    dims: LaunchDims,
    args: *mut *mut c_void,
    num_args: usize,
    set: &[sync::Access<'_>],
) -> Result<()> {
    stream
        .device
        .same_device_with(&func.device, || format!("kernel '{}'", func.name))?;
    check_dims(&dims)?;
    func.check_arg_count(num_args)?;
    engine::run_op(
        stream,
        OpKind::Launch(func),
        set,
        #[inline(always)]
        || {
            // SAFETY: forwarded from the caller's contract.
            unsafe { stream.drv_launch_kernel(func.raw, dims, func.programmatic_launch(), args) }
                .map_err(|e| e.context(format!("launch of '{}'", func.name)))
        },
    )?;
    Ok(())
}

/// Enqueues a host callback as one tracked op. A non-zero return or a panic becomes
/// a `CallbackFailed` error at the stream's next synchronisation.
pub fn host_callback(
    stream: &Stream,
    call: impl Fn() -> i32 + Send + Sync + 'static,
    reads: &[Arc<SyncObject>],
    writes: &[Arc<SyncObject>],
) -> Result<()> {
    host_callback_set(stream, call, &sync::access_set(reads, writes))
}

/// [`host_callback`] over an access set built by the caller.
#[inline(always)]
pub(crate) fn host_callback_set(
    stream: &Stream,
    call: impl Fn() -> i32 + Send + Sync + 'static,
    set: &[sync::Access<'_>],
) -> Result<()> {
    let job = stream.callback_job(call);
    if let Some(cap) = stream.current_capture() {
        cap.ctl().callbacks = true;
    }
    engine::run_op(stream, OpKind::HostFn, set, || stream.push_host_fn(job))?;
    Ok(())
}

/// Launches `exec` on `stream` as ONE tracked op whose read and write sets are the
/// union of the captured ops': it waits before, and records one event after.
pub fn launch_graph(stream: &Stream, exec: &GraphExec) -> Result<()> {
    stream.device.same_device(&exec.device, "the graph")?;
    stream.reject_in_capture("graph launch")?;
    let st = exec.state();
    let backend = &exec.device.backend;
    let (kind, set) = (
        OpKind::GraphLaunch(exec.id),
        sync::access_set(&st.reads, &st.writes),
    );
    engine::run_op(stream, kind, &set, || {
        if st.callbacks {
            stream.around_replay(|| backend.graph_launch(st.raw, stream.raw))
        } else {
            backend.graph_launch(st.raw, stream.raw)
        }
    })?;
    Ok(())
}

//! A library op on its stream: its waits, its work and its recording under the
//! stream's push lock, then the publication (see the module doc of `engine`).

use crate::error::{Error, Result};
use crate::event::{PoolInner, Publish, RecRef};
use crate::objlock::ObjGuard;
use crate::stream::Stream;
use crate::sync::Access;
use crate::trace::{self, Obs, OpKind, Waited};
use std::sync::atomic::Ordering;

use super::deps::{collect_waits, issue_waits, Locked, Waits};
use super::{engine_mode, EngineMode};

/// The part of an op that touches the stream, under its push lock so that the
/// op's waits, its work and its recording are contiguous on the stream: issues the
/// waits, runs `enqueue`, records one event with one reference per object (plus one
/// when `keep`), and hands it to `publish_all` with the push lock still held. The
/// trace switch is read once, here: when it is on, an out-of-line copy runs.
/// `captured` is the op's route: under the push lock the stream must still be
/// in (or out of) a capture, or the op fails with nothing enqueued.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_op(
    stream: &Stream,
    captured: bool,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    let push = stream.push_lock();
    stream.check_routed(captured)?;
    let obs = trace::observe();
    if obs.on() {
        return push_op_observed(
            stream,
            push,
            obs,
            kind,
            need,
            objects,
            keep,
            enqueue,
            publish_all,
        );
    }
    push_op_with(
        stream,
        push,
        Obs::OFF,
        kind,
        need,
        objects,
        keep,
        enqueue,
        publish_all,
    )
}

#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn push_op_observed(
    stream: &Stream,
    push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    push_op_with(
        stream,
        push,
        obs,
        kind,
        need,
        objects,
        keep,
        enqueue,
        publish_all,
    )
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn push_op_with(
    stream: &Stream,
    mut push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    need: &Waits,
    objects: usize,
    keep: bool,
    enqueue: impl FnOnce() -> Result<()>,
    publish_all: impl FnOnce(&RecRef, &mut Publish<'_>),
) -> Result<Option<RecRef>> {
    let waits = issue_waits(stream, need)?;
    let dev = if obs.tracing() {
        trace::device_begin(stream)
    } else {
        0
    };
    let refs = objects + keep as usize;
    // A recording counted for nothing would never go back to its pool: count it
    // once and drop it below (with no object, `publish_all` keeps none).
    let counted = refs.max(1);
    let enqueued = enqueue();
    if dev != 0 {
        // Before the op's recording, so nothing waiting on it runs before the end.
        trace::device_end(stream, dev, kind, enqueued.is_ok(), Some(push.seq + 1));
    }
    // A match, not `and_then`: a closure here is not always inlined.
    let recorded = match enqueued {
        Ok(()) => match stream.record_in(&mut push, false, counted, waits) {
            Ok(r) => Ok(r),
            Err(e) => Err(unrecorded(stream, e)),
        },
        Err(e) => Err(e),
    };
    let rec = match recorded {
        Ok(r) => r,
        Err(e) => {
            stream.stats.waits.fetch_add(waits, Ordering::Relaxed);
            return Err(e);
        }
    };
    if obs.on() {
        trace::op_done(&mut push, stream, obs, kind, Waited::Set(need), Some(&rec));
    }
    let mut publish = Publish::new(stream, push);
    publish_all(&rec, &mut publish);
    if keep {
        return Ok(Some(rec));
    }
    if refs == 0 {
        // Its one count is this reference; the push lock goes first, as the drop
        // takes the pool's lock to recycle the node.
        drop(publish);
        drop(rec);
    } else {
        // `objects` references went to the objects; this one was never counted.
        std::mem::forget(rec);
    }
    Ok(None)
}

/// The op was enqueued but its recording failed, so nothing can wait for it: it
/// is waited for on the host before the error returns (a capture is poisoned instead).
/// Library ops and foreign op ends alike.
#[cold]
#[inline(never)]
pub(super) fn unrecorded(stream: &Stream, e: Error) -> Error {
    if !stream.is_capturing() {
        let _ = stream.device.backend.stream_synchronize(stream.raw);
    }
    e
}

#[inline(always)]
pub(super) fn after_op(stream: &Stream) -> Result<()> {
    if engine_mode() == EngineMode::Sync && !stream.is_capturing() {
        stream.stats.engine_syncs.fetch_add(1, Ordering::Relaxed);
        stream.synchronize()?;
    }
    Ok(())
}

/// Runs one tracked op atomically: waits, `enqueue`, one recording, publication.
/// With no objects there is nothing to order or publish, so nothing is recorded.
/// `kind` names the op in traces and counts its bytes.
#[inline(always)]
pub fn run_op(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    run_op_inner(stream, kind, set, enqueue, false).map(drop)
}

/// [`run_op`], also returning the op's recording (None when nothing was recorded).
#[inline(always)]
pub fn run_op_recorded(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<Option<RecRef>> {
    run_op_inner(stream, kind, set, enqueue, true)
}

/// An op with no objects: only its work, under the push lock.
#[inline(always)]
fn push_untracked(
    stream: &Stream,
    kind: OpKind<'_>,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let push = stream.push_lock();
    let obs = trace::observe();
    if obs.on() {
        return push_untracked_observed(stream, push, obs, kind, enqueue);
    }
    enqueue()
}

#[cold]
#[inline(never)]
fn push_untracked_observed(
    stream: &Stream,
    mut push: ObjGuard<'_, PoolInner>,
    obs: Obs,
    kind: OpKind<'_>,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let dev = if obs.tracing() {
        trace::device_begin(stream)
    } else {
        0
    };
    let enqueued = enqueue();
    if dev != 0 {
        trace::device_end(stream, dev, kind, enqueued.is_ok(), None);
    }
    enqueued?;
    if obs.on() {
        trace::op_done(&mut push, stream, obs, kind, Waited::None, None);
    }
    Ok(())
}

#[inline(always)]
fn run_op_inner(
    stream: &Stream,
    kind: OpKind<'_>,
    set: &[Access<'_>],
    enqueue: impl FnOnce() -> Result<()>,
    keep: bool,
) -> Result<Option<RecRef>> {
    if set.is_empty() {
        if let Err(e) = push_untracked(stream, kind, enqueue) {
            crate::capture::op_failed(stream, kind, &e);
            return Err(e);
        }
        after_op(stream)?;
        return Ok(None);
    }
    if stream.is_capturing() {
        if let Some(cap) = stream.current_capture() {
            return cap.run_op(stream, kind, set, enqueue, keep);
        }
    }
    let me = stream.id;
    let rec = {
        let locked = Locked::new(set, stream);
        let mut need = Waits::new();
        collect_waits(stream, &locked, &mut need)?;
        push_op(
            stream,
            false,
            kind,
            &need,
            set.len(),
            keep,
            enqueue,
            |rec, publish| locked.publish(me, rec, publish),
        )?
    };
    after_op(stream)?;
    Ok(rec)
}

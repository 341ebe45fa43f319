//! The host backend's streams: worker threads, waits, host functions and capture.

use super::{
    event_ref, lock, stream_ref, Captured, CapturedStep, HostDevice, HostStream, StepKind, Worker,
    WorkerState,
};
use crate::backend::faults::{self, hit, Kind};
use crate::backend::{HostFn, StreamApi};
use crate::error::{Error, ErrorCode, Result};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

impl StreamApi for HostDevice {
    fn stream_create(&self, _non_blocking: bool, _priority: i32) -> Result<u64> {
        hit("stream_create")?;
        let worker = Arc::new(Worker {
            users: std::sync::atomic::AtomicUsize::new(1),
            state: Mutex::new(WorkerState {
                queue: VecDeque::new(),
                submitted: 0,
                completed: 0,
                shutdown: false,
                capture: None,
                capture_gen: 0,
                capture_invalidated: false,
                capture_thread: None,
            }),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
        });
        let w2 = worker.clone();
        std::thread::Builder::new()
            .name("sluice-host-stream".into())
            .spawn(move || w2.run())
            .map_err(|e| Error::new(ErrorCode::OutOfMemory, format!("spawn worker: {e}")))?;
        Ok(new_stream_handle(worker))
    }

    fn stream_destroy(&self, stream: u64) {
        lock(live_streams()).remove(&stream);
        faults::gone(stream);
        // SAFETY: `stream` came from Box::into_raw and is destroyed once.
        let s = unsafe { Box::from_raw(stream as *mut HostStream) };
        if s.worker
            .users
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            // The worker drains what is queued, then exits; destroy does not block.
            lock(&s.worker.state).shutdown = true;
            s.worker.work_cv.notify_all();
        }
    }

    fn stream_adopt_external(&self, raw: u64) -> Result<u64> {
        hit("stream_adopt_external")?;
        let live = lock(live_streams());
        if !live.contains(&raw) {
            return Err(Error::invalid_argument(format!(
                "0x{raw:x} is not a live host stream"
            )));
        }
        let worker = stream_ref(raw).worker.clone();
        worker
            .users
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        drop(live);
        Ok(new_stream_handle(worker))
    }

    fn stream_release_external(&self, raw: u64) {
        // An adopted host stream shares its worker; releasing it is a destroy.
        self.stream_destroy(raw)
    }

    fn stream_query(&self, stream: u64) -> Result<bool> {
        hit("stream_query")?;
        let mut st = lock(&stream_ref(stream).worker.state);
        if st.capture.is_some() {
            // As cuStreamQuery: refused, and the capture is invalidated.
            st.capture_invalidated = true;
            return Err(Error::new(
                ErrorCode::CaptureUnsupported,
                "stream query on a capturing stream (the capture is invalidated)",
            ));
        }
        Ok(st.completed == st.submitted)
    }

    fn stream_synchronize(&self, stream: u64) -> Result<()> {
        hit("stream_synchronize")?;
        let w = &stream_ref(stream).worker;
        let target = {
            let mut st = lock(&w.state);
            if st.capture.is_some() {
                st.capture_invalidated = true;
                return Err(Error::new(
                    ErrorCode::CaptureUnsupported,
                    "stream synchronize on a capturing stream (the capture is invalidated)",
                ));
            }
            st.submitted
        };
        w.wait_until(target);
        Ok(())
    }

    fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        hit("stream_wait_event")?;
        let (src, seq, captured) = match lock(&event_ref(event).rec).as_ref() {
            None => return Ok(()),
            Some(r) => (r.worker.clone(), r.seq, r.captured),
        };
        let me = stream_ref(stream);
        let mut st = lock(&me.worker.state);
        if let Some(steps) = st.capture.as_mut() {
            match captured {
                // Joining a capture: the other stream's steps are ordered after.
                Some(c) if c.stream != stream => steps.push(CapturedStep::Join(c.stream, c.step)),
                Some(_) => {}
                // An event recorded outside the capture orders nothing inside it.
                None => {}
            }
            return Ok(());
        }
        drop(st);
        if let Some(Captured {
            stream: from, gen, ..
        }) = captured
        {
            // A non-capturing stream waits on an event recorded in a capture: it
            // joins that capture (fork), as with CUDA. The recording stream may be
            // gone (its handle destroyed): then there is nothing to join. The lock
            // keeps it from going while we look.
            let live = lock(live_streams());
            if !live.contains(&from) || !Arc::ptr_eq(&stream_ref(from).worker, &src) {
                return Ok(());
            }
            let from_st = stream_ref(from);
            let origin = *lock(&from_st.origin);
            let Some(origin) = origin.filter(|o| live.contains(o)) else {
                return Ok(());
            };
            // The origin's `joined` first, then the states (as capture_end): the
            // capture cannot end between the check and the join.
            let mut joined = lock(&stream_ref(origin).joined);
            let capturing_gen = {
                let st = lock(&from_st.worker.state);
                st.capture.as_ref().map(|_| st.capture_gen)
            };
            if capturing_gen.is_some_and(|g| g != gen) {
                // Recorded in a capture that has ended; the stream captures again.
                // The driver's rule: no dependency crosses a capture sequence boundary.
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    "the event was recorded in an earlier capture of its stream: \
                     a wait cannot cross a capture sequence boundary",
                ));
            }
            if capturing_gen.is_some() && *lock(&from_st.origin) == Some(origin) {
                let mut me_st = lock(&me.worker.state);
                if me_st.capture.is_some() {
                    return Err(Error::new(
                        ErrorCode::CaptureFailed,
                        "a stream in one capture cannot join another",
                    ));
                }
                me_st.capture = Some(vec![CapturedStep::Join(from, seq as usize)]);
                me_st.capture_gen += 1;
                me_st.capture_invalidated = false;
                drop(me_st);
                *lock(&me.origin) = Some(origin);
                joined.push(stream);
            }
            return Ok(());
        }
        if Arc::ptr_eq(&src, &me.worker) {
            return Ok(());
        }
        me.worker.submit(Arc::new(move || src.wait_until(seq)));
        Ok(())
    }

    fn launch_host_fn(&self, stream: u64, f: HostFn) -> Result<()> {
        hit("launch_host_fn")?;
        self.enqueue(stream, StepKind::Host, Arc::from(f));
        Ok(())
    }
}

/// Live host streams, so that `wrap_external` can validate a raw handle.
fn live_streams() -> &'static Mutex<HashSet<u64>> {
    static LIVE: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A new stream handle on `worker` (a created stream's, or an adopted one's shared
/// worker), registered as live.
fn new_stream_handle(worker: Arc<Worker>) -> u64 {
    let raw = Box::into_raw(Box::new(HostStream {
        worker,
        joined: Mutex::new(Vec::new()),
        origin: Mutex::new(None),
    })) as u64;
    lock(live_streams()).insert(raw);
    faults::made(Kind::Stream, raw, 0);
    raw
}

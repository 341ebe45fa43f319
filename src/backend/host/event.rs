//! The host backend's events: recordings of (worker, sequence).

use super::{
    event_ref, lock, stream_ref, Captured, CapturedStep, HostDevice, HostEvent, Job, Recording,
    Worker,
};
use crate::backend::faults::{self, hit, Kind};
use crate::backend::EventApi;
use crate::error::{Error, ErrorCode, Result};
use std::sync::{Arc, Mutex};
use std::time::Instant;

impl EventApi for HostDevice {
    fn event_create(&self, timing: bool) -> Result<u64> {
        hit("event_create")?;
        let raw = Box::into_raw(Box::new(HostEvent {
            timing,
            rec: Mutex::new(None),
        })) as u64;
        faults::made(Kind::Event, raw, 0);
        Ok(raw)
    }

    fn event_destroy(&self, event: u64) {
        faults::gone(event);
        // SAFETY: `event` came from Box::into_raw in event_create and is destroyed once.
        drop(unsafe { Box::from_raw(event as *mut HostEvent) });
    }

    fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        hit("event_record")?;
        let ev = event_ref(event);
        let stamp = Arc::new(Mutex::new(None));
        let job: Job = if ev.timing {
            let s2 = stamp.clone();
            Arc::new(move || *lock(&s2) = Some(Instant::now()))
        } else {
            Arc::new(|| {})
        };
        let w = stream_ref(stream).worker.clone();
        // Inside a capture the record is a point others may join on, not a job.
        let captured = {
            let mut st = lock(&w.state);
            let gen = st.capture_gen;
            st.capture.as_mut().map(|steps| {
                steps.push(CapturedStep::Mark);
                Captured {
                    stream,
                    step: steps.len() - 1,
                    gen,
                }
            })
        };
        let seq = match captured {
            Some(c) => c.step as u64,
            None => w.submit(job),
        };
        let rec = Recording {
            worker: w,
            seq,
            stamp,
            captured,
        };
        *lock(&ev.rec) = Some(rec);
        Ok(())
    }

    fn event_query(&self, event: u64) -> Result<bool> {
        hit("event_query")?;
        let Some((w, seq, captured)) = last_record(event) else {
            return Ok(true);
        };
        if let Some(c) = captured {
            return Err(captured_event(&w, c, "cuEventQuery"));
        }
        Ok(w.completed() >= seq)
    }

    fn event_synchronize(&self, event: u64) -> Result<()> {
        hit("event_synchronize")?;
        match last_record(event) {
            None => {}
            Some((w, _, Some(c))) => return Err(captured_event(&w, c, "cuEventSynchronize")),
            Some((w, seq, None)) => w.wait_until(seq),
        }
        Ok(())
    }

    fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        let stamp_of = |e: u64| -> Result<Instant> {
            let ev = event_ref(e);
            if !ev.timing {
                return Err(Error::invalid_argument(
                    "elapsed time needs events recorded with SLUICE_EVENT_TIMING",
                ));
            }
            let rec = lock(&ev.rec);
            let r = rec
                .as_ref()
                .ok_or_else(|| Error::new(ErrorCode::InvalidState, "event was never recorded"))?;
            let t = *lock(&r.stamp);
            t.ok_or_else(|| Error::new(ErrorCode::InvalidState, "event has not completed yet"))
        };
        let (a, b) = (stamp_of(start)?, stamp_of(end)?);
        let ms = if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        };
        Ok(ms as f32)
    }
}

/// The event's last recording: its worker, its sequence number (its step, when
/// captured) and where it was captured.
fn last_record(event: u64) -> Option<(Arc<Worker>, u64, Option<Captured>)> {
    lock(&event_ref(event).rec)
        .as_ref()
        .map(|r| (r.worker.clone(), r.seq, r.captured))
}

/// The driver's answer to a query or synchronize of an event whose last record was
/// made in a capture (`tools/driver-probes/graph_update_fidelity.c`): while that
/// capture lives, CUDA_ERROR_CAPTURED_EVENT, and the capture is invalidated (its
/// end fails); once it has ended, CUDA_ERROR_INVALID_VALUE.
fn captured_event(w: &Worker, c: Captured, call: &str) -> Error {
    let mut st = lock(&w.state);
    if st.capture.is_some() && st.capture_gen == c.gen {
        st.capture_invalidated = true;
        return Error::driver(
            907,
            "CUDA_ERROR_CAPTURED_EVENT",
            format_args!(
                "{call} on an event recorded in a capture that is still going on \
                 (the capture is invalidated)"
            ),
        );
    }
    Error::driver(
        1,
        "CUDA_ERROR_INVALID_VALUE",
        format_args!("{call} on an event whose last record was made in a capture that has ended"),
    )
}

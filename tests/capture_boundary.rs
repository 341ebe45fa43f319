//! Where captures meet the real state (each failed before the thirty-sixth
//! session's review): a fresh allocation whose home stream captures, a foreign op
//! begun outside a capture and ended inside it, host waits with two captures on
//! one object, and a stream forked into a capture while another thread issues
//! ops on it; and (failed before the thirty-seventh session) ops on a forked
//! stream while another thread ends the capture.

mod common;
use common::{kit, kit_alone, paused_at};
use sluice::backend::CaptureMode;
use sluice::capture;

const N: usize = 1 << 16;
const MS: u64 = 1_000_000;

/// A fresh allocation on H is valid only in H's order; its first use on another
/// stream must wait for H's allocation point. When H is capturing at that moment,
/// the engine skips the recording (it would be a captured event) and leaves the
/// use on T unordered: T overwrites a block that H's earlier work still reads.
#[test]
fn first_use_of_fresh_allocation_while_home_captures_waits_for_home() {
    let k = kit();
    let (h, t) = (k.stream(), k.stream());
    let x = k.buffer(&h, N);
    let y = k.buffer(&h, N);
    k.fill(&h, &x, 5, 0);
    k.copy(&h, &y, &x, 100 * MS); // slow reader of X on H
    let x_addr = x.addr;
    drop(x); // freed in H's order: its block goes to H's block cache
    let z = k.buffer(&h, N); // fresh allocation on H: X's block, valid in H's order
    assert_eq!(z.addr, x_addr, "block cache reused X's block");
    capture::capture_begin(&h, CaptureMode::Relaxed).unwrap();
    k.fill(&t, &z, 6, 0); // first use on T: must wait for H's allocation point
    let _g = capture::capture_end(&h).unwrap();
    let got = k.read(&h, &y);
    assert!(
        got.iter().all(|&v| v == 5),
        "H's pending reader of the freed block saw T's write: y[0] = {}",
        got[0]
    );
    assert!(k.read(&t, &z).iter().all(|&v| v == 6));
}

/// Control for the test above: the same sequence with no capture passes.
#[test]
fn control_first_use_of_fresh_allocation_without_capture_waits_for_home() {
    let k = kit();
    let (h, t) = (k.stream(), k.stream());
    let x = k.buffer(&h, N);
    let y = k.buffer(&h, N);
    k.fill(&h, &x, 5, 0);
    k.copy(&h, &y, &x, 100 * MS);
    let x_addr = x.addr;
    drop(x);
    let z = k.buffer(&h, N);
    assert_eq!(z.addr, x_addr);
    k.fill(&t, &z, 6, 0);
    assert!(k.read(&h, &y).iter().all(|&v| v == 5));
    assert!(k.read(&t, &z).iter().all(|&v| v == 6));
}

struct Addr(u64);
impl Addr {
    fn get(&self) -> u64 {
        self.0
    }
}

/// A foreign write begun outside a capture, whose work was enqueued before the
/// capture began (so it really runs), and ended while its stream captures: the end
/// is published only into the capture's shadow state, so the real object never gets
/// the writer and a later read on another stream does not wait for the work.
#[test]
fn foreign_write_begun_before_capture_and_ended_inside_is_not_lost() {
    let k = kit();
    if k.dev.kind() != sluice::BackendKind::Host {
        return; // the foreign work is a host callback that writes the memory
    }
    let (s, t) = (k.stream(), k.stream());
    let x = k.buffer(&s, N);
    k.fill(&s, &x, 1, 0);
    s.synchronize().unwrap();
    let op = sluice::engine::ForeignOp::begin(&s, vec![], vec![x.sync.clone()]).unwrap();
    // The caller's own work on S (untracked: no objects), enqueued before the capture.
    let a = Addr(x.addr);
    sluice::ops::host_callback(
        &s,
        move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            // SAFETY: x outlives this callback (the test reads it after a sync).
            let d = unsafe { std::slice::from_raw_parts_mut(a.get() as *mut u32, N) };
            d.fill(7);
            0
        },
        &[],
        &[],
    )
    .unwrap();
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    op.end().unwrap();
    let g = capture::capture_end(&s);
    drop(g);
    // A read on T must be ordered after the foreign write.
    let got = k.read(&t, &x);
    s.synchronize().unwrap();
    assert!(
        got.iter().all(|&v| v == 7),
        "read on T overtook the foreign write: x[0] = {}",
        got[0]
    );
}

/// `sluice_sync_wait_read` is documented to fail with CAPTURE_UNSUPPORTED (and to
/// abort the capture) for an object that a live capture uses. With two captures
/// touching the object, the object remembers only the last, and once that one
/// ends the first capture's use goes unseen.
#[test]
fn host_wait_on_object_used_by_a_live_capture_is_refused_with_two_captures() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, N);
    k.fill(&a, &x, 1, 0);
    a.synchronize().unwrap();
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    capture::capture_begin(&b, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 2, 0); // captured on A
    k.fill(&b, &x, 3, 0); // captured on B
    let gb = capture::capture_end(&b);
    assert!(gb.is_ok());
    // Capture A is live and uses X.
    let w = x.sync.wait_read();
    let ea = capture::capture_end(&a);
    assert!(
        w.is_err(),
        "host wait_read on an object a live capture uses was not refused"
    );
    assert!(ea.is_err(), "capture A was not aborted by the host wait");
}

/// A stream forked into a capture (by waiting on a captured event) while another
/// thread runs ops on it: an op that checked `is_capturing` before the fork takes
/// the real path, but its work and recording land in the capture, and that captured
/// recording is published into the object's real state. After the capture has
/// ended, a host wait on the object then fails as if it waited on a captured event.
#[test]
fn fork_into_capture_racing_an_op_never_publishes_a_captured_recording() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let k = kit();
    let (s, t) = (k.stream(), k.stream());
    let x = k.buffer(&t, 256);
    k.fill(&t, &x, 0, 0);
    t.synchronize().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let leaked = Arc::new(std::sync::Mutex::new(None::<String>));
    let worker = {
        let (t, x, stop, leaked) = (t.clone(), x.clone(), stop.clone(), leaked.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = sluice::ops::memset(&t, &x, 0, 1, 64);
                if let Err(e) = x.sync.wait_read() {
                    if e.message.contains("recorded during a capture") {
                        *leaked.lock().unwrap() = Some(format!("after {n} ops: {e}"));
                        return;
                    }
                }
                n += 1;
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut rounds = 0u64;
    while std::time::Instant::now() < deadline && leaked.lock().unwrap().is_none() {
        capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
        let ev = s.record(false).unwrap();
        let forked = t.wait_event(&ev);
        if forked.is_ok() {
            let back = t.record(false).unwrap();
            let _ = s.wait_event(&back);
        }
        let _ = capture::capture_end(&s);
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let l = leaked.lock().unwrap().clone();
    assert!(
        l.is_none(),
        "captured recording leaked into the real state ({rounds} rounds): {}",
        l.unwrap()
    );
}

/// A capture on S with F forked into it (a wait on S's event) and joined back
/// (S waits on F's), ended on another thread that pauses in the host backend's
/// end after the streams have left the backend's capture (the `capture_end` hook),
/// i.e. before the core has taken F out. Runs `during` on this thread in that
/// window and returns its result with the end's.
fn during_the_end_of_a_fork<R>(
    s: &std::sync::Arc<sluice::Stream>,
    f: &std::sync::Arc<sluice::Stream>,
    during: impl FnOnce() -> R,
) -> (R, sluice::Result<()>) {
    use std::time::Duration;
    capture::capture_begin(s, CaptureMode::Relaxed).unwrap();
    let ev = s.record(false).unwrap();
    f.wait_event(&ev).unwrap();
    assert!(f.is_capturing(), "the wait forked F into the capture");
    let back = f.record(false).unwrap();
    s.wait_event(&back).unwrap();
    let s2 = s.clone();
    let end = paused_at(
        "capture_end",
        Duration::from_millis(200),
        "the end never reached its hook",
        || std::thread::spawn(move || capture::capture_end(&s2).map(drop)),
    );
    // The backend has ended the capture; the end has not returned.
    let r = during();
    (r, end.join().unwrap())
}

/// An op on a forked stream racing the capture's end: routed as captured (F
/// still captured when it looked), and issued after the backend's capture ended,
/// so it cannot land in the capture: it must fail with nothing enqueued, or run
/// for real and be ordered as such. Before the
/// thirty-seventh session the end took F out of the capture outside F's push lock:
/// the op passed its route check, its work ran for real (the backend's capture had
/// ended), and its recording went only to the ended capture's copy of the object's
/// state, so a later read on another stream did not wait for the write.
#[test]
fn op_on_a_fork_racing_capture_end_runs_ordered_or_fails_with_nothing_enqueued() {
    let k = kit_alone();
    if k.dev.kind() != sluice::BackendKind::Host {
        return; // the pause is a host backend hook
    }
    let (s, f, t) = (k.stream(), k.stream(), k.stream());
    let x = k.buffer(&t, N);
    k.fill(&t, &x, 1, 0);
    t.synchronize().unwrap();
    let a = Addr(x.addr);
    let xs = x.sync.clone();
    let (r, ended) = during_the_end_of_a_fork(&s, &f, || {
        sluice::ops::host_callback(
            &f,
            move || {
                // Longer than the end's pause: the write lands after the end returns.
                std::thread::sleep(std::time::Duration::from_millis(800));
                // SAFETY: x outlives this callback (the test synchronizes F).
                let d = unsafe { std::slice::from_raw_parts_mut(a.get() as *mut u32, N) };
                d.fill(9);
                0
            },
            &[],
            &[xs],
        )
    });
    ended.expect("the capture (F joined back) ends fine");
    assert!(!f.is_capturing());
    // Read on T: ordered after every real write the engine knows of.
    let seen = k.read(&t, &x);
    f.synchronize().unwrap();
    let now = k.read(&t, &x);
    match r {
        Ok(()) => {
            // Not in the graph (F's last captured work was joined back before it):
            // it ran for real, so a read on T must come after it.
            assert!(
                seen.iter().all(|&v| v == 9),
                "the op on F returned Ok during the capture's end, and a read on T \
                 overtook its write: x[0] = {} (then {} after synchronizing F)",
                seen[0],
                now[0]
            );
        }
        Err(e) => {
            assert_eq!(e.code, sluice::ErrorCode::InvalidState, "{e}");
            assert!(
                now.iter().all(|&v| v == 1),
                "the op on F failed ({e}), but something ran: x[0] = {}",
                now[0]
            );
        }
    }
}

/// An event recorded on a forked stream while another thread ends the capture is
/// recorded inside the capture (and the end then reports F unjoined) or outside
/// it, and is then an ordinary recording another stream can wait on. Before the
/// thirty-seventh session the backend recorded it outside the capture, but the core
/// marked it as the ended capture's: every wait on it was refused.
#[test]
fn record_on_a_fork_racing_capture_end_is_marked_as_where_it_was_recorded() {
    let k = kit_alone();
    if k.dev.kind() != sluice::BackendKind::Host {
        return; // the pause is a host backend hook
    }
    let (s, f, t) = (k.stream(), k.stream(), k.stream());
    let (rec, ended) = during_the_end_of_a_fork(&s, &f, || f.record(false).unwrap());
    ended.expect("the record is no work: the capture ends fine");
    assert!(
        !rec.in_capture(),
        "recorded after the backend's capture ended, marked as the capture's"
    );
    t.wait_event(&rec)
        .expect("a wait on a recording made outside any capture");
    rec.synchronize().unwrap();
}

/// As above with no hook: a thread records on a forked stream over and over
/// while the capture ends, many rounds. A recording marked as the capture's, made
/// after F was joined back, leaves F unjoined, so the end must fail; one marked as
/// made outside any capture must be one another stream can wait on.
#[test]
fn records_on_a_fork_racing_capture_end_repeatedly() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let k = kit();
    let (s, f, t) = (k.stream(), k.stream(), k.stream());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut rounds = 0u64;
    while std::time::Instant::now() < deadline {
        rounds += 1;
        capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
        let ev = s.record(false).unwrap();
        f.wait_event(&ev).unwrap();
        let back = f.record(false).unwrap();
        s.wait_event(&back).unwrap();
        let go = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (f, go) = (f.clone(), go.clone());
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let mut recs = Vec::new();
                for _ in 0..64 {
                    recs.push(f.record(false).unwrap());
                    if !f.is_capturing() {
                        break;
                    }
                }
                recs
            })
        };
        go.store(true, Ordering::Release);
        let ended = capture::capture_end(&s);
        let recs = recorder.join().unwrap();
        assert!(!f.is_capturing());
        let captured_after_join = recs.iter().filter(|r| r.in_capture()).count();
        assert!(
            ended.is_err() || captured_after_join == 0,
            "round {rounds}: the capture ended fine, yet {captured_after_join} recording(s) \
             made on F after it was joined back are marked as the capture's"
        );
        for r in recs.iter().filter(|r| !r.in_capture()) {
            if let Err(e) = t.wait_event(r) {
                panic!("round {rounds}: a recording made outside the capture was refused: {e}");
            }
        }
    }
    t.synchronize().unwrap();
}

/// A stream forking into a capture (a wait on one of its events) while another
/// thread ends it: the backend's wait must finish before the capture's end goes
/// on, or never be made. Before the thirty-eighth session the fork checked the
/// capture under its own push lock only: the end could run whole (and the graph
/// go) while the fork's driver wait was under way or still to come, a wait on an
/// event of an ended capture that crashed the driver on cuda
/// (`host_fidelity`'s fork race, run 315). Here the fork pauses in the backend's
/// wait, and the end starts meanwhile on this thread.
#[test]
fn a_fork_racing_the_end_finishes_its_backend_wait_before_the_end_goes_on() {
    use std::time::{Duration, Instant};
    let k = kit_alone();
    if k.dev.kind() != sluice::BackendKind::Host {
        return; // the pause is a host backend hook
    }
    let (s, f) = (k.stream(), k.stream());
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    let ev = s.record(false).unwrap();
    let f2 = f.clone();
    let fork = paused_at(
        "stream_wait_event",
        Duration::from_millis(300),
        "the fork never reached the backend",
        || {
            std::thread::spawn(move || {
                let r = f2.wait_event(&ev).map_err(|e| e.code);
                (r, Instant::now())
            })
        },
    );
    let ended = capture::capture_end(&s).map(drop);
    let end_returned = Instant::now();
    let (waited, wait_returned) = fork.join().unwrap();
    assert!(
        wait_returned <= end_returned,
        "the end returned while the fork's backend wait was still under way \
         (the wait: {waited:?}; the end: {:?})",
        ended.as_ref().map_err(|e| &e.message)
    );
    // The fork joined before the end took its participants, and never joined back.
    assert_eq!(waited, Ok(()));
    let e = ended.unwrap_err();
    assert_eq!(e.code, sluice::ErrorCode::CaptureFailed, "{e}");
    assert!(e.message.contains(&format!("stream #{}", f.id)), "{e}");
    assert!(!f.is_capturing() && !s.is_capturing());
    f.synchronize().unwrap();
}

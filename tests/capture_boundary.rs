//! Where captures meet the real state (each failed before the thirty-sixth
//! session's review): a fresh allocation whose home stream captures, a foreign op
//! begun outside a capture and ended inside it, host waits with two captures on
//! one object, and a stream forked into a capture while another thread issues
//! ops on it.

mod common;
use common::kit;
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

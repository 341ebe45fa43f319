//! Gaps found in review (issue 16, and the thirty-sixth session), on the default backend: host in CI,
//! cuda on the GPU. The host runs use the backend's test hooks (`faults`), so the
//! tests of this file run one at a time (`kit_alone`).

mod common;
use common::kit_alone;
use sluice::backend::{faults, CaptureMode};
use sluice::{capture, ops, Buffer, ErrorCode, Stream, SyncObject};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const W: usize = 4096;

#[test]
fn wait_all_waits_for_work_of_streams_already_destroyed() {
    let k = kit_alone();
    let s = k.stream();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let x = sluice::SyncObject::new();
    ops::host_callback(
        &s,
        move || {
            std::thread::sleep(Duration::from_millis(300));
            d2.store(true, Ordering::SeqCst);
            0
        },
        &[],
        &[x],
    )
    .unwrap();
    assert_eq!(
        Arc::strong_count(&s),
        1,
        "the test holds the last reference"
    );
    drop(s);
    let t = Instant::now();
    k.dev.wait_all().unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "wait_all returned after {:?} with the destroyed stream's work still running",
        t.elapsed()
    );
    // The mark is consumed: a second wait_all has nothing left to wait for.
    k.dev.wait_all().unwrap();
}

#[test]
fn a_refused_host_callback_poisons_the_capture() {
    let k = kit_alone();
    let s = k.stream();
    let x = k.buffer(&s, W);
    k.fill(&s, &x, 1, 0);
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.fill(&s, &x, 2, 0);
    refused_callback_fails_the_capture(&k, &s, std::slice::from_ref(&x.sync));
    // The stream is usable and the buffer holds the eager value.
    assert!(k.read(&s, &x).iter().all(|&v| v == 1));

    // An untracked callback (no objects) is refused and poisons just the same.
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    refused_callback_fails_the_capture(&k, &s, &[]);
}

/// A host callback that writes `writes` on capturing `s` is refused (cuda refuses
/// host callbacks in a capture; on host the hook refuses it the same way), and
/// ending the capture then fails, naming the callback.
fn refused_callback_fails_the_capture(
    k: &common::Kit,
    s: &Arc<Stream>,
    writes: &[Arc<SyncObject>],
) {
    if !k.is_cuda() {
        faults::arm("launch_host_fn", 1, ErrorCode::CaptureUnsupported);
    }
    let r = ops::host_callback(s, || 0, &[], writes);
    if !k.is_cuda() {
        assert_eq!(faults::disarm(), 1);
    }
    assert_eq!(r.unwrap_err().code, ErrorCode::CaptureUnsupported);
    let e = capture::capture_end(s)
        .err()
        .expect("capture_end must fail");
    assert_eq!(e.code, ErrorCode::CaptureFailed);
    assert!(e.message.contains("host callback"), "{}", e.message);
    assert!(!s.is_capturing());
}

/// Device bytes alive in the host backend's ledger (None on cuda).
fn device_bytes(k: &common::Kit) -> Option<u64> {
    (!k.is_cuda()).then(|| faults::ledger().device_bytes)
}

#[test]
fn freeing_a_buffer_while_its_home_stream_captures_is_deferred_and_safe() {
    let k = kit_alone();
    faults::track(true);
    let (home, other) = (k.stream(), k.stream());
    // Home's block cache would keep the freed block: no caching here.
    home.set_block_cache_limit(0).unwrap();
    let before = device_bytes(&k);

    // A: used only outside the capture, by a slow reader on another stream.
    let a = k.buffer(&home, W);
    k.fill(&home, &a, 7, 0);
    let out = k.buffer(&other, W);
    k.copy(&other, &out, &a, 50_000_000);
    // B: read by the captured graph, which adds it into C.
    let b = k.buffer(&home, W);
    k.fill(&home, &b, 5, 0);
    let c = k.buffer(&other, W);
    k.fill(&other, &c, 0, 0);
    let bytes = |n: u64| n * W as u64 * 4;
    let live = || device_bytes(&k).zip(before).map(|(now, b0)| now - b0);

    capture::capture_begin(&home, CaptureMode::Relaxed).unwrap();
    k.add(&home, &c, &b, 0);
    drop(a); // not in the graph: its free waits for the end of the capture
    drop(b); // in the graph: the graph keeps its memory
    if let Some(n) = live() {
        assert_eq!(n, bytes(4), "nothing is freed during the capture");
    }
    let g = capture::capture_end(&home).unwrap();
    let exec = g.instantiate().unwrap();
    drop(g);
    // The slow reader still saw A's data.
    assert!(k.read(&other, &out).iter().all(|&v| v == 7));
    for _ in 0..3 {
        exec.launch(&home).unwrap();
    }
    assert!(
        k.read(&other, &c).iter().all(|&v| v == 15),
        "3 replays of c += b"
    );
    k.dev.wait_all().unwrap();
    if let Some(n) = live() {
        assert_eq!(n, bytes(3), "A is freed once the capture ended");
    }
    drop(exec);
    k.dev.wait_all().unwrap();
    if let Some(n) = live() {
        assert_eq!(n, bytes(2), "B is freed with the last graph that uses it");
    }
    // Memory reused after the frees is not touched by anything left over.
    let d = Buffer::alloc(&home, W * 4).unwrap();
    k.fill(&home, &d, 9, 0);
    k.dev.wait_all().unwrap();
    assert!(k.read(&home, &d).iter().all(|&v| v == 9));
    assert!(k.read(&other, &c).iter().all(|&v| v == 15));
    drop((d, out, c));
    faults::track(false);
}

/// Found by the ABI fuzzer: trimming a stream's block cache while it captured put
/// the frees into the graph, and a discarded graph lost them (the memory leaked).
/// Now the blocks stay cached through the capture and go back at a later trim.
#[test]
fn trimming_the_block_cache_during_a_capture_loses_no_memory() {
    let k = kit_alone();
    faults::track(true);
    let s = k.stream();
    let before = device_bytes(&k);
    let x = k.buffer(&s, W);
    drop(k.buffer(&s, W)); // cached by `s`
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    s.set_block_cache_limit(0).unwrap();
    k.fill(&s, &x, 1, 0);
    drop(capture::capture_end(&s).unwrap()); // discarded, never launched
    s.set_block_cache_limit(0).unwrap();
    drop(x);
    s.synchronize().unwrap();
    if let Some(b) = before {
        assert_eq!(device_bytes(&k), Some(b), "a cached block was lost");
    }
    faults::track(false);
}

// ---- the thirty-sixth session's review ------------------------------------------------

/// One exec runs one launch at a time, as `cuGraphLaunch` does: launched on two
/// streams (its objects only read, so the engine orders nothing between them),
/// the host backend ran both at once.
#[test]
fn one_exec_launched_on_two_streams_runs_one_launch_at_a_time() {
    let k = kit_alone();
    if k.is_cuda() {
        return; // a host callback cannot be captured on cuda
    }
    let (cap, s1, s2) = (k.stream(), k.stream(), k.stream());
    let x = SyncObject::new(); // read only
    let in_flight = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let max_seen = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (f, m) = (in_flight.clone(), max_seen.clone());
    capture::capture_begin(&cap, CaptureMode::Relaxed).unwrap();
    ops::host_callback(
        &cap,
        move || {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            f.fetch_sub(1, Ordering::SeqCst);
            0
        },
        std::slice::from_ref(&x),
        &[],
    )
    .unwrap();
    let exec = capture::capture_end(&cap).unwrap().instantiate().unwrap();
    exec.launch(&s1).unwrap();
    exec.launch(&s2).unwrap();
    exec.launch(&s1).unwrap();
    k.dev.wait_all().unwrap();
    assert_eq!(
        max_seen.load(Ordering::SeqCst),
        1,
        "two launches of one exec ran at once"
    );
}

/// A host callback that failed on a stream destroyed while it ran is reported by
/// `wait_all`, which waits for that stream's work.
#[test]
fn wait_all_reports_a_failed_callback_of_a_stream_destroyed_while_busy() {
    let k = kit_alone();
    let s = k.stream();
    let x = SyncObject::new();
    ops::host_callback(
        &s,
        || {
            std::thread::sleep(Duration::from_millis(100));
            7
        },
        &[],
        &[x],
    )
    .unwrap();
    assert_eq!(Arc::strong_count(&s), 1);
    drop(s); // destroyed while busy
    let e = k.dev.wait_all().unwrap_err();
    assert_eq!(e.code, ErrorCode::CallbackFailed, "{e}");
    assert!(e.message.contains("destroyed stream"), "{e}");
    k.dev.wait_all().unwrap(); // reported once
}

/// A graph launch whose bookkeeping fails after the graph was queued (an injected
/// failure of the host function that ends a replay) completes before the error
/// returns: no reader on another stream races its writes.
#[test]
fn a_graph_launch_that_fails_after_queuing_completes_before_its_error() {
    let k = kit_alone();
    if k.is_cuda() {
        return; // the host backend's replay bracket only
    }
    let (s, cap, l, m) = (k.stream(), k.stream(), k.stream(), k.stream());
    let x = k.buffer(&s, 1024);
    k.fill(&s, &x, 1, 0);
    s.synchronize().unwrap();
    let flag = SyncObject::new();
    capture::capture_begin(&cap, CaptureMode::Relaxed).unwrap();
    k.fill(&cap, &x, 2, 100_000_000); // a slow write of 2
    ops::host_callback(&cap, || 0, &[], std::slice::from_ref(&flag)).unwrap(); // a replayed callback
    let exec = capture::capture_end(&cap).unwrap().instantiate().unwrap();
    // The first launch_host_fn sets the replay target, the second clears it.
    faults::arm("launch_host_fn", 2, ErrorCode::OutOfMemory);
    let r = exec.launch(&l);
    assert_eq!(faults::disarm(), 1);
    assert_eq!(r.unwrap_err().code, ErrorCode::OutOfMemory);
    assert_eq!(k.read(&m, &x)[0], 2, "the queued graph had not completed");
    l.synchronize().unwrap();
}

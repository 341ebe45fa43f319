//! The host backend answers as the CUDA driver that `src/backend/cuda/` calls
//! (each failed before the thirty-sixth session's review): a capture in a mode
//! other than relaxed ends on its own thread, a capturing stream refuses queries,
//! host memory registers once, and a fork racing a capture's end never leaves a
//! stream capturing (in the backend and in the core).

mod common;
use common::kit;
use sluice::backend::host;
use sluice::backend::{CaptureMode, EventApi, GraphApi, MemoryApi, StreamApi};
use sluice::capture;
use sluice::{ops, Buffer, ErrorCode};
use std::sync::Arc;

const W: usize = 1024;

// ---------------------------------------------------------------------------
// 1. Capture mode is ignored: a THREAD_LOCAL / GLOBAL capture ends on any thread.
//    cuStreamEndCapture: "If the mode argument to cuStreamBeginCapture was not
//    CU_STREAM_CAPTURE_MODE_RELAXED, this call must be from the same thread as
//    cuStreamBeginCapture" -> CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (908),
//    which sluice maps to CaptureFailed (error.rs: 900..=908).
// ---------------------------------------------------------------------------
#[test]
fn thread_local_capture_ended_on_another_thread_is_refused() {
    for mode in [CaptureMode::ThreadLocal, CaptureMode::Global] {
        let k = kit();
        let s = k.stream();
        let x = k.buffer(&s, W);
        capture::capture_begin(&s, mode).unwrap();
        ops::memset(&s, &x, 0, 1, W * 4).unwrap();
        let s2 = s.clone();
        let r = std::thread::spawn(move || capture::capture_end(&s2).map(|_| ()))
            .join()
            .unwrap();
        let e = r.expect_err(&format!(
            "{mode:?}: ending the capture on another thread succeeded on {}; \
             the driver refuses it (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)",
            k.dev.kind().name()
        ));
        assert_eq!(e.code, ErrorCode::CaptureFailed);
    }
}

// ---------------------------------------------------------------------------
// 2. graph_exec_update compares only per-stream step counts.
//    cuGraphExecUpdate refuses a node whose type differs from its pair's
//    (CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED) and a change of edges
//    (CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED); the cuda backend reports both
//    as Ok(Err(reason)) and the core re-instantiates (UpdateOutcome::Reinstantiated).
// ---------------------------------------------------------------------------
#[test]
fn host_stream_query_on_a_capturing_stream_is_refused_and_invalidates() {
    let d = host::open(0).unwrap();
    let s = d.stream_create(true, 0).unwrap();
    d.capture_begin(s, CaptureMode::Relaxed).unwrap();
    d.launch_host_fn(s, Box::new(|| ())).unwrap();
    let q = d.stream_query(s);
    let end = d.capture_end(s);
    if let Ok(g) = end {
        d.graph_destroy(g);
    }
    d.stream_destroy(s);
    let q = q.map_err(|e| e.code);
    assert!(
        matches!(
            q,
            Err(ErrorCode::CaptureUnsupported | ErrorCode::CaptureFailed)
        ),
        "cuStreamQuery on a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; host: {q:?}"
    );
    assert!(
        end.is_err(),
        "the query invalidated the capture; host ended it fine"
    );
}

#[test]
fn registering_the_same_host_memory_twice_is_refused() {
    let k = kit();
    let mut mem = vec![0u8; 1 << 16];
    // SAFETY: `mem` outlives both buffers.
    let a = unsafe { Buffer::register(&k.dev, mem.as_mut_ptr(), mem.len()) }.unwrap();
    let b = unsafe { Buffer::register(&k.dev, mem.as_mut_ptr(), mem.len()) };
    let twice = b.is_ok();
    // And what the host's table believes once the first of the two is gone:
    drop(a);
    let still = k.dev.host_ptr_is_pinned(mem.as_ptr(), mem.len());
    drop(b);
    assert!(
        !twice,
        "a second registration of the same range succeeded on {} (the driver: \
         CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); after the first buffer was \
         dropped the range still counts as page-locked: {still}",
        k.dev.kind().name()
    );
}

#[test]
fn host_pinned_table_loses_a_block_under_a_nested_registration() {
    let d = host::open(0).unwrap();
    let p = d.pinned_alloc(1 << 16).unwrap();
    assert!(d.host_ptr_is_pinned(p, 1 << 16));
    // Driver: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED. Host: accepted.
    let nested = unsafe { p.add(4096) };
    let reg = d.host_register(nested, 4096);
    let tail_ok = d.host_ptr_is_pinned(unsafe { p.add(16384) }, 4096);
    let reg2 = d.host_register(p, 4096); // same start as the block: overwrites its size
    if reg2.is_ok() {
        d.host_unregister(p); // removes the block's entry too
    }
    let whole_ok = d.host_ptr_is_pinned(p, 1 << 16);
    if reg.is_ok() {
        d.host_unregister(nested);
    }
    d.pinned_free(p);
    assert!(
        reg.is_err() || (tail_ok && whole_ok),
        "register inside a pinned block: host accepted it ({reg:?}, {reg2:?}); then the \
         block's tail counts as pinned: {tail_ok}, the whole block: {whole_ok}"
    );
}

// ---------------------------------------------------------------------------
// 5. A fork racing the capture's end leaves the forked stream capturing for ever.
//    stream_wait_event (stream.rs:123-150) checks that the event's stream still
//    captures, drops that lock, and only then marks the waiting stream capturing and
//    adds it to the origin's `joined` list. A capture_end between the two has
//    already taken `joined`: the waiting stream's capture is never collected, so
//    all its later work is recorded and never runs. The driver makes the wait
//    atomic with the end: either a fork that the end collects, or (after the end)
//    CUDA_ERROR_INVALID_VALUE (tools/driver-probes/captured_event_wait.c, "ended").
// ---------------------------------------------------------------------------
#[test]
fn host_fork_racing_capture_end_never_orphans_the_forked_stream() {
    use std::sync::Barrier;
    let d = Arc::new(host::open(0).unwrap());
    let (o, f) = (
        d.stream_create(true, 0).unwrap(),
        d.stream_create(true, 0).unwrap(),
    );
    let e = d.event_create(false).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let mut orphaned = 0;
    let mut rounds = 0;
    let mut lost_job = false;
    // Until the first orphan (seconds at most here), capped.
    while orphaned == 0 && rounds < 40_000 {
        let i = rounds;
        rounds += 1;
        d.capture_begin(o, CaptureMode::Relaxed).unwrap();
        d.event_record(e, o).unwrap();
        let (d2, b2) = (d.clone(), barrier.clone());
        let waiter = std::thread::spawn(move || {
            b2.wait();
            for _ in 0..(i % 97) {
                std::hint::spin_loop();
            }
            let _ = d2.stream_wait_event(f, e);
        });
        barrier.wait();
        for _ in 0..((i / 97) % 61) {
            std::hint::spin_loop();
        }
        if let Ok(g) = d.capture_end(o) {
            d.graph_destroy(g);
        }
        waiter.join().unwrap();
        if d.capture_active(f).unwrap() {
            orphaned += 1;
            // The capture's end has returned, yet f still captures: a host
            // function enqueued on f now is recorded, and never runs.
            let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let r2 = ran.clone();
            d.launch_host_fn(
                f,
                Box::new(move || r2.store(true, std::sync::atomic::Ordering::SeqCst)),
            )
            .unwrap();
            let sync = d.stream_synchronize(f);
            lost_job = !ran.load(std::sync::atomic::Ordering::SeqCst);
            eprintln!(
                "round {i}: f still captures after the end; its host fn ran: {}; \
                 stream_synchronize(f): {:?}",
                !lost_job,
                sync.map_err(|e| e.code)
            );
            if let Ok(g) = d.capture_end(f) {
                d.graph_destroy(g);
            }
        }
    }
    d.event_destroy(e);
    d.stream_destroy(o);
    d.stream_destroy(f);
    assert_eq!(
        orphaned, 0,
        "{orphaned} of {rounds} rounds left the waiting stream capturing after the \
         capture ended (a job enqueued on it then never ran: {lost_job})"
    );
}

#[test]
fn public_fork_racing_capture_end_never_orphans_the_waiting_stream() {
    use std::sync::Barrier;
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let barrier = Arc::new(Barrier::new(2));
    let mut rounds = 0;
    let mut orphaned = None;
    while orphaned.is_none() && rounds < 10_000 {
        let i = rounds;
        rounds += 1;
        capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
        let rec = a.record(false).unwrap();
        let (b2, bar) = (b.clone(), barrier.clone());
        let waiter = std::thread::spawn(move || {
            bar.wait();
            for _ in 0..(i % 97) {
                std::hint::spin_loop();
            }
            let _ = b2.wait_event(&rec);
        });
        barrier.wait();
        for _ in 0..((i / 97) % 61) {
            std::hint::spin_loop();
        }
        let _ = capture::capture_end(&a);
        waiter.join().unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = ran.clone();
        let cb = ops::host_callback(
            &b,
            move || {
                r2.store(true, std::sync::atomic::Ordering::SeqCst);
                0
            },
            &[],
            &[],
        );
        let sync = b.synchronize();
        let ran = ran.load(std::sync::atomic::Ordering::SeqCst);
        if b.is_capturing() || cb.is_err() || sync.is_err() || !ran {
            orphaned = Some((
                i,
                b.is_capturing(),
                cb.map_err(|e| e.code),
                sync.map_err(|e| e.code),
                ran,
            ));
            std::thread::sleep(std::time::Duration::from_millis(200));
            eprintln!(
                "200 ms later: core says b captures: {}; b.synchronize(): {:?}; \
                 capture_end(b): {:?}; capture_begin(b): {:?}",
                b.is_capturing(),
                b.synchronize().map_err(|e| e.code),
                capture::capture_end(&b).map(|_| ()).map_err(|e| e.message),
                capture::capture_begin(&b, CaptureMode::Relaxed).map_err(|e| e.message),
            );
        }
    }
    assert!(
        orphaned.is_none(),
        "(round, core says capturing, callback enqueue, synchronize, callback ran) = {:?}: \
         after the capture's end returned, work on the waiting stream does not run",
        orphaned
    );
}

//! Lifetimes of sync objects named by open foreign ops (issue 17): an op counted
//! open on an object holds no `Arc` reference to it; the object's state is freed
//! by the last of its `Arc` and the open ops. Destroying the handles and the
//! buffer while ops are open, ending the ops on other threads, destroying their
//! stream, ops begun in a capture: no crash, every state freed once (counted in
//! debug builds by `sluice::sync::live_sync_cores`), and later ops work.

#[path = "support/cabi.rs"]
mod cabi;

use cabi::{begin, close, failed, host_device as device, ok, pair, stream, sync_object as sync};
use sluice::ffi::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

/// The tests count live states process-wide: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cores() -> Option<usize> {
    sluice::sync::live_sync_cores()
}

/// Asserts that `n` states were freed since `before` (debug builds).
fn assert_cores(before: Option<usize>, now: isize, what: &str) {
    if let (Some(b), Some(c)) = (before, cores()) {
        assert_eq!(c as isize - b as isize, now, "{what}");
    }
}

#[test]
fn objects_destroyed_while_reads_are_open_live_until_the_last_end() {
    let _g = serial();
    let d = device();
    let (s1, s2) = (stream(d), stream(d));
    let live0 = sluice_live_handles();
    let before = cores();
    let mut buf = sluice_buffer_t { bits: 0 };
    ok(sluice_buffer_alloc(s1, 4096, &mut buf));
    let mut hb = sluice_sync_t { bits: 0 };
    ok(sluice_buffer_sync(buf, &mut hb));
    let o = sync();
    let objs = [hb, o];
    // A write, then reads on both streams: the next reads take their slots.
    pair(s1, &[], &objs);
    for _ in 0..3 {
        pair(s1, &objs, &[]);
        pair(s2, &objs, &[]);
    }
    assert_cores(before, 2, "two objects");
    // Two threads open reads on their streams; the main thread destroys every
    // handle and the buffer; the first op is ended here (not on its thread), the
    // second on its own thread.
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let (tx2, rx2) = std::sync::mpsc::channel::<()>();
    let go = Arc::new(Barrier::new(2));
    let g2 = go.clone();
    let t1 = {
        let (o1, o2) = (objs[0].bits, objs[1].bits);
        std::thread::spawn(move || {
            let op = begin(
                s1,
                &[sluice_sync_t { bits: o1 }, sluice_sync_t { bits: o2 }],
                &[],
            );
            tx.send(op.bits).unwrap();
        })
    };
    let t2 = {
        let (o1, o2) = (objs[0].bits, objs[1].bits);
        std::thread::spawn(move || {
            let op = begin(
                s2,
                &[sluice_sync_t { bits: o1 }, sluice_sync_t { bits: o2 }],
                &[],
            );
            tx2.send(()).unwrap();
            g2.wait(); // the main thread destroyed the objects and ended op 1
            ok(sluice_op_end(op));
        })
    };
    let op1 = sluice_op_t {
        bits: rx.recv().unwrap(),
    };
    rx2.recv().unwrap();
    t1.join().unwrap();
    ok(sluice_sync_destroy(hb));
    ok(sluice_buffer_free(buf));
    ok(sluice_sync_destroy(o));
    assert_cores(before, 2, "orphaned, kept by the open reads");
    ok(sluice_op_end(op1));
    assert_cores(before, 2, "still kept by the second read");
    go.wait();
    t2.join().unwrap();
    assert_cores(before, 0, "freed by the last end");
    assert_eq!(sluice_live_handles(), live0);
    // Later ops are fine, on fresh objects.
    let (x, y) = (sync(), sync());
    pair(s1, &[], &[x]);
    for _ in 0..3 {
        pair(s1, &[x, y], &[]);
        pair(s2, &[x], &[y]);
    }
    ok(sluice_stream_synchronize(s1));
    ok(sluice_stream_synchronize(s2));
    ok(sluice_sync_destroy(x));
    ok(sluice_sync_destroy(y));
    assert_cores(before, 0, "fresh objects freed");
    close(d, &[s1, s2]);
}

#[test]
fn a_stream_and_its_objects_destroyed_with_ops_open() {
    let _g = serial();
    let d = device();
    let s = stream(d);
    let before = cores();
    let (r, w) = (sync(), sync());
    for _ in 0..3 {
        pair(s, &[r], &[]);
    }
    // A read on the slot path, a read on the exclusive path (first use), a write.
    let fresh = sync();
    let op1 = begin(s, &[r], &[]);
    let op2 = begin(s, &[fresh], &[w]);
    ok(sluice_stream_destroy(s));
    for o in [r, w, fresh] {
        ok(sluice_sync_destroy(o));
    }
    assert_cores(before, 3, "kept by the open ops");
    // Ended on another thread.
    std::thread::spawn(move || ok(sluice_op_end(op2)))
        .join()
        .unwrap();
    assert_cores(before, 1, "the second op's objects freed");
    ok(sluice_op_end(op1));
    assert_cores(before, 0, "all freed");
    assert!(failed(sluice_op_end(op1)), "a second end fails");
    ok(sluice_device_close(d));
}

#[test]
fn a_conflicting_begin_on_an_object_with_an_open_read_changes_nothing() {
    let _g = serial();
    let d = device();
    let (s1, s2) = (stream(d), stream(d));
    let before = cores();
    let o = sync();
    let rd = begin(s1, &[o], &[]);
    let mut op = sluice_op_t { bits: 0 };
    // A write while a read is open fails and takes nothing.
    assert!(failed(sluice_op_begin(
        s2,
        std::ptr::null(),
        0,
        &o,
        1,
        &mut op
    )));
    ok(sluice_sync_destroy(o));
    assert_cores(before, 1, "kept by the open read");
    ok(sluice_op_end(rd));
    assert_cores(before, 0, "freed");
    close(d, &[s1, s2]);
}

#[test]
fn ops_across_a_capture_keep_their_objects() {
    let _g = serial();
    let d = device();
    let s = stream(d);
    let before = cores();
    let (a, b, c) = (sync(), sync(), sync());
    pair(s, &[a, b], &[]);
    // Begun outside the capture (counted open), ended inside it after one of its
    // objects was destroyed.
    let outside = begin(s, &[a, b], &[]);
    if failed(sluice_graph_capture_begin(s, SLUICE_CAPTURE_THREAD_LOCAL)) {
        // No capture on this backend: end the op and stop.
        ok(sluice_op_end(outside));
        for o in [a, b, c] {
            ok(sluice_sync_destroy(o));
        }
        close(d, &[s]);
        return;
    }
    ok(sluice_sync_destroy(a));
    ok(sluice_op_end(outside));
    // Begun in the capture (it keeps references), its object destroyed meanwhile.
    let inside = begin(s, &[c], &[b]);
    ok(sluice_sync_destroy(c));
    ok(sluice_op_end(inside));
    let mut g = sluice_graph_t { bits: 0 };
    ok(sluice_graph_capture_end(s, &mut g));
    ok(sluice_sync_destroy(b));
    // The graph keeps what its captured ops touched (b, c); a was gone.
    assert_cores(before, 2, "kept by the graph");
    ok(sluice_graph_destroy(g));
    assert_cores(before, 0, "freed with the graph");
    ok(sluice_stream_synchronize(s));
    close(d, &[s]);
}

/// Many threads open and end reads of a shared object while another thread
/// keeps replacing it (destroying the old handle): every begin either fails on a
/// stale handle or succeeds, every end succeeds, and every state is freed.
#[test]
fn objects_replaced_under_concurrent_reads_are_all_freed() {
    let _g = serial();
    let d = device();
    let before = cores();
    let current = Arc::new(AtomicU64::new(sync().bits));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..6)
        .map(|t| {
            let (current, stop) = (current.clone(), stop.clone());
            let s = stream(d);
            std::thread::spawn(move || {
                let mut begun = 0u64;
                let mut held: Vec<sluice_op_t> = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) || i < 200 {
                    i += 1;
                    let o = sluice_sync_t {
                        bits: current.load(Ordering::Acquire),
                    };
                    let mut op = sluice_op_t { bits: 0 };
                    if !failed(sluice_op_begin(s, &o, 1, std::ptr::null(), 0, &mut op)) {
                        begun += 1;
                        held.push(op);
                    }
                    // Keep up to t ops open; end the oldest (sometimes none open).
                    while held.len() > t % 3 {
                        ok(sluice_op_end(held.remove(0)));
                    }
                }
                for op in held {
                    ok(sluice_op_end(op));
                }
                ok(sluice_stream_synchronize(s));
                ok(sluice_stream_destroy(s));
                begun
            })
        })
        .collect();
    for _ in 0..300 {
        let old = current.swap(sync().bits, Ordering::AcqRel);
        ok(sluice_sync_destroy(sluice_sync_t { bits: old }));
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let begun: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(begun > 0);
    ok(sluice_sync_destroy(sluice_sync_t {
        bits: current.load(Ordering::Acquire),
    }));
    assert_cores(before, 0, "every replaced object freed");
    ok(sluice_device_close(d));
}

/// Found by the ABI fuzzer under LeakSanitizer: a foreign op begun outside a capture
/// and ended inside it after every one of its objects was destroyed published to no
/// object, yet its end recorded an event counted for none, which was never
/// recycled: the recording node, its event and (once the stream was gone) its
/// stream's pool leaked. The host backend's ledger counts the events left.
#[test]
fn a_captured_end_whose_objects_are_all_gone_leaks_no_event() {
    use sluice::backend::faults;
    let _g = serial();
    let d = device();
    faults::track(true);
    let s = stream(d);
    let (a, b) = (sync(), sync());
    pair(s, &[a, b], &[]);
    let op = begin(s, &[a], &[b]);
    ok(sluice_graph_capture_begin(s, SLUICE_CAPTURE_THREAD_LOCAL));
    ok(sluice_sync_destroy(a));
    ok(sluice_sync_destroy(b));
    ok(sluice_op_end(op));
    let mut g = sluice_graph_t { bits: 0 };
    ok(sluice_graph_capture_end(s, &mut g));
    ok(sluice_graph_destroy(g));
    ok(sluice_stream_synchronize(s));
    close(d, &[s]);
    let left = faults::ledger();
    faults::track(false);
    assert_eq!(left.events, 0, "events left: {left:?}");
    assert_eq!(left.streams, 0, "streams left: {left:?}");
}

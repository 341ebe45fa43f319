//! Gaps found in review (issue 16, the thirty-sixth session, and the frees of
//! buffers under open foreign ops), on the default backend: host in CI,
//! cuda on the GPU. The host runs use the backend's test hooks (`faults`), so the
//! tests of this file run one at a time (`kit_alone`).

mod common;
use common::{kit_alone, paused_at};
use sluice::backend::{faults, CaptureMode};
use sluice::engine::ForeignOp;
use sluice::{capture, ops, Buffer, ErrorCode, Stream, SyncObject};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const W: usize = 4096;

/// Enqueues on `s` a host callback (writing `writes`) that sleeps 300 ms, then
/// sets the flag returned.
fn slow_callback(s: &Arc<Stream>, writes: &[Arc<SyncObject>]) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    ops::host_callback(
        s,
        move || {
            std::thread::sleep(Duration::from_millis(300));
            d2.store(true, Ordering::SeqCst);
            0
        },
        &[],
        writes,
    )
    .unwrap();
    done
}

#[test]
fn wait_all_waits_for_work_of_streams_already_destroyed() {
    let k = kit_alone();
    let s = k.stream();
    let done = slow_callback(&s, &[sluice::SyncObject::new()]);
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

// ---- a buffer freed while a foreign op on it is open --------------------------------
//
// The work of an open foreign op (between begin and end) is enqueued on its stream
// before the end, but known to sluice only at the end, when the op publishes. A
// buffer freed meanwhile was freed after the uses published so far: its memory went
// back (to home's block cache, the pinned pool, the owner's release function, or
// out of registration) while the op's work was still to come. The free now waits
// for the last open op's end, and is ordered after its work.

/// The foreign op's work: spins this long before it touches the memory.
const OPEN_OP_SPIN_NS: u64 = 200_000_000;

/// Sets `done` after `OPEN_OP_SPIN_NS` on `s`, as foreign work (no access declared).
fn slow_foreign_work(s: &Stream, done: &Arc<AtomicBool>) {
    let d = done.clone();
    ops::host_callback(
        s,
        move || {
            std::thread::sleep(Duration::from_nanos(OPEN_OP_SPIN_NS));
            d.store(true, Ordering::SeqCst);
            0
        },
        &[],
        &[],
    )
    .unwrap();
}

/// The next buffer of `W` words on `home`: the block at `addr`, which its block
/// cache hands back.
fn next_buffer_of_the_block(k: &common::Kit, home: &Arc<Stream>, addr: u64) -> Arc<Buffer> {
    let y = k.buffer(home, W);
    assert_eq!(
        y.addr, addr,
        "home's block cache hands the freed block back"
    );
    y
}

/// The next buffer of the block at `addr`, filled on `home`, holds that fill only:
/// the `which` op's write did not land in it.
fn assert_next_buffer_of_the_block_holds_its_own_fill(
    k: &common::Kit,
    home: &Arc<Stream>,
    addr: u64,
    which: &str,
) {
    let y = next_buffer_of_the_block(k, home, addr);
    k.fill(home, &y, 3, 0);
    k.dev.wait_all().unwrap();
    let got = k.read(home, &y);
    assert!(
        got.iter().all(|&v| v == 3),
        "the {which} op's write landed in the next buffer of the block (word 0: {})",
        got[0]
    );
}

#[test]
fn device_memory_freed_while_a_foreign_op_writes_it_is_reused_after_the_ops_work() {
    let k = kit_alone();
    let (home, other) = (k.stream(), k.stream());
    let x = k.buffer(&home, W);
    k.fill(&home, &x, 1, 0);
    let addr = x.addr;
    let op = ForeignOp::begin(&other, vec![], vec![x.sync.clone()]).unwrap();
    drop(x); // freed while the op is open
             // The op's work: a slow write of the memory, on its stream.
    k.fill_untracked(&other, addr, W as u64, 2, OPEN_OP_SPIN_NS);
    op.end().unwrap();
    assert_next_buffer_of_the_block_holds_its_own_fill(&k, &home, addr, "open");
}

/// As above, with a read: the op is counted open in its stream's reader slot, and
/// its end (through the slot, when nothing else is due) must still see the free.
#[test]
fn device_memory_freed_while_a_foreign_op_reads_it_is_reused_after_the_ops_work() {
    let k = kit_alone();
    let (home, other) = (k.stream(), k.stream());
    let x = k.buffer(&home, W);
    k.fill(&home, &x, 1, 0);
    // Reads on `other` first: the next one goes through its reader slot.
    for _ in 0..3 {
        let op = ForeignOp::begin(&other, vec![x.sync.clone()], vec![]).unwrap();
        op.end().unwrap();
    }
    let addr = x.addr;
    let done = Arc::new(AtomicBool::new(false));
    let op = ForeignOp::begin(&other, vec![x.sync.clone()], vec![]).unwrap();
    drop(x);
    slow_foreign_work(&other, &done);
    op.end().unwrap();
    let y = next_buffer_of_the_block(&k, &home, addr);
    // The next write of the block, on home, comes after the read.
    let after = Arc::new(AtomicBool::new(false));
    let (d, a) = (done.clone(), after.clone());
    ops::host_callback(
        &home,
        move || {
            a.store(d.load(Ordering::SeqCst), Ordering::SeqCst);
            0
        },
        &[],
        std::slice::from_ref(&y.sync),
    )
    .unwrap();
    home.synchronize().unwrap();
    assert!(
        after.load(Ordering::SeqCst),
        "the next buffer of the block was written before the open op's read ended"
    );
    k.dev.wait_all().unwrap();
}

#[test]
fn pinned_memory_freed_while_a_foreign_op_writes_it_is_handed_out_after_the_ops_work() {
    let k = kit_alone();
    let s = k.stream();
    // A size no other test takes, so the pool hands this very block back.
    let size = 37 * sluice::memory::PINNED_GRANULARITY;
    let p = Buffer::alloc_pinned(&k.dev, size).unwrap();
    let addr = p.addr;
    let done = Arc::new(AtomicBool::new(false));
    let op = ForeignOp::begin(&s, vec![], vec![p.sync.clone()]).unwrap();
    drop(p);
    slow_foreign_work(&s, &done);
    op.end().unwrap();
    let q = Buffer::alloc_pinned(&k.dev, size).unwrap();
    assert_eq!(q.addr, addr, "the pool hands the freed block back");
    assert!(
        done.load(Ordering::SeqCst),
        "the pool handed the block out before the open op's work ended"
    );
    drop(q);
    s.synchronize().unwrap();
    // The pool's cached blocks go back (nothing left for a leak check at exit).
    k.dev.pinned.trim_to(&k.dev, 0);
}

#[test]
fn registered_memory_freed_while_a_foreign_op_writes_it_stays_registered_until_the_op_ends() {
    let k = kit_alone();
    let s = k.stream();
    let mut host = vec![0u8; 1 << 16];
    let (ptr, len) = (host.as_mut_ptr(), host.len());
    // SAFETY: `host` outlives every registration of it below.
    let r = unsafe { Buffer::register(&k.dev, ptr, len) }.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let op = ForeignOp::begin(&s, vec![], vec![r.sync.clone()]).unwrap();
    drop(r);
    slow_foreign_work(&s, &done);
    // SAFETY: as above.
    let again = unsafe { Buffer::register(&k.dev, ptr, len) };
    assert!(
        again.is_err(),
        "unregistered while the op that uses the memory is still open"
    );
    op.end().unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "the op's end returned with the memory unregistered before its work ended"
    );
    // SAFETY: as above.
    let again = unsafe { Buffer::register(&k.dev, ptr, len) }.expect("unregistered at the end");
    drop(again);
    drop(host);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the release runs on the library's release thread, alive at exit"
)]
fn foreign_memory_freed_while_a_foreign_op_writes_it_is_released_after_the_ops_work() {
    let k = kit_alone();
    let s = k.stream();
    let owner = k.buffer(&s, W); // the memory's owner, alive until the release
    k.fill(&s, &owner, 0, 0);
    s.synchronize().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<bool>();
    let d = done.clone();
    let release = sluice::memory::Release::new(move || {
        let _ = tx.send(d.load(Ordering::SeqCst));
    });
    let f = Buffer::wrap_device(&k.dev, owner.addr, owner.size, Some(release), None, None).unwrap();
    let op = ForeignOp::begin(&s, vec![], vec![f.sync.clone()]).unwrap();
    drop(f);
    slow_foreign_work(&s, &done);
    op.end().unwrap();
    let work_done_at_release = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the release function ran");
    assert!(
        work_done_at_release,
        "the owner's release ran before the open op's work ended"
    );
    drop(owner);
}

/// A stream forked into a capture (a wait on a captured event) and destroyed
/// there, with real work queued before it joined: `wait_all` still waits for that
/// work (the stream cannot record a final mark into the capture).
#[test]
fn wait_all_waits_for_the_work_of_a_stream_destroyed_while_forked_into_a_capture() {
    let k = kit_alone();
    let s = k.stream();
    let f = k.stream();
    let done = slow_callback(&f, &[]);
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    let ev = s.record(false).unwrap();
    f.wait_event(&ev).unwrap();
    assert!(f.is_capturing(), "the wait forked F into the capture");
    drop(ev);
    drop(f);
    let _ = capture::capture_end(&s);
    let t = Instant::now();
    k.dev.wait_all().unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "wait_all returned after {:?} with the destroyed fork's work still running",
        t.elapsed()
    );
}

/// A stream whose last reference goes on another thread while `wait_all` runs:
/// `wait_all` neither finds it alive nor may it miss its final mark. Its drop is
/// held open after the last reference went and before the mark is listed (in the
/// trim of its block cache). Host only: the pause is a host-backend hook.
#[test]
fn wait_all_racing_the_drop_of_a_busy_stream_waits_for_its_work() {
    let k = kit_alone();
    if k.is_cuda() {
        return;
    }
    let s = k.stream();
    // A block in the stream's cache, for its drop to trim.
    drop(k.buffer(&s, W));
    let done = slow_callback(&s, &[]);
    assert_eq!(
        Arc::strong_count(&s),
        1,
        "the test holds the last reference"
    );
    let dropper = paused_at(
        "mem_free_async",
        Duration::from_millis(100),
        "the drop never reached its query",
        || std::thread::spawn(move || drop(s)),
    );
    let t = Instant::now();
    k.dev.wait_all().unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "wait_all returned after {:?} while the dropped stream's work still ran",
        t.elapsed()
    );
    dropper.join().unwrap();
}

/// A lookup of the device's stream list (`wrap_external` asks whether a live
/// stream on the raw stream is capturing) upgrades each entry for a moment: when
/// that upgrade holds the last reference of a stream whose owner dropped it
/// meanwhile, the stream's drop runs inside the lookup, and its drop takes the
/// list's lock to leave the list. Streams are dropped on one thread while another
/// looks the list up; neither may hang.
#[test]
#[cfg_attr(
    miri,
    ignore = "a 3 s race of threads: too slow under Miri, and leaves workers exiting"
)]
fn a_stream_dropped_while_the_stream_list_is_looked_up_does_not_hang() {
    let k = kit_alone();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<&'static str>();
    let (dev, st, t) = (k.dev.clone(), stop.clone(), tx.clone());
    let looker = std::thread::spawn(move || {
        let mut unexpected = None;
        while unexpected.is_none() && !st.load(Ordering::SeqCst) {
            // No live stream has raw handle 0, so the lookup walks every entry;
            // both backends then refuse it without touching the driver (a forged
            // pointer would reach the driver on cuda, and crash it).
            match Stream::wrap_external(&dev, 0) {
                Err(e) if e.code == ErrorCode::InvalidArgument => {}
                other => unexpected = Some(format!("{:?}", other.map(drop))),
            }
        }
        let _ = t.send("looker");
        unexpected
    });
    let (dev, st) = (k.dev.clone(), stop.clone());
    let dropper = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            drop(Stream::create(&dev, 0, 0).unwrap());
        }
        st.store(true, Ordering::SeqCst);
        let _ = tx.send("dropper");
    });
    let mut finished = Vec::new();
    for _ in 0..2 {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(who) => finished.push(who),
            Err(_) => panic!(
                "hung: only {finished:?} finished (a stream's drop inside the list lookup \
                 waits for the list's lock that the lookup holds)"
            ),
        }
    }
    let unexpected = looker.join().unwrap();
    dropper.join().unwrap();
    assert!(
        unexpected.is_none(),
        "wrap_external(0) must be refused as an invalid argument: {unexpected:?}"
    );
}

/// An op end that must wait for what changed while it was open (here a library
/// write of the buffer, published meanwhile) and whose wait fails: the op's work
/// is on its stream but never published, so the end waits for it on the host
/// before it closes the op, or the free it kept would be ordered before that work.
/// Host only: the failure is injected.
#[test]
fn device_memory_freed_while_a_foreign_op_writes_it_is_reused_after_the_ops_work_when_its_end_fails(
) {
    let k = kit_alone();
    if k.is_cuda() {
        return;
    }
    let (home, other) = (k.stream(), k.stream());
    let x = k.buffer(&home, W);
    k.fill(&home, &x, 1, 0);
    let addr = x.addr;
    let op = ForeignOp::begin(&other, vec![], vec![x.sync.clone()]).unwrap();
    // The op's work: a slow write of the first half, on its stream.
    let half = (W / 2) as u64;
    k.fill_untracked(&other, addr, half, 2, OPEN_OP_SPIN_NS);
    // Published while the op is open (its end must wait for it): the second half,
    // so that the two writes of the one object touch no byte in common.
    k.fill_at(
        &home,
        addr + half * 4,
        half,
        5,
        OPEN_OP_SPIN_NS / 2,
        std::slice::from_ref(&x.sync),
    );
    drop(x); // freed while the op is open
    faults::arm("stream_wait_event", 1, ErrorCode::Driver);
    let ended = op.end();
    assert_eq!(faults::disarm(), 1, "the end's wait failed");
    assert_eq!(ended.unwrap_err().code, ErrorCode::Driver);
    assert_next_buffer_of_the_block_holds_its_own_fill(&k, &home, addr, "failed");
}

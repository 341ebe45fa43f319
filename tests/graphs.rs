//! Graph tests (issue 4) on the default backend: host in CI, cuda on the GPU.

mod common;
use common::kit;
use sluice::backend::CaptureMode;
use sluice::capture;
use sluice::graph::UpdateOutcome;
use sluice::graph_cache::GraphCache;
use sluice::{ops, Buffer, ErrorCode, Stream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

const W: usize = 4096;

/// One pipeline step over three buffers: kernels and a device copy.
fn pipeline(k: &common::Kit, s: &Stream, a: &Buffer, b: &Buffer, c: &Buffer, steps: usize) {
    for i in 0..steps {
        match i % 4 {
            0 => k.add(s, b, a, 0),
            1 => k.copy(s, c, b, 0),
            2 => ops::copy(s, a, 0, c, 0, W * 4).unwrap(),
            _ => k.add(s, a, b, 0),
        }
    }
}

fn three(k: &common::Kit, s: &Arc<Stream>, seed: u32) -> [Arc<Buffer>; 3] {
    let bufs = [k.buffer(s, W), k.buffer(s, W), k.buffer(s, W)];
    let init: Vec<u32> = (0..W as u32)
        .map(|i| i.wrapping_mul(seed) ^ 0x5bd1e995)
        .collect();
    for b in &bufs {
        k.write(s, b, &init);
    }
    bufs
}

#[test]
fn captured_pipeline_replays_bit_for_bit_like_eager() {
    let k = kit();
    let s = k.stream();
    let [a1, b1, c1] = three(&k, &s, 7);
    let [a2, b2, c2] = three(&k, &s, 7);
    for _ in 0..10 {
        pipeline(&k, &s, &a1, &b1, &c1, 100);
    }
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    pipeline(&k, &s, &a2, &b2, &c2, 100);
    let g = capture::capture_end(&s).unwrap();
    assert_eq!(g.node_count().unwrap(), 100);
    let exec = g.instantiate().unwrap();
    for _ in 0..10 {
        exec.launch(&s).unwrap();
    }
    for (x, y) in [(&a1, &a2), (&b1, &b2), (&c1, &c2)] {
        assert_eq!(k.read(&s, x), k.read(&s, y));
    }
}

#[test]
fn replay_is_ordered_against_other_streams_both_ways() {
    let k = kit();
    let (cap, other) = (k.stream(), k.stream());
    let x = k.buffer(&cap, W);
    let y = k.buffer(&cap, W);
    // The graph reads X into Y, then writes X.
    capture::capture_begin(&cap, CaptureMode::Relaxed).unwrap();
    k.copy(&cap, &y, &x, 0);
    k.fill(&cap, &x, 99, 0);
    let exec = capture::capture_end(&cap).unwrap().instantiate().unwrap();
    // A writer on another stream, issued before the launch, is waited on.
    k.fill(&other, &x, 5, 20_000_000);
    let launch = k.stream();
    exec.launch(&launch).unwrap();
    // A reader on another stream after the launch sees the graph's write.
    let z = k.buffer(&other, W);
    k.copy(&other, &z, &x, 0);
    assert!(k.read(&other, &z).iter().all(|&v| v == 99));
    assert!(k.read(&launch, &y).iter().all(|&v| v == 5));
}

#[test]
fn capture_rolls_back_sync_state() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, W);
    k.fill(&s, &x, 1, 0);
    assert!(x.sync.has_writer());
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    let r = k.stream();
    k.fill(&s, &x, 2, 0);
    let g = capture::capture_end(&s).unwrap();
    // After the capture, X's last writer is the eager fill again (value 1).
    assert!(k.read(&r, &x).iter().all(|&v| v == 1));
    drop(g);
}

#[test]
fn rejected_operations_name_themselves_and_leave_the_stream_usable() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, W);
    let mut host = vec![0u8; 16];
    type Check<'a> = Box<dyn Fn(&Arc<Stream>) -> sluice::Error + 'a>;
    let checks: Vec<(&str, Check)> = vec![
        (
            "stream synchronize",
            Box::new(|s| s.synchronize().unwrap_err()),
        ),
        ("stream query", Box::new(|s| s.query().unwrap_err())),
        (
            "buffer allocation",
            Box::new(|s| Buffer::alloc(s, 64).err().unwrap()),
        ),
        (
            "copy from pageable host memory",
            Box::new(|s| ops::copy_from_host(s, &x, 0, &[1, 2, 3]).unwrap_err()),
        ),
        (
            "host wait_read",
            Box::new(|s| {
                k.fill(s, &x, 3, 0);
                x.sync.wait_read().unwrap_err()
            }),
        ),
    ];
    for (name, check) in &checks {
        capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
        let e = check(&s);
        assert_eq!(e.code, ErrorCode::CaptureUnsupported, "{name}: {e}");
        assert!(
            e.message.contains(name),
            "message does not name '{name}': {e}"
        );
        let end = capture::capture_end(&s)
            .err()
            .expect("capture must fail after a rejected op");
        assert_eq!(end.code, ErrorCode::CaptureFailed);
        assert!(end.message.contains(name), "{end}");
        assert!(!s.is_capturing());
        k.fill(&s, &x, 4, 0);
        assert!(
            k.read(&s, &x).iter().all(|&v| v == 4),
            "{name}: stream unusable after"
        );
    }
    // Copies to pageable memory and event queries too.
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    let e = ops::copy_to_host(&s, &mut host, &x, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::CaptureUnsupported);
    let ev = s.record(false).unwrap();
    let e = ev.query().unwrap_err();
    assert_eq!(e.code, ErrorCode::CaptureUnsupported);
    assert!(e.message.contains("event query"), "{e}");
    assert!(capture::capture_end(&s).is_err());
    // A rejected event query alone aborts the capture too.
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.fill(&s, &x, 1, 0);
    let ev = s.record(false).unwrap();
    assert_eq!(
        ev.synchronize().unwrap_err().code,
        ErrorCode::CaptureUnsupported
    );
    let end = capture::capture_end(&s)
        .err()
        .expect("a rejected event sync aborts the capture");
    assert!(end.message.contains("event synchronize"), "{end}");
}

#[test]
fn fork_join_capture_and_unjoined_fork_is_rejected() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, W);
    let y = k.buffer(&a, W);
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 10, 0);
    let fork = a.record(false).unwrap();
    b.wait_event(&fork).unwrap();
    assert!(
        b.is_capturing(),
        "waiting on a captured event joins the capture"
    );
    k.copy(&b, &y, &x, 0); // on the fork; the engine orders it after A's fill
    k.add(&b, &y, &x, 0);
    let join = b.record(false).unwrap();
    a.wait_event(&join).unwrap();
    let exec = capture::capture_end(&a).unwrap().instantiate().unwrap();
    assert!(!b.is_capturing());
    exec.launch(&a).unwrap();
    assert!(k.read(&a, &y).iter().all(|&v| v == 20));

    // Unjoined: B does work after its last join point.
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    let fork = a.record(false).unwrap();
    b.wait_event(&fork).unwrap();
    k.fill(&b, &y, 1, 0);
    let e = capture::capture_end(&a).err().unwrap();
    assert_eq!(e.code, ErrorCode::CaptureFailed);
    assert!(e.message.contains("not joined back"), "{e}");
    assert!(!a.is_capturing() && !b.is_capturing());
    k.fill(&b, &y, 2, 0);
    assert!(k.read(&b, &y).iter().all(|&v| v == 2));
    a.synchronize().unwrap();
}

/// A fork joins back through sync objects too: a captured op on the origin that
/// reads what the fork wrote waits for it, and that wait is the join.
#[test]
fn a_tracked_op_on_the_origin_joins_a_fork_back() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, W);
    let y = k.buffer(&a, W);
    let z = k.buffer(&a, W);
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 10, 0);
    let fork = a.record(false).unwrap();
    b.wait_event(&fork).unwrap();
    k.copy(&b, &y, &x, 0);
    k.add(&b, &y, &x, 0); // y = 20, on the fork
    k.copy(&a, &z, &y, 0); // reads y: waits for the fork's add, joining it back
    let exec = capture::capture_end(&a).unwrap().instantiate().unwrap();
    assert!(!b.is_capturing());
    for round in 0..3 {
        k.fill(&a, &z, 0, 0);
        exec.launch(&a).unwrap();
        assert!(
            k.read(&a, &z).iter().all(|&v| v == 20),
            "replay {round} read y before the fork wrote it"
        );
    }

    // Work on the fork after the origin's last wait on it is still unjoined.
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    let fork = a.record(false).unwrap();
    b.wait_event(&fork).unwrap();
    k.fill(&b, &y, 1, 0);
    k.copy(&a, &z, &y, 0);
    k.fill(&b, &x, 2, 0);
    let e = capture::capture_end(&a).err().unwrap();
    assert!(e.message.contains("not joined back"), "{e}");
    a.synchronize().unwrap();
}

/// Sync objects alone do not join a stream to a capture: an op on a stream outside
/// it runs at once, after the objects' real work (not the captured ops), and a
/// replay does not repeat it (the header's `sluice_graph_capture_begin` says so).
#[test]
fn an_op_outside_the_capture_runs_at_once_and_is_not_replayed() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, W);
    let y = k.buffer(&a, W);
    k.fill(&a, &x, 1, 0);
    k.fill(&a, &y, 0, 0);
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 7, 0); // captured: not run
    k.copy(&b, &y, &x, 0); // B is not in the capture: runs now, reading x = 1
    assert!(!b.is_capturing(), "a sync object's order does not fork B");
    let exec = capture::capture_end(&a).unwrap().instantiate().unwrap();
    assert!(
        k.read(&b, &y).iter().all(|&v| v == 1),
        "the copy ran at once"
    );
    k.fill(&b, &y, 0, 0);
    exec.launch(&a).unwrap();
    assert!(k.read(&a, &x).iter().all(|&v| v == 7), "the replay fills x");
    assert!(
        k.read(&a, &y).iter().all(|&v| v == 0),
        "the replay does not repeat B's copy"
    );
}

#[test]
fn update_with_new_pointers_and_params_then_fallback() {
    let k = kit();
    let s = k.stream();
    let (x, y) = (k.buffer(&s, W), k.buffer(&s, W));
    let capture = |f: &dyn Fn()| {
        capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
        f();
        capture::capture_end(&s).unwrap()
    };
    let g1 = capture(&|| k.fill(&s, &x, 1, 0));
    let exec = g1.instantiate().unwrap();
    exec.launch(&s).unwrap();
    assert!(k.read(&s, &x).iter().all(|&v| v == 1));
    let g2 = capture(&|| k.fill(&s, &y, 2, 0)); // new pointer and new value
    assert_eq!(exec.update(&g2).unwrap(), UpdateOutcome::InPlace);
    exec.launch(&s).unwrap();
    assert!(k.read(&s, &y).iter().all(|&v| v == 2));
    assert!(
        k.read(&s, &x).iter().all(|&v| v == 1),
        "the old pointer is no longer written"
    );
    let g3 = capture(&|| {
        k.fill(&s, &x, 3, 0);
        k.add(&s, &y, &x, 0);
    });
    match exec.update(&g3).unwrap() {
        UpdateOutcome::Reinstantiated(why) => assert!(!why.is_empty()),
        other => panic!("a topology change must fall back, got {other:?}"),
    }
    exec.launch(&s).unwrap();
    assert!(k.read(&s, &y).iter().all(|&v| v == 5));
}

#[test]
fn graph_cache_runs_eager_then_captures_then_replays() {
    let k = kit();
    let s = k.stream();
    let (x, acc) = (k.buffer(&s, W), k.buffer(&s, W));
    k.fill(&s, &x, 3, 0);
    k.fill(&s, &acc, 0, 0);
    let cache = GraphCache::new(&k.dev);
    let mut calls = 0;
    for _ in 0..5 {
        cache
            .run(42, &s, &mut || {
                calls += 1;
                k.add(&s, &acc, &x, 0);
                Ok(())
            })
            .unwrap();
    }
    let st = cache.stats();
    assert_eq!(
        (st.eager, st.captured, st.replayed, st.entries),
        (1, 1, 3, 1)
    );
    assert_eq!(
        calls, 2,
        "the body runs for the warm-up and the capture only"
    );
    assert!(
        k.read(&s, &acc).iter().all(|&v| v == 15),
        "five runs add five times"
    );
    let e = cache.run(43, &s, &mut || {
        Err(sluice::Error::invalid_argument("body failed"))
    });
    assert!(e.is_err());
}

#[test]
fn dot_dump_exists_and_parses() {
    let k = kit();
    let s = k.stream();
    let (x, y) = (k.buffer(&s, W), k.buffer(&s, W));
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.fill(&s, &x, 1, 0);
    k.copy(&s, &y, &x, 0);
    let g = capture::capture_end(&s).unwrap();
    let path = std::env::temp_dir().join(format!("sluice-test-{}.dot", std::process::id()));
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    g.debug_dot(&c, true).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.trim_start().starts_with("digraph"), "{text}");
    assert!(text.trim_end().ends_with('}'));
    if let Ok(out) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(&path)
        .output()
    {
        assert!(
            out.status.success(),
            "dot rejected the file: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn concurrent_captures_and_unrelated_work_do_not_interfere() {
    let k = Arc::new(kit());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let (k, stop) = (k.clone(), stop.clone());
        std::thread::spawn(move || {
            let s = k.stream();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 10 {
                let a = k.buffer(&s, 1024);
                k.fill(&s, &a, n, 0); // initcheck: never copy uninitialised memory
                let b = Buffer::alloc_pinned(&k.dev, 4096).unwrap();
                ops::copy(&s, &b, 0, &a, 0, 4096).unwrap();
                s.synchronize().unwrap();
                n += 1;
            }
        })
    };
    let workers: Vec<_> = (0..2u32)
        .map(|t| {
            let k = k.clone();
            std::thread::spawn(move || {
                let s = k.stream();
                let (x, y) = (k.buffer(&s, W), k.buffer(&s, W));
                k.fill(&s, &y, 0, 0);
                for _ in 0..5 {
                    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
                    k.fill(&s, &x, t + 1, 0);
                    k.add(&s, &y, &x, 0);
                    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
                    exec.launch(&s).unwrap();
                }
                assert!(k.read(&s, &y).iter().all(|&v| v == 5 * (t + 1)));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.join().unwrap();
}

#[test]
fn a_graph_keeps_the_memory_of_freed_buffers_alive() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, W);
    let x_addr = x.addr;
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.fill(&s, &x, 7, 0);
    let g = capture::capture_end(&s).unwrap();
    let exec = g.instantiate().unwrap();
    drop(g);
    drop(x); // the caller frees the buffer; the exec still writes its memory
    let y = k.buffer(&s, W);
    assert_ne!(
        y.addr, x_addr,
        "memory a live graph writes must not be reused"
    );
    k.fill(&s, &y, 3, 0);
    exec.launch(&s).unwrap();
    assert!(k.read(&s, &y).iter().all(|&v| v == 3));
    drop(exec); // now the memory is freed, in stream order
    let z = k.buffer(&s, W);
    assert_eq!(
        z.addr, x_addr,
        "freed once the last graph is gone (block cache)"
    );
}

#[test]
fn a_replayed_callback_failure_is_reported_on_the_launch_stream() {
    let k = kit();
    if k.is_cuda() {
        return; // the cuda backend refuses host callbacks in a capture
    }
    let (cap, run) = (k.stream(), k.stream());
    capture::capture_begin(&cap, CaptureMode::Relaxed).unwrap();
    sluice::ops::host_callback(&cap, || 5, &[], &[]).unwrap();
    let exec = capture::capture_end(&cap).unwrap().instantiate().unwrap();
    exec.launch(&run).unwrap();
    let e = run.synchronize().unwrap_err();
    assert_eq!(e.code, ErrorCode::CallbackFailed);
    assert!(e.message.contains(&format!("stream #{}", run.id)), "{e}");
    cap.synchronize().unwrap();
    drop(cap);
    exec.launch(&run).unwrap();
    assert_eq!(
        run.synchronize().unwrap_err().code,
        ErrorCode::CallbackFailed
    );
}

/// A capture keeps its ops' recordings to itself (issue 19): a captured read on the
/// capturing stream used to replace that stream's real reader entry, and ending the
/// capture dropped both, so a later writer did not wait for the real read.
#[test]
fn capture_keeps_the_real_reader_of_its_stream() {
    let k = kit();
    let (c, t) = (k.stream(), k.stream());
    let x = k.buffer(&c, W);
    let y = k.buffer(&c, W);
    let y2 = k.buffer(&c, W);
    k.fill(&c, &x, 1, 0);
    k.fill(&c, &y2, 0, 0);
    k.copy(&c, &y, &x, 30_000_000); // a slow real read of X on C
    capture::capture_begin(&c, CaptureMode::Relaxed).unwrap();
    k.copy(&c, &y2, &x, 0); // a captured read of X on C
    let g = capture::capture_end(&c).unwrap();
    k.fill(&t, &x, 2, 0); // must wait for the real read
    assert!(
        k.read(&c, &y).iter().all(|&v| v == 1),
        "the write overtook the real read"
    );
    drop(g);
}

/// Ops outside a capture never see its recordings: a captured write used to clear
/// the real readers, so a writer on another stream stopped waiting for them.
#[test]
fn ops_outside_a_capture_still_wait_for_real_readers() {
    let k = kit();
    let (a, c, t) = (k.stream(), k.stream(), k.stream());
    let x = k.buffer(&a, W);
    let y = k.buffer(&a, W);
    k.fill(&a, &x, 1, 0);
    k.copy(&a, &y, &x, 30_000_000); // a slow real reader of X on A
    capture::capture_begin(&c, CaptureMode::Relaxed).unwrap();
    k.fill(&c, &x, 7, 0); // a captured write of X
    k.fill(&t, &x, 2, 0); // a real writer on T while the capture is open
    let g = capture::capture_end(&c).unwrap();
    assert!(
        k.read(&a, &y).iter().all(|&v| v == 1),
        "the real writer overtook the real reader"
    );
    assert!(
        k.read(&t, &x).iter().all(|&v| v == 2),
        "the captured write ran"
    );
    drop(g);
}

#[test]
fn graph_cache_evicts_the_least_recently_used_key() {
    let k = kit();
    let s = k.stream();
    let (x, acc) = (k.buffer(&s, W), k.buffer(&s, W));
    k.fill(&s, &x, 1, 0);
    k.fill(&s, &acc, 0, 0);
    let cache = GraphCache::new(&k.dev);
    assert_eq!(cache.max_entries(), 1024);
    cache.set_max_entries(2);
    let before = k.dev.counters().graph_cache_evictions;
    let mut bodies = 0;
    let mut run = |key: u64| {
        cache
            .run(key, &s, &mut || {
                bodies += 1;
                k.add(&s, &acc, &x, 0);
                Ok(())
            })
            .unwrap()
    };
    for key in [1, 2, 1, 2, 1] {
        run(key); // 1 and 2 warm up, are captured, 1 replays
    }
    run(3); // 2 is the least recently used
    let st = cache.stats();
    assert_eq!((st.entries, st.evictions), (2, 1));
    run(1); // still cached: a replay
    run(2); // evicted: eager again
    let st = cache.stats();
    assert_eq!((st.entries, st.evictions), (2, 2), "{st:?}");
    assert_eq!(
        st.eager, 4,
        "keys 1, 2, 3 warm up, and 2 again after its eviction"
    );
    assert_eq!(st.replayed, 2);
    assert_eq!(bodies, 4 + 2);
    assert_eq!(k.dev.counters().graph_cache_evictions - before, 2);
    // Every run added once, whatever path it took.
    assert!(k.read(&s, &acc).iter().all(|&v| v == 8));
    cache.set_max_entries(1);
    assert_eq!(cache.stats().entries, 1);
    cache.set_max_entries(0);
    for key in 10..2000 {
        cache.run(key, &s, &mut || Ok(())).unwrap();
    }
    assert_eq!(cache.stats().entries, 1991, "0 means no limit");
}

/// Found by the ABI fuzzer: destroying the handle of a stream that is still capturing
/// left its capture open for good, and `sluice_device_wait_all` then failed with
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` on every later call. The destroy ends it now.
#[test]
fn destroying_a_capturing_stream_ends_its_capture() {
    use sluice::ffi::*;
    let mut dev = sluice_device_t { bits: 0 };
    assert!(sluice_device_open_default(&mut dev).is_null());
    for refused_alloc in [false, true] {
        let mut s = sluice_stream_t { bits: 0 };
        assert!(sluice_stream_create(dev, 0, 0, &mut s).is_null());
        // A buffer allocated on it keeps the stream alive after its handle is gone.
        let mut home = sluice_buffer_t { bits: 0 };
        assert!(sluice_buffer_alloc(s, 64, &mut home).is_null());
        assert!(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED).is_null());
        if refused_alloc {
            let mut b = sluice_buffer_t { bits: 0 };
            let e = sluice_buffer_alloc(s, 64, &mut b);
            assert_eq!(sluice_error_code(e), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
            sluice_error_free(e);
        }
        assert!(sluice_stream_destroy(s).is_null());
        let e = sluice_device_wait_all(dev);
        let code = sluice_error_code(e);
        sluice_error_free(e);
        assert_eq!(code, 0, "wait_all after destroying a capturing stream");
        assert!(sluice_buffer_free(home).is_null());
    }
    assert!(sluice_device_close(dev).is_null());
}

/// Two sluice handles on one raw stream track their work apart, so neither may
/// capture: the driver would capture the other's work while its tracking took it
/// as run (the ABI fuzzer's use-after-free on the host backend).
#[test]
fn a_raw_stream_with_two_handles_is_not_captured() {
    let k = kit();
    let s = k.stream();
    let w = Stream::wrap_external(&k.dev, s.raw()).unwrap();
    let e = capture::capture_begin(&s, CaptureMode::Relaxed).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("wrap_external"), "{e}");
    assert!(!s.is_capturing());
    drop(w);
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    let e = Stream::wrap_external(&k.dev, s.raw()).unwrap_err();
    assert_eq!(e.code, ErrorCode::CaptureUnsupported);
    capture::capture_end(&s).unwrap();
    drop(Stream::wrap_external(&k.dev, s.raw()).unwrap());
}

/// Seen on the H200 (run 192): `wait_all` checked a stream's capture state, then
/// synchronized it; a capture begun on another thread in between was synchronized
/// on, which failed the wait and invalidated the capture. Now the check and the
/// record that the wait waits for share the stream's push lock with capture begin.
#[test]
fn wait_all_beside_captures_on_another_thread_fails_neither() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, W);
    let stop = AtomicBool::new(false);
    let waits = AtomicU32::new(0);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                k.dev.wait_all().expect("wait_all beside a capture");
                waits.fetch_add(1, Ordering::Relaxed);
            }
        });
        // At least 2000 captures, and on until the waiter has run beside them (on
        // a busy machine it may start late).
        let mut i = 0;
        while i < 2000 || (waits.load(Ordering::Relaxed) < 100 && i < 200_000) {
            capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
            k.fill(&s, &x, i, 0);
            capture::capture_end(&s).expect("a capture beside wait_all");
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(waits.load(Ordering::Relaxed) > 0);
}

/// Found by ThreadSanitizer over the ABI fuzzer (a use-after-free on the host
/// backend): a recording made in a capture that has ended, waited on by a stream
/// outside any capture while its recording stream captured again. The backend took
/// the wait for a fork into the new capture, which sluice did not track, so the
/// waiting stream could be destroyed while that capture still named it. Such a wait,
/// and one that would join two captures, is refused (the driver refuses both), and
/// the refusal poisons the waiting stream's capture.
#[test]
fn a_wait_on_a_recording_of_another_capture_is_refused() {
    let k = kit();
    let (a, b, c) = (k.stream(), k.stream(), k.stream());
    let x = k.buffer(&a, W);
    let y = k.buffer(&c, W);
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 1, 0);
    let old = a.record(false).unwrap();
    drop(capture::capture_end(&a).unwrap());

    // Ended, and its stream captures again: no fork into the new capture.
    capture::capture_begin(&a, CaptureMode::Relaxed).unwrap();
    k.fill(&a, &x, 2, 0);
    let e = b.wait_event(&old).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("has ended"), "{e}");
    assert!(
        !b.is_capturing(),
        "b joined a capture through an old recording"
    );
    drop(b);
    let now = a.record(false).unwrap();

    // A stream in another capture cannot wait on this one's recording.
    capture::capture_begin(&c, CaptureMode::Relaxed).unwrap();
    k.fill(&c, &y, 3, 0);
    let e = c.wait_event(&now).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("two captures"), "{e}");
    let e = capture::capture_end(&c)
        .err()
        .expect("the refused wait poisons c's capture");
    assert_eq!(e.code, ErrorCode::CaptureFailed);
    assert!(e.message.contains("another capture"), "{e}");

    let exec = capture::capture_end(&a).unwrap().instantiate().unwrap();
    exec.launch(&a).unwrap();
    assert!(k.read(&a, &x).iter().all(|&v| v == 2));
    // Ended too: refused from a stream outside any capture.
    let e = c.wait_event(&now).unwrap_err();
    assert!(e.message.contains("has ended"), "{e}");
    c.synchronize().unwrap();
}

/// The host backend's own guard (the core refuses first): a recording made in an
/// earlier capture of its stream does not fork a waiting stream into the stream's
/// current capture.
#[test]
fn the_host_backend_refuses_a_wait_across_a_capture_boundary() {
    use sluice::backend::{BackendKind, DeviceBackend, EventApi, GraphApi, StreamApi};
    let DeviceBackend::Host(h) = DeviceBackend::open(BackendKind::Host, 0).unwrap() else {
        unreachable!("the host kind opens a host device")
    };
    let (a, b) = (
        h.stream_create(false, 0).unwrap(),
        h.stream_create(false, 0).unwrap(),
    );
    let ev = h.event_create(false).unwrap();
    h.capture_begin(a, CaptureMode::Relaxed).unwrap();
    h.event_record(ev, a).unwrap();
    let g = h.capture_end(a).unwrap();
    h.capture_begin(a, CaptureMode::Relaxed).unwrap();
    let e = h.stream_wait_event(b, ev).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("capture sequence boundary"), "{e}");
    h.stream_destroy(b);
    let g2 = h.capture_end(a).unwrap();
    for g in [g, g2] {
        h.graph_destroy(g);
    }
    h.event_destroy(ev);
    h.stream_destroy(a);
}

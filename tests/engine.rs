//! Dependency-engine tests (issue 3). They run on the default backend: host in CI,
//! cuda on the GPU (`SLUICE_BACKEND=cuda`).

mod common;
use common::{kit, scaled, waits};
use sluice::engine::ForeignOp;
use sluice::sync::{self, ObjRef};
use sluice::{Buffer, SyncObject};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const N: usize = 1 << 16;
const MS: u64 = 1_000_000;

#[test]
fn read_after_write_across_streams_without_host_sync() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, N);
    let y = k.buffer(&b, N);
    // Both kernels run once first: with the driver's lazy module loading, a
    // kernel's first launch may wait for work already running on the device.
    k.fill(&a, &x, 0, 0);
    k.fill(&b, &y, 0, 0);
    k.add(&b, &y, &x, 0);
    b.synchronize().unwrap();
    let w0 = waits(&b);
    let t = Instant::now();
    k.fill(&a, &x, 7, 100 * MS); // a slow writer on A
    k.add(&b, &y, &x, 0); // a reader on B, enqueued before A finishes
    let enqueue = t.elapsed();
    assert!(
        enqueue.as_millis() < 50,
        "enqueue blocked the host for {enqueue:?}"
    );
    assert_eq!(waits(&b) - w0, 1, "B waits once, on A's writer event");
    assert!(k.read(&b, &y).iter().all(|&v| v == 7));
}

#[test]
fn write_after_read_reader_sees_old_contents() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, N);
    let y = k.buffer(&a, N);
    k.fill(&a, &x, 1, 0);
    k.copy(&a, &y, &x, 20 * MS); // slow reader of X on A
    k.fill(&b, &x, 2, 0); // writer of X on B
    assert!(
        k.read(&a, &y).iter().all(|&v| v == 1),
        "reader saw the new value"
    );
    assert!(k.read(&b, &x).iter().all(|&v| v == 2));
}

#[test]
fn write_after_write_follows_submission_order() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, N);
    k.fill(&a, &x, 1, 20 * MS);
    k.fill(&b, &x, 2, 0);
    assert!(k.read(&a, &x).iter().all(|&v| v == 2));
}

#[test]
fn readers_on_s_streams_then_one_writer_waits_exactly_s_times() {
    let k = kit();
    let streams: Vec<_> = (0..4).map(|_| k.stream()).collect();
    let w = k.stream();
    let x = k.buffer(&w, 1024);
    let sinks: Vec<_> = streams.iter().map(|s| k.buffer(s, 1024)).collect();
    k.fill(&w, &x, 3, 0);
    for _round in 0..5 {
        for (s, sink) in streams.iter().zip(&sinks) {
            k.copy(s, sink, &x, 0);
        }
    }
    assert!(x.sync.reader_count() <= streams.len());
    assert_eq!(x.sync.reader_count(), streams.len());
    let before = waits(&w);
    k.fill(&w, &x, 4, 0);
    assert_eq!(waits(&w) - before, streams.len() as u64);
    assert_eq!(x.sync.reader_count(), 0, "a write clears the readers");
    for (s, sink) in streams.iter().zip(&sinks) {
        assert!(k.read(s, sink).iter().all(|&v| v == 3));
    }
    assert!(k.read(&w, &x).iter().all(|&v| v == 4));
}

#[test]
fn same_stream_inserts_no_waits() {
    let k = kit();
    let s = k.stream();
    let x = k.buffer(&s, N);
    let y = k.buffer(&s, N);
    k.fill(&s, &y, 0, 0); // y += x below reads y
    for i in 0..50 {
        k.fill(&s, &x, i, 0);
        k.add(&s, &y, &x, 0);
        k.copy(&s, &x, &y, 0);
    }
    assert_eq!(waits(&s), 0);
    s.synchronize().unwrap();
}

#[test]
fn event_reuse_over_100k_ops_keeps_data_right() {
    let k = kit();
    let (p, c) = (k.stream(), k.stream());
    let words = 64;
    let x = k.buffer(&p, words);
    let acc = k.buffer(&c, words);
    k.fill(&c, &acc, 0, 0);
    let ops = scaled(if k.is_cuda() { 60_000 } else { 50_000 });
    // Producer writes x = i; the delayed consumer adds x into acc. Each pair is two
    // tracked ops, so over 100k recordings cycle through the pools.
    let mut expect: u32 = 0;
    for i in 0..ops {
        let v = (i as u32).wrapping_mul(2_654_435_761);
        k.fill(&p, &x, v, 0);
        k.add(&c, &acc, &x, if i % 1000 == 0 { MS } else { 0 });
        expect = expect.wrapping_add(v);
    }
    let got = k.read(&c, &acc);
    assert!(
        got.iter().all(|&v| v == expect),
        "got {} want {expect}",
        got[0]
    );
    let created = p
        .stats
        .events_created
        .load(std::sync::atomic::Ordering::Relaxed)
        + c.stats
            .events_created
            .load(std::sync::atomic::Ordering::Relaxed);
    let records = p.last_seq() + c.last_seq();
    assert!(records >= 2 * ops as u64);
    assert!(
        created < records / 10,
        "events were not recycled: {created} created for {records} records"
    );
}

#[test]
fn host_wait_read_means_complete() {
    let k = kit();
    let a = k.stream();
    let x = k.buffer(&a, N);
    k.fill(&a, &x, 9, 20 * MS);
    x.sync.wait_read().unwrap();
    // An untracked read on an unrelated stream sees the final data.
    let other = k.stream();
    let mut bytes = vec![0u8; N * 4];
    raw_read(&k, &other, &x, &mut bytes);
    assert!(bytes
        .chunks_exact(4)
        .all(|c| u32::from_le_bytes(c.try_into().unwrap()) == 9));
}

/// Reads a buffer without the engine (no waits): a raw driver copy on cuda, a plain
/// memory read on host.
fn raw_read(k: &common::Kit, s: &sluice::Stream, x: &Buffer, out: &mut [u8]) {
    if k.is_cuda() {
        let d = sluice::backend::cuda::driver().unwrap();
        // SAFETY: out has x.size bytes; x is a live device allocation.
        unsafe {
            assert_eq!(
                (d.cuMemcpyAsync)(out.as_mut_ptr() as u64, x.addr, out.len(), s.raw() as _),
                0
            );
            assert_eq!((d.cuStreamSynchronize)(s.raw() as _), 0);
        }
    } else {
        // SAFETY: host "device" memory is host memory of x.size bytes.
        out.copy_from_slice(unsafe { std::slice::from_raw_parts(x.addr as *const u8, out.len()) });
    }
}

#[test]
fn freeing_a_buffer_in_use_does_not_corrupt_pending_reader() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&b, N);
    let y = k.buffer(&a, N);
    k.fill(&b, &x, 5, 0);
    k.copy(&a, &y, &x, 20 * MS); // slow reader of X on A
    drop(x); // free while A still reads it
    let z = k.buffer(&b, N); // likely the same memory
    k.fill(&b, &z, 6, 0);
    assert!(
        k.read(&a, &y).iter().all(|&v| v == 5),
        "pending reader was corrupted"
    );
    assert!(k.read(&b, &z).iter().all(|&v| v == 6));
    assert_eq!(
        z.sync.reader_count(),
        1,
        "a new buffer starts with an empty sync object"
    );
}

#[test]
fn random_dependency_graph_matches_serial_execution() {
    // MXNet's RandSumExpr: random read/write ops over 100 buffers on 4 streams from
    // 4 threads. A ticket fixes the issue order; serial replay of that order on the
    // host gives the expected contents.
    let k = Arc::new(kit());
    let nbuf = 100;
    let words = 256;
    let ops_total = scaled(if k.is_cuda() { 10_000 } else { 4_000 });
    let setup = k.stream();
    let bufs: Vec<Arc<Buffer>> = (0..nbuf).map(|_| k.buffer(&setup, words)).collect();
    for (i, b) in bufs.iter().enumerate() {
        k.fill(&setup, b, i as u32 + 1, 0);
    }
    let log: Arc<Mutex<Vec<(usize, usize, bool)>>> = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (k, bufs, log) = (k.clone(), bufs.clone(), log.clone());
            std::thread::spawn(move || {
                let s = k.stream();
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                for _ in 0..ops_total / 4 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let dst = (rng % nbuf as u64) as usize;
                    let src = ((rng >> 20) % nbuf as u64) as usize;
                    let add = (rng >> 40) % 3 != 0;
                    if dst == src {
                        continue;
                    }
                    let mut l = log.lock().unwrap();
                    if add {
                        k.add(&s, &bufs[dst], &bufs[src], 0);
                    } else {
                        k.copy(&s, &bufs[dst], &bufs[src], 0);
                    }
                    l.push((dst, src, add));
                }
                s
            })
        })
        .collect();
    let streams: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut expect: Vec<u32> = (0..nbuf as u32).map(|i| i + 1).collect();
    for &(d, s, add) in log.lock().unwrap().iter() {
        expect[d] = if add {
            expect[d].wrapping_add(expect[s])
        } else {
            expect[s]
        };
    }
    let reader = k.stream();
    for (i, b) in bufs.iter().enumerate() {
        let got = k.read(&reader, b);
        assert!(
            got.iter().all(|&v| v == expect[i]),
            "buffer {i}: got {} want {}",
            got[0],
            expect[i]
        );
    }
    let total_waits: u64 = streams.iter().map(|s| waits(s)).sum();
    assert!(total_waits > 0);
}

#[test]
fn foreign_op_begin_end_orders_foreign_work() {
    let k = kit();
    let (a, b) = (k.stream(), k.stream());
    let x = k.buffer(&a, N);
    let y = k.buffer(&b, N);
    let xs: [Arc<SyncObject>; 1] = [x.sync.clone()];
    k.fill(&a, &x, 11, 10 * MS);
    // A foreign reader of X on B: begin makes B wait on A's write.
    let before = waits(&b);
    let op = ForeignOp::begin(&b, xs.to_vec(), vec![]).unwrap();
    assert_eq!(waits(&b) - before, 1);
    k.copy(&b, &y, &x, 0); // stands for the foreign work
    op.end().unwrap();
    assert!(k.read(&b, &y).iter().all(|&v| v == 11));
    assert_eq!(x.sync.reader_count(), 1);
}

#[test]
fn eight_threads_share_objects_without_corruption() {
    let k = Arc::new(kit());
    let setup = k.stream();
    let src = k.buffer(&setup, 4096);
    k.fill(&setup, &src, 21, 0);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (k, src) = (k.clone(), src.clone());
            std::thread::spawn(move || {
                let s = k.stream();
                let dst = k.buffer(&s, 4096);
                for _ in 0..200 {
                    k.copy(&s, &dst, &src, 0);
                }
                assert!(k.read(&s, &dst).iter().all(|&v| v == 21));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(src.sync.reader_count() <= 9);
}

/// More objects than the inline capacity of an access set and of a wait list (4):
/// duplicates merge (a read and a write of one object is a write), and the waits
/// stay one per source stream.
#[test]
fn an_op_over_many_objects_merges_duplicates_and_waits_once_per_stream() {
    let k = kit();
    let streams: Vec<_> = (0..6).map(|_| k.stream()).collect();
    let w = k.stream();
    let x = k.buffer(&w, 1024);
    let sinks: Vec<_> = streams.iter().map(|s| k.buffer(s, 1024)).collect();
    k.fill(&w, &x, 9, 0);
    for (s, sink) in streams.iter().zip(&sinks) {
        k.copy(s, sink, &x, MS); // reads x, writes sink: one recording for both
    }
    assert_eq!(x.sync.reader_count(), 6);

    let mut set = sync::AccessSet::with_capacity(9);
    for sink in &sinks {
        set.push(ObjRef::new(&sink.sync), false);
    }
    set.push(ObjRef::new(&x.sync), false);
    set.push(ObjRef::new(&x.sync), true);
    set.push(ObjRef::new(&sinks[2].sync), false);
    set.normalize();
    assert_eq!(set.len(), 7, "six sinks and x, each once");
    let x_access = set.iter().find(|a| a.obj().id == x.sync.id).unwrap();
    assert!(x_access.write(), "read and written counts as a write");
    let ids: Vec<u64> = set.iter().map(|a| a.obj().id).collect();
    assert!(ids.windows(2).all(|p| p[0] < p[1]), "sorted by id: {ids:?}");

    let mut reads: Vec<_> = sinks.iter().map(|b| b.sync.clone()).collect();
    reads.extend([x.sync.clone(), sinks[2].sync.clone()]);
    let before = waits(&w);
    let op = ForeignOp::begin(&w, reads, vec![x.sync.clone()]).unwrap();
    assert_eq!(waits(&w) - before, 6, "one wait per reading stream");
    k.fill(&w, &x, 10, 0); // stands for the foreign write
    op.end().unwrap();
    assert_eq!(x.sync.reader_count(), 0);
    assert!(x.sync.has_writer());
    for (s, sink) in streams.iter().zip(&sinks) {
        assert_eq!(sink.sync.reader_count(), 1, "the op read every sink on w");
        assert!(
            k.read(s, sink).iter().all(|&v| v == 9),
            "copies saw the old x"
        );
    }
    assert!(k.read(&w, &x).iter().all(|&v| v == 10));
}

/// Issue 19's first race: thread A's foreign op (reads X, writes Z on S) and thread
/// B's tracked read of X on S are released together; B then writes X on T. A's
/// `op_end` used to record, unlock, and publish its older S reader over B's newer
/// one, so T waited only for A's op and overwrote X before B's slow read of it.
#[test]
fn op_end_never_publishes_an_older_reader_over_a_newer_one() {
    let k = kit();
    let (s, t) = (k.stream(), k.stream());
    let iters = scaled(20_000);
    let x = k.buffer(&s, 16);
    let z = k.buffer(&s, 16);
    let r = k.buffer(&s, iters);
    k.fill(&s, &x, 0, 0);
    k.fill(&s, &z, 0, 0);
    k.fill(&s, &r, u32::MAX, 0);
    s.synchronize().unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let stop = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let deadline = Instant::now() + std::time::Duration::from_secs(3);
    let foreign = {
        let (s, x, z) = (s.clone(), x.sync.clone(), z.sync.clone());
        let (barrier, stop) = (barrier.clone(), stop.clone());
        std::thread::spawn(move || {
            for i in 0.. {
                barrier.wait();
                if i >= stop.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let op = ForeignOp::begin(&s, vec![x.clone()], vec![z.clone()]).unwrap();
                op.end().unwrap();
                barrier.wait();
            }
        })
    };
    let mut done = 0;
    for i in 0..iters {
        if Instant::now() > deadline {
            break;
        }
        barrier.wait();
        k.copy_word(&s, &r, i, &x, 0, 20_000); // a slow read of X on S
        barrier.wait(); // A's op_end has returned
        sluice::ops::memset(&t, &x, 0, (i + 1) as u8, 64).unwrap();
        done = i + 1;
    }
    stop.store(done, std::sync::atomic::Ordering::Release);
    barrier.wait();
    foreign.join().unwrap();
    let got = k.read(&s, &r);
    let wrong: Vec<usize> = (0..done)
        .filter(|&i| got[i] != (i as u8) as u32 * 0x0101_0101)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {done} reads saw a later write (first at {})",
        wrong.len(),
        wrong[0]
    );
}

/// A foreign op left open while another thread writes one of its objects: `end`
/// waits for that write before recording, so the engine's inference "a completed
/// reader means a completed writer" stays true and nothing after it is unordered.
#[test]
fn a_foreign_op_open_across_a_conflicting_write_keeps_the_bookkeeping_true() {
    let k = kit();
    let (a, s, t, u) = (k.stream(), k.stream(), k.stream(), k.stream());
    let x = k.buffer(&a, N);
    let y = k.buffer(&u, N);
    k.fill(&a, &x, 1, 0);
    a.synchronize().unwrap();
    let op = ForeignOp::begin(&s, vec![x.sync.clone()], vec![]).unwrap();
    k.fill(&t, &x, 2, 30 * MS); // a conflicting write while the op is open
    op.end().unwrap();
    s.synchronize().unwrap(); // S's recording is now known complete
    k.copy(&u, &y, &x, 0); // may skip T's writer only if it is complete
    assert!(
        k.read(&u, &y).iter().all(|&v| v == 2),
        "a later reader overtook the write"
    );
}

#[test]
fn conflicting_foreign_ops_open_at_once_are_refused_not_raced() {
    let k = kit();
    let (s1, s2) = (k.stream(), k.stream());
    let x = SyncObject::new();
    let y = SyncObject::new();
    let conflict = |e: sluice::Error| {
        assert_eq!(e.code, sluice::ErrorCode::InvalidState, "{e}");
        assert!(e.message.contains("still open"), "{e}");
        assert!(e.message.contains(&format!("#{}", x.id)), "{e}");
    };
    // An open writer refuses every other op on the object, on any stream.
    let w = ForeignOp::begin(&s1, vec![], vec![x.clone()]).unwrap();
    conflict(
        ForeignOp::begin(&s2, vec![], vec![x.clone()])
            .err()
            .unwrap(),
    );
    conflict(
        ForeignOp::begin(&s2, vec![x.clone()], vec![])
            .err()
            .unwrap(),
    );
    conflict(
        ForeignOp::begin(&s1, vec![x.clone(), y.clone()], vec![])
            .err()
            .unwrap(),
    );
    // Other objects are free, and a refused begin left nothing open on y.
    let on_y = ForeignOp::begin(&s2, vec![], vec![y.clone()]).unwrap();
    on_y.end().unwrap();
    w.end().unwrap();
    // Readers share; a writer waits for none of them: it is refused while any is open.
    let r1 = ForeignOp::begin(&s1, vec![x.clone()], vec![]).unwrap();
    let r2 = ForeignOp::begin(&s2, vec![x.clone()], vec![]).unwrap();
    conflict(
        ForeignOp::begin(&s2, vec![], vec![x.clone()])
            .err()
            .unwrap(),
    );
    r1.end().unwrap();
    conflict(
        ForeignOp::begin(&s1, vec![], vec![x.clone()])
            .err()
            .unwrap(),
    );
    drop(r2); // dropping an op ends it
    let w2 = ForeignOp::begin(&s2, vec![], vec![x.clone()]).unwrap();
    w2.end().unwrap();
    // The write after the readers waited for both and replaced them.
    assert_eq!(x.reader_count(), 0);
    assert!(x.has_writer());
}

/// Issue 17: readers of a shared object publish through their streams' own reader
/// slots, without the object's lock. Eight threads on eight streams read X slowly
/// (a tracked copy on even threads, a foreign op around the copy on odd ones) in
/// every round, then one writer overwrites X: it must wait for every one of those
/// reads, or a slow read sees the next round's value. From the second round on the
/// readers own their slots and take the slot path.
#[test]
fn a_writer_after_concurrent_slot_readers_waits_for_every_one() {
    const READERS: usize = 8;
    let k = Arc::new(kit());
    let w = k.stream();
    let rounds = scaled(40).max(8);
    let x = k.buffer(&w, 16);
    k.fill(&w, &x, 1000, 0);
    w.synchronize().unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(READERS + 1));
    let readers: Vec<_> = (0..READERS)
        .map(|t| {
            let (k, x, barrier) = (k.clone(), x.clone(), barrier.clone());
            std::thread::spawn(move || {
                let s = k.stream();
                let sink = k.buffer(&s, rounds);
                let tmp = k.buffer(&s, 16);
                k.fill(&s, &sink, u32::MAX, 0);
                k.fill(&s, &tmp, u32::MAX, 0);
                let mut failed = None;
                for round in 0..rounds {
                    barrier.wait(); // the round's value is enqueued
                    if failed.is_none() {
                        if t % 2 == 0 {
                            k.copy_word(&s, &sink, round, &x, 0, 2 * MS);
                        } else {
                            // The foreign work reads x untracked: the op alone orders it.
                            match ForeignOp::begin(&s, vec![x.sync.clone()], vec![]) {
                                Ok(op) => {
                                    k.copy_untracked_src(&s, &tmp, &x, 2 * MS);
                                    if let Err(e) = op.end() {
                                        failed = Some(e.to_string());
                                    }
                                    k.copy_word(&s, &sink, round, &tmp, 0, 0);
                                }
                                Err(e) => failed = Some(e.to_string()),
                            }
                        }
                    }
                    barrier.wait(); // every read of the round is published
                }
                assert!(failed.is_none(), "{failed:?}");
                k.read(&s, &sink)
            })
        })
        .collect();
    let mut writer_waits = Vec::new();
    for round in 0..rounds {
        if round > 0 {
            let before = waits(&w);
            k.fill(&w, &x, 1000 + round as u32, 0);
            writer_waits.push(waits(&w) - before);
        }
        barrier.wait();
        barrier.wait();
    }
    let mut wrong = Vec::new();
    for (t, h) in readers.into_iter().enumerate() {
        let got = h.join().unwrap();
        for (round, &v) in got.iter().enumerate() {
            if v != 1000 + round as u32 {
                wrong.push((t, round, v));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} reads saw another round's value (thread, round, value): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(8)]
    );
    assert!(
        writer_waits.iter().all(|&n| n == READERS as u64),
        "the writer waits once per reading stream: {writer_waits:?}"
    );
}

/// More reading streams than an object has reader slots (16): streams whose slot
/// numbers collide take the slot over in turn, the previous owner's entry moving to
/// the object's other readers. A writer still waits for every stream's newest read.
#[test]
fn more_reading_streams_than_reader_slots_are_all_waited_for() {
    const STREAMS: usize = 21;
    let k = kit();
    let streams: Vec<_> = (0..STREAMS).map(|_| k.stream()).collect();
    let w = k.stream();
    let x = k.buffer(&w, 16);
    let sinks: Vec<_> = streams.iter().map(|s| k.buffer(s, 4)).collect();
    for (s, sink) in streams.iter().zip(&sinks) {
        k.fill(s, sink, u32::MAX, 0);
    }
    for round in 0..4usize {
        k.fill(&w, &x, 500 + round as u32, 0);
        // Twice per round: the second read of a stream replaces its first.
        for _ in 0..2 {
            for (s, sink) in streams.iter().zip(&sinks) {
                k.copy_word(s, sink, round, &x, 0, MS / 2);
            }
        }
        assert_eq!(x.sync.reader_count(), STREAMS, "one entry per stream");
        let before = waits(&w);
        k.fill(&w, &x, 0, 0); // must not overtake any slow read
        assert_eq!(
            waits(&w) - before,
            STREAMS as u64,
            "one wait per reading stream"
        );
        assert_eq!(x.sync.reader_count(), 0);
    }
    for (s, sink) in streams.iter().zip(&sinks) {
        assert_eq!(k.read(s, sink), vec![500, 501, 502, 503]);
    }
}

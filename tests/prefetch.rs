//! Prefetcher tests (issue 12), on the default backend: host in CI, cuda on the GPU.

mod common;
use common::{kit, scaled};
use sluice::engine::ForeignOp;
use sluice::prefetch::{FillOutcome, Prefetcher};
use sluice::{Buffer, ErrorCode, Stream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

/// Every test holds it: one counts the device's pinned memory, which the others use.
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes of segment `seg` of batch `key`, `len` long.
fn payload(key: u64, seg: usize, len: usize) -> Vec<u8> {
    let mut x = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seg as u64 + 1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Segment lengths of batch `key`: variable, sometimes 0.
fn lens(key: u64, caps: &[usize]) -> Vec<usize> {
    caps.iter()
        .enumerate()
        .map(|(i, &c)| match (key + i as u64) % 7 {
            0 => 0,
            1 => c,
            r => (c * r as usize / 7).max(1),
        })
        .collect()
}

/// Reads a leased batch's segments back through tracked copies on `s`.
fn read_batch(s: &Arc<Stream>, view: &sluice::prefetch::BatchView) -> Vec<Vec<u8>> {
    view.buffers
        .iter()
        .zip(&view.segments)
        .map(|(b, &(_, len))| {
            let mut out = vec![0u8; len];
            if len > 0 {
                sluice::ops::copy_to_host(s, &mut out, b, 0).expect("read batch");
            }
            out
        })
        .collect()
}

#[test]
fn batches_arrive_in_order_with_their_bytes_at_every_depth() {
    let _alone = alone();
    let k = kit();
    let caps = [96usize, 40, 8];
    let per_depth = scaled(10_000) / 8;
    for depth in 1..=8u32 {
        let pf = Prefetcher::create(&k.dev, depth, &caps).unwrap();
        let consumer = k.stream();
        let producer = {
            let pf = pf.clone();
            std::thread::spawn(move || {
                for key in 0..per_depth as u64 {
                    let l = lens(key, &caps);
                    let segs: Vec<Vec<u8>> =
                        (0..caps.len()).map(|i| payload(key, i, l[i])).collect();
                    let refs: Vec<&[u8]> = segs.iter().map(|v| v.as_slice()).collect();
                    assert_eq!(pf.push(&refs, None).unwrap(), key);
                }
                pf.close_input();
            })
        };
        let mut seen = 0u64;
        loop {
            match pf.next(&consumer, Some(Duration::from_secs(30))) {
                Ok(view) => {
                    assert_eq!(view.seq, seen, "depth {depth}: batches out of order");
                    let l = lens(seen, &caps);
                    let got = read_batch(&consumer, &view);
                    for (i, g) in got.iter().enumerate() {
                        assert_eq!(view.segments[i].1, l[i]);
                        assert!(
                            *g == payload(seen, i, l[i]),
                            "depth {depth}: batch {seen} segment {i} has the wrong bytes"
                        );
                    }
                    pf.release(view.seq).unwrap();
                    seen += 1;
                }
                Err(e) => {
                    assert_eq!(e.error.code, ErrorCode::EndOfData, "{:?}", e.error);
                    break;
                }
            }
        }
        producer.join().unwrap();
        assert_eq!(seen, per_depth as u64, "depth {depth}: batches lost");
        let st = pf.stats();
        assert_eq!(st.batches, per_depth as u64);
        pf.close();
    }
}

#[test]
fn a_refill_waits_on_the_device_for_the_consumers_work() {
    let _alone = alone();
    // Depth 1: the next push reuses the slot the slow consumer kernel still reads.
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 1, &[4096]).unwrap();
    let s = k.stream();
    let out = (0..8).map(|_| k.buffer(&s, 1024)).collect::<Vec<_>>();
    let word = |v: u32| -> Vec<u8> { (0..1024).flat_map(|_| v.to_le_bytes()).collect() };
    // Warm the kernels.
    k.fill(&s, &out[0], 0, 0);
    s.synchronize().unwrap();
    let pusher = {
        let pf = pf.clone();
        std::thread::spawn(move || {
            for v in 0..8u32 {
                pf.push(&[&word(v + 1)], None).unwrap();
            }
        })
    };
    for (i, o) in out.iter().enumerate() {
        let view = pf.next(&s, Some(Duration::from_secs(30))).unwrap();
        // A slow read of the batch, then release at once. Every other read is not
        // declared: the lease alone orders the refill after it.
        if i % 2 == 0 {
            k.copy(&s, o, &view.buffers[0], 5 * MS);
        } else {
            k.copy_untracked_src(&s, o, &view.buffers[0], 5 * MS);
        }
        pf.release(view.seq).unwrap();
    }
    pusher.join().unwrap();
    for (i, o) in out.iter().enumerate() {
        assert!(
            k.read(&s, o).iter().all(|&v| v == i as u32 + 1),
            "batch {i} was overwritten before the consumer read it"
        );
    }
    pf.close();
}

#[test]
fn a_producer_blocks_at_the_depth_and_a_release_unblocks_it() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 3, &[64]).unwrap();
    for _ in 0..3 {
        pf.push(&[&[1u8; 64]], Some(Duration::from_millis(100)))
            .unwrap();
    }
    let t = Instant::now();
    let e = pf
        .push(&[&[1u8; 64]], Some(Duration::from_millis(50)))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e:?}");
    assert!(t.elapsed() >= Duration::from_millis(45));
    let s = k.stream();
    let v = pf.next(&s, None).unwrap();
    pf.release(v.seq).unwrap();
    pf.push(&[&[2u8; 64]], Some(Duration::from_secs(10)))
        .unwrap();
    pf.close();
}

#[test]
fn fewer_batches_than_the_depth_then_end_of_data() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 8, &[16]).unwrap();
    pf.push(&[&[7u8; 16]], None).unwrap();
    pf.push(&[&[8u8; 3]], None).unwrap();
    pf.close_input();
    let e = pf.push(&[&[9u8; 16]], None).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    let s = k.stream();
    for want in 0..2 {
        let v = pf.next(&s, Some(Duration::from_secs(10))).unwrap();
        assert_eq!(v.seq, want);
        pf.release(v.seq).unwrap();
    }
    let t = Instant::now();
    let e = pf.next(&s, Some(Duration::from_secs(10))).unwrap_err();
    assert_eq!(e.error.code, ErrorCode::EndOfData);
    assert!(t.elapsed() < Duration::from_secs(1), "end of data waited");
    pf.close();
}

#[test]
fn the_consumer_closing_early_leaves_nothing_blocked() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 2, &[256]).unwrap();
    let s = k.stream();
    let producer = {
        let pf = pf.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while pf.push(&[&[3u8; 256]], None).is_ok() {
                n += 1;
            }
            n
        })
    };
    let v = pf.next(&s, None).unwrap();
    // Destroy with a batch leased and the producer blocked at the depth.
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    pf.close();
    let pushed = producer.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "close was slow");
    assert!(pushed >= 2, "the producer pushed {pushed}");
    let e = pf.release(v.seq).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidHandle);
    let e = pf.next(&s, None).unwrap_err();
    assert_eq!(e.error.code, ErrorCode::InvalidHandle);
    s.synchronize().unwrap();
}

#[test]
fn a_fill_error_arrives_in_its_batchs_place_and_nothing_is_lost() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 4, &[32, 8]).unwrap();
    pf.start_producers(
        3,
        Arc::new(|f: &mut sluice::prefetch::Fill<'_>| {
            let seq = f.ticket.seq;
            if seq >= 20 {
                return FillOutcome::End;
            }
            if seq == 5 {
                return FillOutcome::Failed("disk read failed".into());
            }
            if seq == 9 {
                f.len[0] = 33; // over the capacity
                return FillOutcome::Ready;
            }
            for (i, &(p, cap)) in f.host.iter().enumerate() {
                let bytes = payload(seq, i, cap);
                // SAFETY: the slot's pinned memory, `cap` bytes, ours during the fill.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, cap) };
                f.len[i] = cap;
            }
            FillOutcome::Ready
        }),
    )
    .unwrap();
    let s = k.stream();
    let mut got = Vec::new();
    loop {
        match pf.next(&s, Some(Duration::from_secs(30))) {
            Ok(v) => {
                let data = read_batch(&s, &v);
                assert_eq!(data[0], payload(v.seq, 0, 32), "batch {}", v.seq);
                pf.release(v.seq).unwrap();
                got.push(Ok(v.seq));
            }
            Err(e) if e.error.code == ErrorCode::EndOfData => break,
            Err(e) => {
                let seq = e.seq.expect("a producer error carries its batch number");
                assert!(
                    e.error.message.contains(&format!("batch {seq}")),
                    "{:?}",
                    e.error
                );
                got.push(Err((seq, e.error.code)));
            }
        }
    }
    let mut want: Vec<_> = (0..20u64).map(Ok).collect();
    want[5] = Err((5, ErrorCode::CallbackFailed));
    want[9] = Err((9, ErrorCode::OutOfRange));
    assert_eq!(got, want);
    pf.close();
}

#[test]
fn pushes_from_many_threads_keep_each_threads_order_and_lose_nothing() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 4, &[16]).unwrap();
    let per = scaled(2_000) as u64 / 4;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let pf = pf.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&t.to_le_bytes());
                    b[8..].copy_from_slice(&i.to_le_bytes());
                    pf.push(&[&b], None).unwrap();
                }
            })
        })
        .collect();
    let closer = {
        let pf = pf.clone();
        std::thread::spawn(move || {
            for t in threads {
                t.join().unwrap();
            }
            pf.close_input();
        })
    };
    // The consumer hops threads: each batch is taken on a new one.
    let next_of = Arc::new(Mutex::new(vec![0u64; 4]));
    let count = Arc::new(AtomicU64::new(0));
    loop {
        let (pf, k2, next_of, count) = (pf.clone(), kit(), next_of.clone(), count.clone());
        let done = std::thread::spawn(move || {
            let s = k2.stream();
            match pf.next(&s, Some(Duration::from_secs(30))) {
                Ok(v) => {
                    let b = &read_batch(&s, &v)[0];
                    let t = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
                    let i = u64::from_le_bytes(b[8..].try_into().unwrap());
                    let mut n = next_of.lock().unwrap();
                    assert_eq!(i, n[t], "producer {t}'s batches out of order");
                    n[t] += 1;
                    assert_eq!(v.seq, count.fetch_add(1, Ordering::SeqCst));
                    pf.release(v.seq).unwrap();
                    s.synchronize().unwrap();
                    false
                }
                Err(e) => {
                    assert_eq!(e.error.code, ErrorCode::EndOfData);
                    true
                }
            }
        })
        .join()
        .unwrap();
        if done {
            break;
        }
    }
    closer.join().unwrap();
    assert_eq!(*next_of.lock().unwrap(), vec![per; 4]);
    pf.close();
}

#[test]
fn graph_mode_copies_into_fixed_buffers_like_eager() {
    let _alone = alone();
    let k = kit();
    let caps = [256usize, 64];
    let n = 100u64;
    let eager = Prefetcher::create(&k.dev, 2, &caps).unwrap();
    let fixed = Prefetcher::create(&k.dev, 2, &caps).unwrap();
    for pf in [&eager, &fixed] {
        let pf = pf.clone();
        std::thread::spawn(move || {
            for key in 0..n {
                let segs: Vec<Vec<u8>> = caps
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| payload(key, i, c))
                    .collect();
                let refs: Vec<&[u8]> = segs.iter().map(|v| v.as_slice()).collect();
                pf.push(&refs, None).unwrap();
            }
            pf.close_input();
        });
    }
    let s = k.stream();
    let dst: Vec<Arc<Buffer>> = caps
        .iter()
        .map(|&c| Buffer::alloc(&s, c).unwrap())
        .collect();
    let refs: Vec<&Buffer> = dst.iter().map(|b| &**b).collect();
    for key in 0..n {
        let v = eager.next(&s, None).unwrap();
        let e = read_batch(&s, &v);
        eager.release(v.seq).unwrap();
        let w = fixed.next_into(&s, &refs, None).unwrap();
        assert_eq!(w.seq, key);
        for (i, b) in dst.iter().enumerate() {
            let mut got = vec![0u8; caps[i]];
            sluice::ops::copy_to_host(&s, &mut got, b, 0).unwrap();
            assert_eq!(got, e[i], "batch {key} segment {i}");
        }
    }
    assert_eq!(
        fixed.next_into(&s, &refs, None).unwrap_err().error.code,
        ErrorCode::EndOfData
    );
    eager.close();
    fixed.close();
}

#[test]
fn pinned_memory_stays_flat_over_many_batches() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 2, &[4096]).unwrap();
    let pinned0 = k.dev.pinned.stats();
    let s = k.stream();
    let producer = {
        let pf = pf.clone();
        std::thread::spawn(move || {
            for _ in 0..scaled(10_000) {
                pf.push(&[&[5u8; 4096]], None).unwrap();
            }
            pf.close_input();
        })
    };
    while let Ok(v) = pf.next(&s, None) {
        pf.release(v.seq).unwrap();
    }
    producer.join().unwrap();
    assert_eq!(pf.stats().pinned_bytes, 2 * 4096);
    let pinned1 = k.dev.pinned.stats();
    assert_eq!(
        (pinned1.bytes_in_use, pinned1.misses),
        (pinned0.bytes_in_use, pinned0.misses),
        "pinned memory changed: {pinned0:?} -> {pinned1:?}"
    );
    pf.close();
}

/// One batch in 8 is timed (batch 0 first), and its timing is taken when its slot is
/// reused: the statistic appears once batch `depth` has taken batch 0's slot.
#[test]
fn copy_rate_comes_from_the_timed_batches() {
    let _alone = alone();
    let k = kit();
    const MIB: usize = 1 << 20;
    let pf = Prefetcher::create(&k.dev, 2, &[MIB]).unwrap();
    let s = k.stream();
    let batch = vec![7u8; MIB];
    for i in 0..2u64 {
        assert_eq!(pf.push(&[&batch], None).unwrap(), i);
        let v = pf.next(&s, None).unwrap();
        pf.release(v.seq).unwrap();
    }
    assert_eq!(pf.stats().copy_gbps, 0.0, "no slot reused yet");
    for _ in 0..2 {
        pf.push(&[&batch], None).unwrap(); // batch 2 reuses batch 0's slot
        let v = pf.next(&s, None).unwrap();
        pf.release(v.seq).unwrap();
    }
    let st = pf.stats();
    assert_eq!(st.bytes, 4 * MIB as u64, "every batch's bytes count");
    assert!(
        st.copy_gbps > 0.0 && st.copy_gbps.is_finite(),
        "batch 0 was timed: {st:?}"
    );
    pf.close();
}

#[test]
fn bad_arguments_get_clear_errors() {
    let _alone = alone();
    let k = kit();
    let code = |r: sluice::Result<Arc<Prefetcher>>| r.err().map(|e| e.code);
    assert_eq!(
        code(Prefetcher::create(&k.dev, 65, &[8])),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(
        code(Prefetcher::create(&k.dev, 2, &[])),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(
        code(Prefetcher::create(&k.dev, 2, &[8, 0])),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(
        code(Prefetcher::create(&k.dev, 2, &[8; 9])),
        Some(ErrorCode::InvalidArgument)
    );
    let pf = Prefetcher::create(&k.dev, 2, &[8, 8]).unwrap();
    let e = pf.push(&[&[0u8; 9], &[0u8; 1]], None).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert!(e.message.contains("segment 0"), "{e:?}");
    let e = pf.push(&[&[0u8; 1]], None).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    // Nothing was queued by the failed pushes.
    let (t, _) = pf.acquire(None).unwrap();
    assert_eq!(t.seq, 0);
    pf.submit(t, &[8, 8]).unwrap();
    assert_eq!(
        pf.submit(t, &[8, 8]).unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(pf.cancel(t).unwrap_err().code, ErrorCode::InvalidArgument);
    let s = k.stream();
    let v = pf.next(&s, None).unwrap();
    assert_eq!(
        pf.release(v.seq + 1).unwrap_err().code,
        ErrorCode::InvalidState
    );
    pf.release(v.seq).unwrap();
    assert_eq!(pf.release(v.seq).unwrap_err().code, ErrorCode::InvalidState);
    let small = Buffer::alloc(&s, 4).unwrap();
    let e = pf.next_into(&s, &[&small, &small], None).unwrap_err();
    assert_eq!(e.error.code, ErrorCode::OutOfRange);
    let e = pf.next_into(&s, &[&small], None).unwrap_err();
    assert_eq!(e.error.code, ErrorCode::InvalidArgument);
    pf.close();
}

#[test]
fn a_graph_captured_once_replays_over_every_batch() {
    let _alone = alone();
    use sluice::backend::CaptureMode;
    use sluice::capture;
    let k = kit();
    let cap = 1024usize; // bytes: 256 words
    let n = 100u64;
    let pf = Prefetcher::create(&k.dev, 2, &[cap]).unwrap();
    let eager = Prefetcher::create(&k.dev, 2, &[cap]).unwrap();
    for p in [&pf, &eager] {
        let p = p.clone();
        std::thread::spawn(move || {
            for key in 0..n {
                p.push(&[&payload(key, 0, cap)], None).unwrap();
            }
            p.close_input();
        });
    }
    let s = k.stream();
    let fixed = Buffer::alloc(&s, cap).unwrap();
    let acc = Buffer::alloc(&s, cap).unwrap();
    let acc_eager = Buffer::alloc(&s, cap).unwrap();
    k.fill(&s, &acc, 0, 0);
    k.fill(&s, &acc_eager, 0, 0);
    k.fill(&s, &fixed, 0, 0);
    // The graph adds the fixed buffer into an accumulator.
    capture::capture_begin(&s, CaptureMode::Relaxed).unwrap();
    k.add(&s, &acc, &fixed, 0);
    let exec = capture::capture_end(&s).unwrap().instantiate().unwrap();
    for key in 0..n {
        let v = pf.next_into(&s, &[&fixed], None).unwrap();
        assert_eq!(v.seq, key);
        exec.launch(&s).unwrap();
        // The same step, eager, over a leased batch.
        let e = eager.next(&s, None).unwrap();
        k.add(&s, &acc_eager, &e.buffers[0], 0);
        eager.release(e.seq).unwrap();
    }
    assert_eq!(k.read(&s, &acc), k.read(&s, &acc_eager));
    assert_ne!(k.read(&s, &acc), vec![0u32; cap / 4]);
    pf.close();
    eager.close();
}

#[test]
fn destroy_waits_for_an_open_fill_before_freeing_its_memory() {
    let _alone = alone();
    let k = kit();
    let pf = Prefetcher::create(&k.dev, 2, &[4096]).unwrap();
    let (t, view) = pf.acquire(None).unwrap();
    let (ptr, cap) = view.host()[0];
    let closer = {
        let pf = pf.clone();
        std::thread::spawn(move || pf.close())
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !closer.is_finished(),
        "destroy freed a slot a producer is filling"
    );
    // The producer's memory is still its own: the write lands, then submit fails.
    // SAFETY: the open fill's pinned memory, `cap` bytes.
    unsafe { std::ptr::write_bytes(ptr, 0xab, cap) };
    assert_eq!(
        pf.submit(t, &[cap]).unwrap_err().code,
        ErrorCode::InvalidHandle
    );
    closer.join().unwrap();
    let e = pf.acquire(Some(Duration::ZERO)).err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidHandle);
}

#[test]
fn closing_while_consumers_lease_and_release_ends_cleanly() {
    let _alone = alone();
    let k = kit();
    for round in 0..scaled(40) as u64 {
        let pf = Prefetcher::create(&k.dev, 4, &[64]).unwrap();
        let producer = {
            let pf = pf.clone();
            std::thread::spawn(move || while pf.push(&[&[1u8; 64]], None).is_ok() {})
        };
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (pf, s) = (pf.clone(), k.stream());
                std::thread::spawn(move || {
                    let (mut taken, mut leased) = (0u64, Vec::new());
                    loop {
                        match pf.next(&s, Some(Duration::from_secs(10))) {
                            Ok(v) => {
                                taken += 1;
                                leased.extend(v.buffers.iter().cloned());
                                if let Err(e) = pf.release(v.seq) {
                                    assert_eq!(e.code, ErrorCode::InvalidHandle, "{e}");
                                    break;
                                }
                            }
                            Err(e) => {
                                assert_eq!(e.error.code, ErrorCode::InvalidHandle, "{}", e.error);
                                break;
                            }
                        }
                    }
                    s.synchronize().unwrap();
                    (taken, leased, s)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200 * (round % 5)));
        let t = Instant::now();
        pf.close();
        producer.join().unwrap();
        // Every consumer ends first: a next still on its way out of close holds
        // its batch's read until it returns.
        let ended: Vec<_> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
        let mut taken = 0;
        for (n, leased, s) in ended {
            taken += n;
            // A lease that outlived close would still count as an open read.
            for b in leased {
                let op = ForeignOp::begin(&s, Vec::new(), vec![b.sync.clone()])
                    .unwrap_or_else(|e| panic!("round {round}: a lease outlived close: {e}"));
                op.end().unwrap();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "round {round}: close and the joins were slow"
        );
        assert!(pf.release(taken).is_err(), "no lease outlives close");
    }
}

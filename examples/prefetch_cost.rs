//! The prefetcher's host cost per batch with small batches: P producer threads
//! acquire a slot and submit it (no fill), one consumer takes each batch with
//! `next` and releases it. Prints batches/s and the mean time of each call.
//!
//! With the stand-in driver (`tools/mockcuda`, via `EXAMPLE=prefetch_cost
//! scripts/profile-host.sh`) the driver calls return at once (or spin
//! `MOCKCUDA_CALL_NS`), so the times are sluice's own bookkeeping and locking on
//! this CPU, and `perf` can profile them (`PROFILE=1`). Arguments: producers
//! (default 1 and 4); `PREFETCH_COST_N` batches per row (20000),
//! `PREFETCH_COST_BYTES` per batch (200960, the Go trainer's).

use sluice::prefetch::Prefetcher;
use sluice::{Device, Stream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let n = env("PREFETCH_COST_N", 20_000) as u64;
    let bytes = env("PREFETCH_COST_BYTES", 256 * 785);
    let rows: Vec<usize> = match std::env::args().nth(1) {
        Some(p) => vec![p.parse().expect("producers: a number")],
        None => vec![1, 4],
    };
    let dev = Device::open_default().expect("device");
    println!("| producers | batches/s | acquire µs | submit µs | next µs | release µs |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for producers in rows {
        let pf = Prefetcher::create(&dev, 16, &[bytes]).expect("prefetcher");
        let s = Stream::create(&dev, sluice::stream::STREAM_NON_BLOCKING, 0).expect("stream");
        let (acq, sub) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..producers)
            .map(|_| {
                let (pf, acq, sub) = (pf.clone(), acq.clone(), sub.clone());
                std::thread::spawn(move || loop {
                    let a = Instant::now();
                    let Ok((ticket, _view)) = pf.acquire(None) else {
                        return;
                    };
                    let b = Instant::now();
                    if ticket.seq >= n {
                        let _ = pf.cancel(ticket);
                        return;
                    }
                    pf.submit(ticket, &[bytes]).expect("submit");
                    acq.fetch_add((b - a).as_nanos() as u64, Ordering::Relaxed);
                    sub.fetch_add(b.elapsed().as_nanos() as u64, Ordering::Relaxed);
                })
            })
            .collect();
        let (mut next_ns, mut rel_ns) = (0u128, 0u128);
        for _ in 0..n {
            let a = Instant::now();
            let v = pf.next(&s, None).map_err(|e| e.error).expect("next");
            let b = Instant::now();
            pf.release(v.seq).expect("release");
            next_ns += (b - a).as_nanos();
            rel_ns += b.elapsed().as_nanos();
        }
        let el = t0.elapsed().as_secs_f64();
        pf.close_input();
        for t in threads {
            t.join().expect("producer");
        }
        s.synchronize().expect("sync");
        pf.close();
        let per = |ns: f64| ns / n as f64 / 1e3;
        println!(
            "| {producers} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
            n as f64 / el,
            per(acq.load(Ordering::Relaxed) as f64),
            per(sub.load(Ordering::Relaxed) as f64),
            per(next_ns as f64),
            per(rel_ns as f64)
        );
    }
}

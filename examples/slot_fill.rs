//! The CPU side of a slot's fill, alone: writing a ring of slots whose lines are no
//! longer in the caches (as a prefetcher's producers do after the GPU's copies read
//! them), with a plain copy against the library's streaming stores
//! (`sluice::prefetch::gather_rows`, the same stores as `sluice_prefetcher_push`'s copy
//! and `sluice_gather_rows`). No device is used.
//!
//! ```text
//! cargo run --release --example slot_fill
//! ```
//!
//! `SLOT_FILL_RING_MB` (default 1024) sizes the ring, larger than the last-level
//! cache so that every slot is cold when written again; `SLOT_FILL_REPS` (3) passes
//! over it, the median printed. Rows: 392 KiB slots (512 rows of 784 bytes, two of
//! the Go trainer's batches) and 64 MiB slots (`benches/prefetch`'s batch).

use sluice::prefetch::gather_rows;
use std::time::Instant;

const ROW: usize = 784;
const SRC_ROWS: usize = 60_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// GB/s of `fill` over every slot of the ring, median of `reps` passes.
fn rate(ring: &mut [Vec<u8>], reps: usize, fill: &mut dyn FnMut(&mut [u8])) -> f64 {
    let bytes: usize = ring.iter().map(|s| s.len()).sum();
    let mut r: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t0 = Instant::now();
            for slot in ring.iter_mut() {
                fill(slot);
            }
            bytes as f64 / t0.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    r.sort_by(f64::total_cmp);
    r[r.len() / 2]
}

fn main() {
    let ring_bytes = env("SLOT_FILL_RING_MB", 1024) << 20;
    let reps = env("SLOT_FILL_REPS", 3);
    let images: Vec<u8> = (0..SRC_ROWS * ROW).map(|i| (i * 31 % 251) as u8).collect();
    println!(
        "a ring of {} MiB, median of {reps} passes\n",
        ring_bytes >> 20
    );
    println!("| slot | fill | plain GB/s | streamed GB/s | streamed / plain |");
    println!("|---|---|---:|---:|---:|");
    for slot in [512 * ROW, 64 << 20] {
        let mut ring: Vec<Vec<u8>> = (0..(ring_bytes / slot).max(2))
            .map(|_| vec![1u8; slot])
            .collect();
        let src = images[..slot.min(images.len())].repeat(slot.div_ceil(images.len()));
        let rows: Vec<i64> = (0..slot / ROW)
            .map(|i| (i * 7919 % SRC_ROWS) as i64)
            .collect();
        let n = rows.len() * ROW;
        let copy_plain = rate(&mut ring, reps, &mut |d| d.copy_from_slice(&src[..d.len()]));
        let copy_streamed = rate(&mut ring, reps, &mut |d| {
            gather_rows(d, &src[..slot], slot, &[0]).expect("copy")
        });
        assert!(
            ring.iter().all(|d| d[..] == src[..slot]),
            "a streamed copy differs"
        );
        let gather_plain = rate(&mut ring, reps, &mut |d| {
            for (out, &r) in d[..n].chunks_exact_mut(ROW).zip(&rows) {
                out.copy_from_slice(&images[r as usize * ROW..][..ROW]);
            }
        });
        let gather_streamed = rate(&mut ring, reps, &mut |d| {
            gather_rows(&mut d[..n], &images, ROW, &rows).expect("gather")
        });
        for d in &ring {
            for (out, &r) in d[..n].chunks_exact(ROW).zip(&rows) {
                assert_eq!(
                    out,
                    &images[r as usize * ROW..][..ROW],
                    "a streamed gather differs"
                );
            }
        }
        let kib = slot >> 10;
        for (what, plain, streamed) in [
            ("copy", copy_plain, copy_streamed),
            ("gather of 784-byte rows", gather_plain, gather_streamed),
        ] {
            println!(
                "| {kib} KiB | {what} | {plain:.2} | {streamed:.2} | {:.2} |",
                streamed / plain
            );
        }
    }
}

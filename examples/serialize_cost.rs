//! `RngCheckpoint::serialize_into` against one raw D2H copy of the same bytes, per
//! size, into pinned and pageable memory (median wall time of `REPS` calls).
//!
//! Without a GPU, against `tools/mockcuda` with its copy-engine clock (copies take
//! time on their stream's clock, no CPU):
//!
//! ```text
//! cc -O2 -shared -fPIC -o target/mockcuda/libcuda.so.1 tools/mockcuda/mockcuda.c
//! LD_LIBRARY_PATH=target/mockcuda SLUICE_BACKEND=cuda MOCKCUDA_PINNED=1 \
//!   MOCKCUDA_COPY_GBPS=14 MOCKCUDA_COPY_US=1.5 cargo run --release --example serialize_cost
//! ```
//!
//! The host work (CRC32C on the pool's threads) is real; pick the copy rate so that
//! wire speed over this machine's CRC speed matches the GPU host's. Into pinned
//! memory the library checksums on the device (one bulk copy and a CRC kernel), and
//! the stand-in's kernels do nothing: there only the copy's timing means anything,
//! and the bytes' CRC is not checked. `GAP_US` idles
//! that long before each timed call (helpers that went to sleep).

use sluice::rng::{Rng, RngCheckpoint};
use sluice::{Buffer, Device, Stream};
use std::time::Instant;

fn median(reps: usize, f: &mut dyn FnMut()) -> f64 {
    let gap = std::env::var("GAP_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_micros);
    f();
    let mut t: Vec<f64> = (0..reps.max(3))
        .map(|_| {
            if let Some(g) = gap {
                std::thread::sleep(g);
            }
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let dev = Device::open_default().unwrap();
    let s = Stream::create(&dev, 1, 0).unwrap();
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let cuda = std::env::var("SLUICE_BACKEND").as_deref() == Ok("cuda");
    println!("| MiB | raw D2H us | pinned us | ratio | pageable us |");
    for mib in [1usize, 4, 64] {
        let n = (mib << 20) / 64;
        let reps = if mib >= 64 { reps / 10 } else { reps };
        let rng = Rng::create(&s, 7, n).unwrap();
        let ck = RngCheckpoint::create(&s, &rng).unwrap();
        s.synchronize().unwrap();
        let len = ck.serialized_len();
        let pinned = Buffer::alloc_pinned(&dev, len).unwrap();
        // SAFETY: the pinned buffer holds `len` bytes and only this thread uses it.
        let p = unsafe { std::slice::from_raw_parts_mut(pinned.host_ptr().unwrap(), len) };
        let mut pageable = vec![0u8; len];
        let raw = if cuda {
            let drv = sluice::backend::cuda::driver().unwrap();
            let (dst, src, st) = (pinned.addr, rng.states().addr, s.raw());
            median(reps, &mut || {
                // SAFETY: both ranges are live allocations of n * 64 bytes; the
                // stream is synchronized before the next use of either.
                unsafe {
                    (drv.cuMemcpyAsync)(dst, src, n * 64, st as _);
                    (drv.cuStreamSynchronize)(st as _);
                }
            })
        } else {
            f64::NAN
        };
        let pin = median(reps, &mut || ck.serialize_into(p).unwrap());
        let page = median(reps, &mut || ck.serialize_into(&mut pageable).unwrap());
        println!(
            "| {mib} | {raw:.0} | {pin:.0} | {:.3} | {page:.0} |",
            raw / pin
        );
    }
}

//! The main demo: a two-stream pipeline. A copy stream moves batches from pinned
//! host memory to the device; a compute stream sums each batch into an
//! accumulator. Nobody writes an event by hand: the sync objects of the buffers make
//! the compute stream wait on each copy, and the next copy into a slot wait on the
//! compute that read it. Runs on the GPU when there is one, else on the host backend.
//!
//!     cargo run --release --example pipeline [batches] [batch_mib]

use sluice::memory::Buffer;
use sluice::module::Module;
use sluice::ops;
use sluice::{BackendKind, Device, LaunchDims, Stream};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

const PTX: &[u8] = include_bytes!("../kernels/test_kernels.ptx");

fn main() -> Result<(), sluice::Error> {
    let mut args = std::env::args().skip(1);
    let batches: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let bytes = mib << 20;
    let words = bytes / 4;

    let dev = Device::open_default()?;
    let props = dev.props()?;
    println!(
        "sluice {} on {} ({})",
        env!("CARGO_PKG_VERSION"),
        props.name,
        dev.kind().name()
    );

    let copy = Stream::create(&dev, sluice::stream::STREAM_NON_BLOCKING, 0)?;
    let compute = Stream::create(&dev, sluice::stream::STREAM_NON_BLOCKING, 0)?;
    let staging: Vec<Arc<Buffer>> = (0..2)
        .map(|_| Buffer::alloc_pinned(&dev, bytes))
        .collect::<Result<_, _>>()?;
    let slots: Vec<Arc<Buffer>> = (0..2)
        .map(|_| Buffer::alloc(&copy, bytes))
        .collect::<Result<_, _>>()?;
    let acc = Buffer::alloc(&compute, bytes)?;
    ops::memset(&compute, &acc, 0, 0, bytes)?;

    let add = match dev.kind() {
        BackendKind::Cuda => Some(Module::load(&dev, PTX)?.function(c"sluice_add")?),
        BackendKind::Host => None,
    };

    let start = Instant::now();
    let mut expect: u32 = 0;
    for i in 0..batches {
        let (pin, slot) = (&staging[i % 2], &slots[i % 2]);
        // The host may refill a staging buffer only once its last copy has completed.
        pin.sync.wait_write()?;
        let value = (i as u32).wrapping_mul(2_654_435_761) | 1;
        // SAFETY: pinned memory of `bytes` bytes, no copy in flight after wait_write.
        let host = unsafe {
            std::slice::from_raw_parts_mut(
                pin.host_ptr().unwrap_or(std::ptr::null_mut()) as *mut u32,
                words,
            )
        };
        host.fill(value);
        expect = expect.wrapping_add(value);
        // Copy stream: H2D. It waits (on the device) for the compute that read this slot.
        ops::copy(&copy, slot, 0, pin, 0, bytes)?;
        // Compute stream: acc += slot. It waits (on the device) for the copy.
        match &add {
            Some(f) => {
                let (mut d, mut s, mut n) = (acc.addr, slot.addr, words as u64);
                let mut argv = [
                    &mut d as *mut u64 as *mut c_void,
                    &mut s as *mut u64 as *mut c_void,
                    &mut n as *mut u64 as *mut c_void,
                ];
                let dims = LaunchDims {
                    grid: [1024, 1, 1],
                    block: [256, 1, 1],
                    shared_mem_bytes: 0,
                };
                let (r, w) = ([slot.sync.clone()], [acc.sync.clone()]);
                // SAFETY: the arguments match sluice_add(u32*, const u32*, u64).
                unsafe { ops::launch(&compute, f, dims, &mut argv, &r, &w)? };
            }
            None => {
                let (d, s) = (acc.addr as usize, slot.addr as usize);
                let (r, w) = ([slot.sync.clone()], [acc.sync.clone()]);
                ops::host_callback(
                    &compute,
                    move || {
                        // SAFETY: the engine orders this after the copy; both buffers outlive it.
                        let (dst, src) = unsafe {
                            (
                                std::slice::from_raw_parts_mut(d as *mut u32, words),
                                std::slice::from_raw_parts(s as *const u32, words),
                            )
                        };
                        dst.iter_mut()
                            .zip(src)
                            .for_each(|(a, b)| *a = a.wrapping_add(*b));
                        0
                    },
                    &r,
                    &w,
                )?;
            }
        }
    }
    let mut out = vec![0u8; bytes];
    ops::copy_to_host(&compute, &mut out, &acc, 0)?;
    let secs = start.elapsed().as_secs_f64();
    let ok = out
        .chunks_exact(4)
        .all(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == expect);
    println!(
        "{batches} batches of {mib} MiB: {:.1} batches/s, {:.2} GB/s H2D+compute; copy waits {}, compute waits {}",
        batches as f64 / secs,
        (batches * bytes) as f64 / secs / 1e9,
        copy.waits(),
        compute.waits(),
    );
    if !ok {
        eprintln!("checksum mismatch");
        std::process::exit(1);
    }
    println!("checksum ok");
    Ok(())
}

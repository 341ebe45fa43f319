//! The README's trace picture: a copy stream feeds a compute stream through two
//! device slots, traced with device spans of every op. The compute is a tracked
//! host callback that sleeps, so the picture is the same on any machine; nobody
//! writes an event, and the arrows are the waits the engine inserted.
//!
//!     cargo run --release --example trace_demo [trace.json] [batches]
//!     python3 tools/sluice-trace trace.json -o trace.svg

use sluice::memory::Buffer;
use sluice::trace::{self, TraceOptions};
use sluice::{ops, Device, Stream};
use std::sync::Arc;
use std::time::Duration;

const MIB: usize = 1 << 20;

fn main() -> Result<(), sluice::Error> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "target/trace-demo.json".into());
    let batches: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let dev = Device::open_default()?;
    let copy = Stream::create(&dev, sluice::stream::STREAM_NON_BLOCKING, 0)?;
    let compute = Stream::create(&dev, sluice::stream::STREAM_NON_BLOCKING, 0)?;
    copy.set_label(Some("copy"));
    compute.set_label(Some("compute"));
    let bytes = 2 * MIB;
    let staging: Vec<Arc<Buffer>> = (0..batches)
        .map(|_| Buffer::alloc_pinned(&dev, bytes))
        .collect::<Result<_, _>>()?;
    let slots: Vec<Arc<Buffer>> = (0..2)
        .map(|_| Buffer::alloc(&copy, bytes))
        .collect::<Result<_, _>>()?;
    let acc = Buffer::alloc(&compute, bytes)?;
    ops::memset(&compute, &acc, 0, 0, bytes)?;
    compute.synchronize()?;
    // After setup, and after the device is open so its clock is calibrated now.
    trace::start(path.as_ref(), TraceOptions { device_every: 1 })?;

    for (i, pin) in staging.iter().enumerate() {
        let slot = &slots[i % 2];
        // Waits (on the device) for the compute that last read this slot.
        ops::copy(&copy, slot, 0, pin, 0, bytes)?;
        // Waits (on the device) for the copy; the sleep stands for a kernel.
        ops::host_callback(
            &compute,
            || {
                std::thread::sleep(Duration::from_millis(4));
                0
            },
            std::slice::from_ref(&slot.sync),
            std::slice::from_ref(&acc.sync),
        )?;
    }
    let mut out = vec![0u8; bytes];
    ops::copy_to_host(&compute, &mut out, &acc, 0)?;
    trace::stop()?;
    println!(
        "{path}: {batches} batches; copy waits {}, compute waits {}",
        copy.waits(),
        compute.waits()
    );
    Ok(())
}

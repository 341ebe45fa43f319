//! Driver probes printed under the header, before the tables: the cost of the
//! context check, what stream-taking calls return on a thread with no current
//! context, and what a record costs when it cycles through a ring of events (an
//! op's recording cannot reuse the event its predecessor was published with).

use crate::harness::*;
use cudarc::driver::sys::{CUcontext, CUevent, CUfunction, CUstream};
use std::ptr::null_mut;
use std::time::Instant;

pub fn run(b: &Bench) {
    let d = b.d;
    {
        // The context check every entry point makes before calling the driver.
        let n = 1_000_000;
        let mut cur: CUcontext = null_mut();
        let t0 = Instant::now();
        for _ in 0..n {
            // SAFETY: writes one context handle.
            cu(
                d,
                unsafe { (d.cuCtxGetCurrent)(&mut cur) },
                "cuCtxGetCurrent",
            );
        }
        println!(
            "- context check (cuCtxGetCurrent), made once per driver call: {:.1} ns\n",
            secs(t0.elapsed()) / n as f64 * 1e9
        );
    }
    {
        // Informational: do stream-taking calls work with no current context?
        let (ra, rf) = (b.ra, b.r_empty);
        // Created with the context bound on this thread.
        let ev = b.r_event();
        let (ra_bits, ev_bits, f_bits) = (ra as usize, ev as usize, rf as usize);
        let codes = std::thread::spawn(move || {
            let (s, e, f) = (
                ra_bits as CUstream,
                ev_bits as CUevent,
                f_bits as CUfunction,
            );
            // SAFETY: live handles; this thread has no current context on purpose.
            unsafe {
                [
                    (d.cuEventRecord)(e, s),
                    (d.cuStreamWaitEvent)(s, e, 0),
                    (d.cuLaunchKernel)(f, 1, 1, 1, 32, 1, 1, 0, s, null_mut(), null_mut()),
                    (d.cuStreamSynchronize)(s),
                ]
            }
        })
        .join()
        .unwrap_or([u32::MAX; 4]);
        println!(
            "- calls from a thread with no current context (record, wait, launch, sync): CUresult {:?}\n",
            codes
        );
        b.r_event_destroy(ev);
    }
    {
        // Informational: cuEventRecord on one stream, cycling through `ring` events.
        let mut line =
            String::from("- cuEventRecord cycling through a ring of events (ns per record):");
        for ring in [1usize, 2, 3, 8, 64] {
            let evs: Vec<CUevent> = (0..ring).map(|_| b.r_event()).collect();
            let mut i = 0;
            let mut rec = || {
                // SAFETY: live events and stream.
                let res = unsafe { (d.cuEventRecord)(evs[i % ring], b.ra) };
                cu(d, res, "cuEventRecord");
                i += 1;
            };
            let mut samples = Vec::new();
            for _ in 0..6 {
                samples.push(per_call(b.cfg.n(10), &mut rec, || raw_sync(d, b.ra)));
            }
            samples.remove(0); // warm-up
            line += &format!(" {ring}: {:.0}", median(samples) * 1e9);
            for e in evs {
                b.r_event_destroy(e);
            }
        }
        println!("{line}\n");
    }
}

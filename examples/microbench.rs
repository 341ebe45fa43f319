//! Costs of the primitives an exported call is made of, on this machine's CPU.
//! Informs the handle-table design; run on the GPU host with the cuda backend.
//!
//!     cargo run --release --example microbench

use sluice::ffi::*;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

fn ok(e: *mut sluice_error_t) {
    assert!(e.is_null(), "{}", unsafe {
        std::ffi::CStr::from_ptr(sluice_error_message(e)).to_string_lossy()
    });
}

fn per_call(name: &str, n: u32, mut f: impl FnMut()) {
    for _ in 0..n / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    println!(
        "| {name} | {:.1} |",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}

fn main() {
    let n = 2_000_000;
    println!("| primitive | ns per call |\n|---|---:|");
    let a = AtomicU64::new(0);
    per_call("atomic fetch_add (uncontended)", n, || {
        black_box(a.fetch_add(1, Ordering::Relaxed));
    });
    let l = RwLock::new(1u64);
    per_call("RwLock read + unlock", n, || {
        black_box(*l.read().unwrap());
    });
    let m = Mutex::new(1u64);
    per_call("Mutex lock + unlock", n, || {
        black_box(*m.lock().unwrap());
    });
    let arc = Arc::new(5u64);
    per_call("Arc clone + drop", n, || {
        black_box(arc.clone());
    });
    per_call("Box alloc + free (64 B)", n, || {
        black_box(Box::new([0u64; 8]));
    });
    per_call("sluice_abi_version (no boundary)", n, || {
        black_box(sluice_abi_version());
    });
    per_call("sluice_engine_set_mode (boundary only)", n, || {
        ok(sluice_engine_set_mode(
            sluice::engine::EngineMode::Async as u32,
        ))
    });
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open_default(&mut d));
    let mut s = sluice_stream_t { bits: 0 };
    ok(sluice_stream_create(
        d,
        SLUICE_STREAM_NON_BLOCKING,
        0,
        &mut s,
    ));
    let mut st = std::mem::MaybeUninit::<sluice_stream_stats_t>::uninit();
    per_call("sluice_stream_stats (boundary + 1 lookup)", n, || {
        ok(sluice_stream_stats(s, st.as_mut_ptr()))
    });
    let mut idle = false;
    per_call("sluice_stream_query (lookup + driver query)", n / 4, || {
        ok(sluice_stream_query(s, &mut idle))
    });
    let mut e = sluice_event_t { bits: 0 };
    ok(sluice_event_record(s, 0, &mut e));
    ok(sluice_event_synchronize(e));
    per_call("sluice_stream_wait_event (same stream)", n / 4, || {
        ok(sluice_stream_wait_event(s, e))
    });
    if let Ok(drv) = sluice::backend::cuda::driver() {
        let mut raw = std::ptr::null_mut();
        ok(sluice_stream_raw(s, &mut raw));
        per_call("cuStreamQuery (raw)", n / 4, || {
            black_box(unsafe { (drv.cuStreamQuery)(raw as _) });
        });
        let mut ctx = std::ptr::null_mut();
        per_call("cuCtxGetCurrent (raw)", n, || {
            black_box(unsafe { (drv.cuCtxGetCurrent)(&mut ctx) });
        });
    }
    ok(sluice_stream_synchronize(s));
}

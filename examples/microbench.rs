use sluice::ffi::*;
use std::time::Instant;
fn ok(e: *mut sluice_error_t) {
    assert!(e.is_null());
}
fn main() {
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open(SLUICE_BACKEND_HOST, 0, &mut d));
    let mut s = sluice_stream_t { bits: 0 };
    ok(sluice_stream_create(d, 0, 0, &mut s));
    let mut e = sluice_event_t { bits: 0 };
    ok(sluice_event_record(s, 0, &mut e));
    ok(sluice_event_synchronize(e));
    let n = 2_000_000;
    let t = Instant::now();
    for _ in 0..n {
        ok(sluice_stream_wait_event(s, e));
    }
    println!(
        "wait_event same stream (host): {:.1} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let mut idle = false;
    let t = Instant::now();
    for _ in 0..n {
        ok(sluice_stream_query(s, &mut idle));
    }
    println!(
        "stream_query (host): {:.1} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let mut sy = sluice_sync_t { bits: 0 };
    ok(sluice_sync_new(&mut sy));
    let mut info = std::mem::MaybeUninit::<sluice_sync_info_t>::uninit();
    let t = Instant::now();
    for _ in 0..n {
        ok(sluice_sync_info(sy, info.as_mut_ptr()));
    }
    println!(
        "sync_info (lookup only): {:.1} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}

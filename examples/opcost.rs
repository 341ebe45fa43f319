//! sluice's own cost per exported call, measured against a stand-in driver
//! (`tools/mockcuda`) whose calls return at once. Each row subtracts the same
//! driver calls made directly, so what is left is sluice's bookkeeping.
//! For profiling on a machine without a GPU; the GPU numbers come from
//! `benches/overhead.rs`. Run with `scripts/profile-host.sh`.

use sluice::ffi::*;
use std::ffi::c_void;
use std::hint::black_box;
use std::time::Instant;

fn ok(e: *mut sluice_error_t) {
    assert!(e.is_null(), "{}", unsafe {
        std::ffi::CStr::from_ptr(sluice_error_message(e)).to_string_lossy()
    });
}

/// Best-of-5 mean ns per call of `f`, `n` calls per try.
fn ns(n: u32, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let only = std::env::args().nth(1);
    let want = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let n = std::env::var("OPCOST_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000u32);
    let drv =
        sluice::backend::cuda::driver().expect("run with the mock libcuda on LD_LIBRARY_PATH");
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open_default(&mut d));
    let mk_stream = || {
        let mut s = sluice_stream_t { bits: 0 };
        ok(sluice_stream_create(
            d,
            SLUICE_STREAM_NON_BLOCKING,
            0,
            &mut s,
        ));
        s
    };
    let (sa, sb) = (mk_stream(), mk_stream());
    let (mut ra, mut rb) = (std::ptr::null_mut(), std::ptr::null_mut());
    ok(sluice_stream_raw(sa, &mut ra));
    ok(sluice_stream_raw(sb, &mut rb));
    let mut raw_ev = std::ptr::null_mut();
    unsafe { (drv.cuEventCreate)(&mut raw_ev, 2) };

    let ptx = b".version 7.0\n.target sm_50\n.address_size 64\n";
    let mut m = sluice_module_t { bits: 0 };
    ok(sluice_module_load(
        d,
        ptx.as_ptr().cast(),
        ptx.len(),
        &mut m,
    ));
    let mut f = sluice_function_t { bits: 0 };
    ok(sluice_module_function(m, c"k".as_ptr(), &mut f));
    let mut rf = std::ptr::null_mut();
    unsafe { (drv.cuModuleGetFunction)(&mut rf, std::ptr::null_mut(), c"k".as_ptr()) };
    let dims = sluice_launch_dims_t {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    let mut bufs = [sluice_buffer_t { bits: 0 }; 2];
    let mut syncs = [sluice_sync_t { bits: 0 }; 2];
    for i in 0..2 {
        ok(sluice_buffer_alloc(sa, 4096, &mut bufs[i]));
        ok(sluice_buffer_sync(bufs[i], &mut syncs[i]));
    }
    let (x, y) = (syncs[0], syncs[1]);
    let mut a0 = 0u64;
    let mut args = [(&mut a0 as *mut u64).cast::<c_void>()];

    println!("| call | sluice ns | same driver calls ns | sluice's own ns |\n|---|---:|---:|---:|");
    let row = |name: &str, s: f64, r: f64| println!("| {name} | {s:.1} | {r:.1} | {:.1} |", s - r);

    let mut ev = sluice_event_t { bits: 0 };
    ok(sluice_event_record(sa, 0, &mut ev));
    if want("wait") {
        let s = ns(n, || ok(sluice_stream_wait_event(sb, ev)));
        let r = ns(n, || unsafe {
            black_box((drv.cuStreamWaitEvent)(rb as _, raw_ev, 0));
        });
        row("stream wait on event", s, r);
    }
    if want("record") {
        let s = ns(n, || {
            let mut e = sluice_event_t { bits: 0 };
            ok(sluice_event_record(sa, 0, &mut e));
            ok(sluice_event_destroy(e));
        });
        let r = ns(n, || unsafe {
            black_box((drv.cuEventRecord)(raw_ev, ra as _));
        });
        row("event record + destroy", s, r);
    }
    let launch = |s: sluice_stream_t,
                  reads: &[sluice_sync_t],
                  writes: &[sluice_sync_t],
                  a: &mut [*mut c_void]| {
        ok(sluice_launch(
            s,
            f,
            &dims,
            a.as_mut_ptr(),
            a.len(),
            reads.as_ptr(),
            reads.len(),
            writes.as_ptr(),
            writes.len(),
        ))
    };
    let raw_launch = |s: *mut c_void, a: &mut [*mut c_void]| unsafe {
        black_box((drv.cuLaunchKernel)(
            rf,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s as _,
            a.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
    };
    if want("launch") {
        let s = ns(n, || launch(sa, &[], &[], &mut args));
        let r = ns(n, || raw_launch(ra, &mut args));
        row("launch, no sync objects", s, r);
    }
    if want("ping") {
        let mut k = 0u64;
        let s = ns(n, || {
            k += 1;
            if k % 2 == 0 {
                launch(sa, &[y], &[x], &mut args)
            } else {
                launch(sb, &[x], &[y], &mut args)
            }
        });
        let r = ns(n, || {
            k += 1;
            let (st, other) = if k % 2 == 0 { (ra, rb) } else { (rb, ra) };
            let _ = other;
            unsafe {
                black_box((drv.cuStreamWaitEvent)(st as _, raw_ev, 0));
            }
            raw_launch(st, &mut args);
            unsafe {
                black_box((drv.cuEventRecord)(raw_ev, st as _));
            }
        });
        row("ping-pong op (launch, 1 read, 1 write, 1 wait)", s, r);
    }
    if want("op") {
        let s = ns(n, || {
            let mut op = sluice_op_t { bits: 0 };
            ok(sluice_op_begin(sa, &x, 1, std::ptr::null(), 0, &mut op));
            ok(sluice_op_end(op));
        });
        let r = ns(n, || unsafe {
            black_box((drv.cuEventRecord)(raw_ev, ra as _));
        });
        row("op_begin + op_end, 1 read", s, r);
    }
    if want("alloc") {
        let s = ns(n, || {
            let mut b = sluice_buffer_t { bits: 0 };
            ok(sluice_buffer_alloc(sa, 1 << 20, &mut b));
            ok(sluice_buffer_free(b));
        });
        row("alloc + free (block cache)", s, 0.0);
    }
    ok(sluice_event_destroy(ev));
}

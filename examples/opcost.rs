//! sluice's own cost per exported call: each row runs a sluice call and the raw
//! driver calls it makes, on the same streams, and prints the difference.
//!
//! With the stand-in driver (`tools/mockcuda`, via `scripts/profile-host.sh`) the
//! driver calls return at once, so the difference is sluice's bookkeeping on this
//! CPU, and `perf` can profile it without a GPU. With `OPCOST_REAL_DRIVER=1` on a
//! GPU it loads `kernels/test_kernels.ptx` and runs real kernels; the numbers that
//! count come from `benches/overhead/`. An argument filters the rows by name.

use sluice::ffi::*;
use std::ffi::c_void;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn ok(e: *mut sluice_error_t) {
    assert!(e.is_null(), "{}", unsafe {
        std::ffi::CStr::from_ptr(sluice_error_message(e)).to_string_lossy()
    });
}

/// One `sluice_op_begin` + `sluice_op_end` reading `objs` on `s`.
fn op_pair(s: sluice_stream_t, objs: &[sluice_sync_t]) {
    let mut op = sluice_op_t { bits: 0 };
    ok(sluice_op_begin(
        s,
        objs.as_ptr(),
        objs.len(),
        std::ptr::null(),
        0,
        &mut op,
    ));
    ok(sluice_op_end(op));
}

/// `k` standalone sync objects (`sluice_sync_create`).
fn sync_objects(k: usize) -> Vec<sluice_sync_t> {
    (0..k)
        .map(|_| {
            let mut o = sluice_sync_t { bits: 0 };
            ok(sluice_sync_create(&mut o));
            o
        })
        .collect()
}

const WORDS: u64 = 1024;

fn main() {
    let only = std::env::args().nth(1);
    let want = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let n: u32 = std::env::var("OPCOST_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let real = std::env::var_os("OPCOST_REAL_DRIVER").is_some();
    let drv = sluice::backend::cuda::driver()
        .expect("needs SLUICE_BACKEND=cuda and a libcuda (real, or tools/mockcuda)");
    let mut d = sluice_device_t { bits: 0 };
    ok(sluice_device_open_default(&mut d));
    // Best of 5 tries of mean ns per call; the device is drained every 1000 calls,
    // outside the timed part, so queues never fill.
    let ns = |f: &mut dyn FnMut()| -> f64 {
        (0..5)
            .map(|_| {
                let mut t = Duration::ZERO;
                let mut left = n;
                while left > 0 {
                    let k = left.min(1000);
                    let t0 = Instant::now();
                    for _ in 0..k {
                        f();
                    }
                    t += t0.elapsed();
                    left -= k;
                    ok(sluice_device_wait_all(d));
                }
                t.as_nanos() as f64 / n as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    let mk_stream = || {
        let mut s = sluice_stream_t { bits: 0 };
        ok(sluice_stream_create(
            d,
            SLUICE_STREAM_NON_BLOCKING,
            0,
            &mut s,
        ));
        let mut raw = std::ptr::null_mut();
        ok(sluice_stream_raw(s, &mut raw));
        (s, raw)
    };
    let ((sa, ra), (sb, rb)) = (mk_stream(), mk_stream());
    let raw_event = || {
        let mut e = std::ptr::null_mut();
        unsafe { (drv.cuEventCreate)(&mut e, 2) };
        e
    };
    let (eva, evb) = (raw_event(), raw_event());

    let image: Vec<u8> = if real {
        let mut v = std::fs::read("kernels/test_kernels.ptx").expect("kernels/test_kernels.ptx");
        v.push(0);
        v
    } else {
        b".version 7.0\n.target sm_50\n.address_size 64\n\0".to_vec()
    };
    let mut m = sluice_module_t { bits: 0 };
    ok(sluice_module_load(
        d,
        image.as_ptr().cast(),
        image.len(),
        &mut m,
    ));
    let mut f = sluice_function_t { bits: 0 };
    ok(sluice_module_get_function(
        m,
        c"sluice_add".as_ptr(),
        &mut f,
    ));
    let mut rm = std::ptr::null_mut();
    let mut rf = std::ptr::null_mut();
    unsafe {
        (drv.cuModuleLoadDataEx)(
            &mut rm,
            image.as_ptr().cast(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        (drv.cuModuleGetFunction)(&mut rf, rm, c"sluice_add".as_ptr());
    }
    let dims = sluice_launch_dims_t {
        grid: [4, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
    };
    let mut bufs = [sluice_buffer_t { bits: 0 }; 2];
    let mut syncs = [sluice_sync_t { bits: 0 }; 2];
    let mut ptrs = [0u64; 2];
    for i in 0..2 {
        ok(sluice_buffer_alloc(sa, WORDS as usize * 4, &mut bufs[i]));
        ok(sluice_stream_memset(sa, bufs[i], 0, 0, WORDS as usize * 4));
        ok(sluice_buffer_sync(bufs[i], &mut syncs[i]));
        let mut info = std::mem::MaybeUninit::<sluice_buffer_info_t>::uninit();
        ok(sluice_buffer_info(bufs[i], info.as_mut_ptr()));
        ptrs[i] = unsafe { info.assume_init() }.device_ptr;
    }
    ok(sluice_device_wait_all(d));
    let (x, y) = (syncs[0], syncs[1]);
    let (mut xa, mut ya, mut na) = (ptrs[0], ptrs[1], WORDS);
    let (mut yb, mut xb, mut nb) = (ptrs[1], ptrs[0], WORDS);
    let arg = |v: &mut u64| (v as *mut u64).cast::<c_void>();
    let mut args_a = [arg(&mut xa), arg(&mut ya), arg(&mut na)];
    let mut args_b = [arg(&mut yb), arg(&mut xb), arg(&mut nb)];
    let launch = |s: sluice_stream_t,
                  reads: &[sluice_sync_t],
                  writes: &[sluice_sync_t],
                  a: &mut [*mut c_void]| {
        ok(sluice_stream_launch(
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
    // OPCOST_LOOP=pair|pair4|copy|memset|event|ping|record: only `n` 1-read pairs (4-read
    // pairs, copies, memsets, event records with their destroys, the ping-pong chain's launches, or raw records) and exit, for `perf stat` /
    // `perf record` of one loop against another.
    if let Ok(which) = std::env::var("OPCOST_LOOP") {
        let four = sync_objects(4);
        for i in 0..n {
            if which == "pair" {
                op_pair(sa, &[x]);
            } else if which == "pair4" {
                op_pair(sa, &four);
            } else if which == "copy" {
                // 256 bytes between the two buffers on one stream (Go's Copy row).
                ok(sluice_stream_copy(sa, bufs[1], 0, bufs[0], 0, 256));
            } else if which == "memset" {
                ok(sluice_stream_memset(sa, bufs[0], 0, 7, 256));
            } else if which == "event" {
                // The "event record only" row's call, with its destroy.
                let mut e = sluice_event_t { bits: 0 };
                ok(sluice_event_record(sa, 0, &mut e));
                ok(sluice_event_destroy(e));
            } else if which == "ping" {
                // The "ping-pong op" row's launches.
                if i % 2 == 0 {
                    launch(sa, &[y], &[x], &mut args_a)
                } else {
                    launch(sb, &[x], &[y], &mut args_b)
                }
            } else {
                unsafe { black_box((drv.cuEventRecord)(eva, ra as _)) };
            }
            if i % 1000 == 999 {
                ok(sluice_device_wait_all(d));
            }
        }
        return;
    }
    println!("| call | sluice ns | raw driver calls ns | sluice's own ns |\n|---|---:|---:|---:|");
    let row = |name: &str, s: f64, r: f64| println!("| {name} | {s:.1} | {r:.1} | {:.1} |", s - r);

    // A recorded event on each side, so the raw and sluice waits do the same work.
    let mut ev = sluice_event_t { bits: 0 };
    ok(sluice_event_record(sa, 0, &mut ev));
    unsafe { (drv.cuEventRecord)(eva, ra as _) };
    ok(sluice_device_wait_all(d));
    if want("wait") {
        let s = ns(&mut || ok(sluice_stream_wait_event(sb, ev)));
        let r = ns(&mut || unsafe {
            black_box((drv.cuStreamWaitEvent)(rb as _, eva, 0));
        });
        row("stream wait on a completed event", s, r);
    }
    if want("stats") {
        let mut st = std::mem::MaybeUninit::<sluice_stream_stats_t>::uninit();
        let s = ns(&mut || ok(sluice_stream_stats(sb, st.as_mut_ptr())));
        row("stream stats (boundary + 1 lookup, no driver call)", s, 0.0);
    }
    if want("record") {
        let s = ns(&mut || {
            let mut e = sluice_event_t { bits: 0 };
            ok(sluice_event_record(sa, 0, &mut e));
            ok(sluice_event_destroy(e));
        });
        let r = ns(&mut || unsafe {
            black_box((drv.cuEventRecord)(eva, ra as _));
        });
        row("event record + destroy", s, r);
    }
    let raw_launch = |s: *mut c_void, a: &mut [*mut c_void]| unsafe {
        black_box((drv.cuLaunchKernel)(
            rf,
            4,
            1,
            1,
            256,
            1,
            1,
            0,
            s as _,
            a.as_mut_ptr(),
            std::ptr::null_mut(),
        ));
    };
    if want("launch") {
        let s = ns(&mut || launch(sa, &[], &[], &mut args_a));
        let r = ns(&mut || raw_launch(ra, &mut args_a));
        row("launch, no sync objects", s, r);
    }
    if want("ping") {
        let mut k = 0u64;
        let s = ns(&mut || {
            k += 1;
            if k % 2 == 0 {
                launch(sa, &[y], &[x], &mut args_a)
            } else {
                launch(sb, &[x], &[y], &mut args_b)
            }
        });
        let r = ns(&mut || {
            k += 1;
            let (st, a, wait_on, rec) = if k % 2 == 0 {
                (ra, &mut args_a, evb, eva)
            } else {
                (rb, &mut args_b, eva, evb)
            };
            unsafe { black_box((drv.cuStreamWaitEvent)(st as _, wait_on, 0)) };
            raw_launch(st, a);
            unsafe { black_box((drv.cuEventRecord)(rec, st as _)) };
        });
        row("ping-pong op (launch, 1 read, 1 write, 1 wait)", s, r);
    }
    if want("capture") {
        // Capture + instantiate of K launches with no sync objects, then the
        // destroys (benches/overhead's small-capture row, K = 10).
        const K: usize = 10;
        let s = ns(&mut || {
            ok(sluice_graph_capture_begin(sa, 2));
            for _ in 0..K {
                launch(sa, &[], &[], &mut args_a);
            }
            let mut g = sluice_graph_t { bits: 0 };
            ok(sluice_graph_capture_end(sa, &mut g));
            let mut ex = sluice_graph_exec_t { bits: 0 };
            ok(sluice_graph_instantiate(g, &mut ex));
            ok(sluice_graph_exec_destroy(ex));
            ok(sluice_graph_destroy(g));
        });
        let r = ns(&mut || unsafe {
            (drv.cuStreamBeginCapture_v2)(ra as _, 2);
            for _ in 0..K {
                raw_launch(ra, &mut args_a);
            }
            let mut g = std::ptr::null_mut();
            (drv.cuStreamEndCapture)(ra as _, &mut g);
            let mut ex = std::ptr::null_mut();
            (drv.cuGraphInstantiateWithFlags)(&mut ex, g, 0);
            (drv.cuGraphExecDestroy)(ex);
            (drv.cuGraphDestroy)(g);
        });
        row("capture + instantiate + destroy, 10 launches", s, r);
    }
    if want("trace") {
        // The ping-pong op with host spans on less the same op with tracing off, in
        // alternating passes (best of each); the trace goes to a temporary file.
        let path = std::env::temp_dir().join(format!("opcost-trace-{}.json", std::process::id()));
        let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut k = 0u64;
        let mut ping = || {
            k += 1;
            if k % 2 == 0 {
                launch(sa, &[y], &[x], &mut args_a)
            } else {
                launch(sb, &[x], &[y], &mut args_b)
            }
        };
        let (mut off, mut on) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            off = off.min(ns(&mut ping));
            ok(sluice_trace_start(cpath.as_ptr()));
            on = on.min(ns(&mut ping));
            ok(sluice_trace_stop());
        }
        let _ = std::fs::remove_file(&path);
        row("ping-pong op, host spans on (less: tracing off)", on, off);
    }
    // Foreign op pairs reading k objects that no other stream writes (the common
    // case: one record, no wait). Keys op1obj, op4obj, op16obj ("op" runs all three).
    for k in [1usize, 4, 16] {
        if !want(&format!("op{k}obj")) {
            continue;
        }
        // The 1-object row reads a buffer's object, as before; the others standalone ones.
        let objs: Vec<sluice_sync_t> = if k == 1 { vec![x] } else { sync_objects(k) };
        let s = ns(&mut || op_pair(sa, &objs));
        let r = ns(&mut || unsafe {
            black_box((drv.cuEventRecord)(eva, ra as _));
        });
        let what = if k == 1 { "read" } else { "reads" };
        row(&format!("op_begin + op_end, {k} {what}"), s, r);
        if k == 1 {
            // What the pair asks of the driver: the context check of each C call and
            // a record of one of two pooled events in turn, against one record.
            let mut turn = false;
            let mut ctx = std::ptr::null_mut();
            let d2 = ns(&mut || unsafe {
                black_box((drv.cuCtxGetCurrent)(&mut ctx));
                black_box((drv.cuCtxGetCurrent)(&mut ctx));
                turn = !turn;
                black_box((drv.cuEventRecord)(if turn { eva } else { evb }, ra as _));
            });
            row(
                "driver: 2 context checks + a record of 2 events in turn",
                d2,
                r,
            );
            // The same pair on an object made by sluice_sync_create, and on a thread
            // spawned for it (the overhead benchmark's rows run there).
            let mut own = sluice_sync_t { bits: 0 };
            ok(sluice_sync_create(&mut own));
            let s2 = ns(&mut || op_pair(sa, &[own]));
            row("op_begin + op_end, 1 read of a sync_create object", s2, r);
            // Raw handles cross as integers; sluice's first call binds the context.
            let (ev, rs) = (eva as usize, ra as usize);
            let (s3, r3) = std::thread::scope(|sc| {
                sc.spawn(|| {
                    let s3 = ns(&mut || op_pair(sa, &[x]));
                    let r3 = ns(&mut || unsafe {
                        black_box((drv.cuEventRecord)(ev as _, rs as _));
                    });
                    (s3, r3)
                })
                .join()
                .unwrap()
            });
            row("op_begin + op_end, 1 read, on a spawned thread", s3, r3);
            ok(sluice_sync_destroy(own));
        }
        if k > 1 {
            for o in objs {
                ok(sluice_sync_destroy(o));
            }
        }
    }
    if want("alloc") {
        let s = ns(&mut || {
            let mut b = sluice_buffer_t { bits: 0 };
            ok(sluice_buffer_alloc(sa, 1 << 20, &mut b));
            ok(sluice_buffer_free(b));
        });
        row("alloc + free (block cache)", s, 0.0);
    }
    if want("alloc") {
        ok(sluice_stream_set_block_cache_limit(sa, 0));
        let s = ns(&mut || {
            let mut b = sluice_buffer_t { bits: 0 };
            ok(sluice_buffer_alloc(sa, 1 << 20, &mut b));
            ok(sluice_buffer_free(b));
        });
        let r = ns(&mut || unsafe {
            let mut p = 0;
            (drv.cuMemAllocAsync)(&mut p, 1 << 20, ra as _);
            (drv.cuMemFreeAsync)(p, ra as _);
        });
        row("alloc + free (cache off)", s, r);
    }
    if want("threads") {
        // 8 threads, each on its own stream, read the same 4 sync objects.
        let shared = sync_objects(4);
        let per = (n / 10).max(1000);
        let t0 = Instant::now();
        std::thread::scope(|sc| {
            for _ in 0..8 {
                let shared = &shared;
                sc.spawn(move || {
                    let mut st = sluice_stream_t { bits: 0 };
                    ok(sluice_stream_create(
                        d,
                        SLUICE_STREAM_NON_BLOCKING,
                        0,
                        &mut st,
                    ));
                    for _ in 0..per {
                        op_pair(st, shared);
                    }
                    ok(sluice_stream_synchronize(st));
                    ok(sluice_stream_destroy(st));
                });
            }
        });
        let per_pair = t0.elapsed().as_nanos() as f64 / per as f64;
        row(
            "op_begin + op_end, 8 threads, 4 shared objects (ns per pair per thread)",
            per_pair,
            0.0,
        );
        for o in shared {
            ok(sluice_sync_destroy(o));
        }
    }
    if want("sharing") {
        // benches/overhead's "sync objects" rows on the stand-in driver: T threads,
        // each on its own stream, run op_begin + op_end pairs reading K objects,
        // shared by all threads or each thread's own; and T threads recording raw
        // events on their streams. Total pairs (records) per second over all threads.
        let per = (n / 2).max(2000) as usize;
        // Best of 3 of: all pairs over the time from the start signal to the last
        // thread's end.
        let run = |threads: usize, objs: &[Vec<sluice_sync_t>], raw: bool| -> f64 {
            let barrier = std::sync::Barrier::new(threads + 1);
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = std::thread::scope(|sc| {
                    let hs: Vec<_> = (0..threads)
                        .map(|i| {
                            let (barrier, objs) = (&barrier, &objs[i % objs.len()]);
                            sc.spawn(move || {
                                let (st, rs) = mk_stream();
                                let mut e = std::ptr::null_mut();
                                unsafe { (drv.cuEventCreate)(&mut e, 2) };
                                barrier.wait();
                                for _ in 0..per {
                                    if raw {
                                        unsafe { black_box((drv.cuEventRecord)(e, rs as _)) };
                                    } else {
                                        op_pair(st, objs);
                                    }
                                }
                                let end = Instant::now();
                                ok(sluice_stream_synchronize(st));
                                ok(sluice_stream_destroy(st));
                                end
                            })
                        })
                        .collect();
                    let t0 = Instant::now();
                    barrier.wait();
                    hs.into_iter()
                        .map(|h| h.join().unwrap())
                        .max()
                        .unwrap()
                        .duration_since(t0)
                });
                best = best.min(t.as_secs_f64());
            }
            (threads * per) as f64 / best / 1e6
        };
        println!("\n| objects | threads | objects | total M pairs/s |\n|---:|---:|---|---:|");
        for threads in [1usize, 8, 16] {
            println!(
                "| — | {threads} | raw cuEventRecord | {:.2} |",
                run(threads, &[vec![]], true)
            );
        }
        for k in [1usize, 4, 16] {
            let one = vec![sync_objects(k)];
            println!("| {k} | 1 | — | {:.2} |", run(1, &one, false));
            for threads in [8usize, 16] {
                let own: Vec<_> = (0..threads).map(|_| sync_objects(k)).collect();
                let shared = run(threads, &one, false);
                let disjoint = run(threads, &own, false);
                println!("| {k} | {threads} | shared (read-only) | {shared:.2} |");
                println!("| {k} | {threads} | disjoint | {disjoint:.2} |");
                for o in own.into_iter().flatten() {
                    ok(sluice_sync_destroy(o));
                }
            }
            for o in one.into_iter().flatten() {
                ok(sluice_sync_destroy(o));
            }
        }
    }
    ok(sluice_event_destroy(ev));
}

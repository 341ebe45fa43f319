//! Leak soaks (issue 16): create/destroy cycles of every handle type through the
//! C ABI on the host backend, with the resident set flat (at most 1 MiB of drift
//! after a warm-up of a tenth of the cycles) and no live handle left. CI runs
//! `SOAK_CYCLES` (default 20 000) per type; the ignored test runs 1M each:
//! `cargo test --release --test soak -- --ignored --nocapture`.

use sluice::ffi::*;
use std::ffi::c_void;
use std::ptr::null;
use std::time::Instant;

fn ok(e: *mut sluice_error_t) {
    if !e.is_null() {
        // SAFETY: a live error's message is a NUL-terminated string.
        let m = unsafe { std::ffi::CStr::from_ptr(sluice_error_message(e)) };
        panic!("{}", m.to_string_lossy());
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

const N: usize = 4096;

struct Env {
    dev: sluice_device_t,
    s: sluice_stream_t,
    x: sluice_buffer_t,
    rng: sluice_rng_t,
    graph: sluice_graph_t,
}

extern "C" fn body(user: *mut c_void, s: sluice_stream_t) -> i32 {
    // SAFETY: user is the soak's buffer, alive during the run.
    let x = unsafe { *(user as *const sluice_buffer_t) };
    ok(sluice_stream_memset(s, x, 0, 1, 64));
    0
}

type Cycle = fn(&Env, u64);

const CYCLES: &[(&str, Cycle)] = &[
    ("stream", |e, _| {
        let mut s = sluice_stream_t { bits: 0 };
        ok(sluice_stream_create(e.dev, 0, 0, &mut s));
        ok(sluice_stream_destroy(s));
    }),
    ("event", |e, _| {
        let mut ev = sluice_event_t { bits: 0 };
        ok(sluice_event_record(e.s, 0, &mut ev));
        ok(sluice_event_destroy(ev));
    }),
    ("sync object and op", |e, _| {
        let mut o = sluice_sync_t { bits: 0 };
        ok(sluice_sync_create(&mut o));
        let mut op = sluice_op_t { bits: 0 };
        ok(sluice_op_begin(e.s, null(), 0, &o, 1, &mut op));
        ok(sluice_op_end(op));
        ok(sluice_sync_destroy(o));
    }),
    ("device buffer", |e, i| {
        let mut b = sluice_buffer_t { bits: 0 };
        // Sizes vary so the block cache is missed as well as hit.
        ok(sluice_buffer_alloc(e.s, N + (i % 7) as usize * 512, &mut b));
        ok(sluice_stream_memset(e.s, b, 0, 0, 64));
        ok(sluice_buffer_free(b));
    }),
    ("pinned buffer", |e, _| {
        let mut b = sluice_buffer_t { bits: 0 };
        ok(sluice_buffer_alloc_pinned(e.dev, N, &mut b));
        ok(sluice_buffer_free(b));
    }),
    ("graph", |e, _| {
        ok(sluice_graph_capture_begin(e.s, 0));
        ok(sluice_stream_memset(e.s, e.x, 0, 2, 64));
        let mut g = sluice_graph_t { bits: 0 };
        ok(sluice_graph_capture_end(e.s, &mut g));
        ok(sluice_graph_destroy(g));
    }),
    ("graph exec", |e, _| {
        let mut ex = sluice_graph_exec_t { bits: 0 };
        ok(sluice_graph_instantiate(e.graph, &mut ex));
        ok(sluice_graph_exec_launch(ex, e.s));
        ok(sluice_graph_exec_destroy(ex));
    }),
    ("graph cache and its entries", |e, i| {
        let mut c = sluice_graph_cache_t { bits: 0 };
        ok(sluice_graph_cache_create(e.dev, &mut c));
        ok(sluice_graph_cache_set_max_entries(c, 2));
        let user = &e.x as *const sluice_buffer_t as *mut c_void;
        // Three keys through two entries: captures, replays and evictions.
        for run in 0..3 {
            ok(sluice_graph_cache_run(
                c,
                i % 3 + run,
                e.s,
                Some(body),
                user,
            ));
        }
        ok(sluice_graph_cache_destroy(c));
    }),
    ("rng", |e, _| {
        let mut r = sluice_rng_t { bits: 0 };
        ok(sluice_rng_create(e.s, 7, 16, &mut r));
        ok(sluice_rng_destroy(r));
    }),
    ("rng checkpoint", |e, _| {
        let mut cp = sluice_rng_checkpoint_t { bits: 0 };
        ok(sluice_rng_checkpoint_create(e.s, e.rng, &mut cp));
        ok(sluice_rng_save(e.s, e.rng, cp));
        ok(sluice_rng_checkpoint_destroy(cp));
    }),
    ("prefetcher", |e, _| {
        // SAFETY: all-zero is a valid config to fill in (push mode).
        let mut cfg: sluice_prefetcher_config_t = unsafe { std::mem::zeroed() };
        cfg.depth = 2;
        cfg.segments = 1;
        cfg.capacity[0] = N;
        let mut p = sluice_prefetcher_t { bits: 0 };
        ok(sluice_prefetcher_create(e.dev, &cfg, &mut p));
        ok(sluice_prefetcher_destroy(p));
    }),
];

/// Runs `cycles` of each type; returns (type, drift in bytes, seconds).
fn soak(cycles: u64, only: Option<&str>) -> Vec<(&'static str, i64, f64)> {
    let mut dev = sluice_device_t { bits: 0 };
    ok(sluice_device_open(
        sluice::BackendKind::Host as u32,
        0,
        &mut dev,
    ));
    let mut s = sluice_stream_t { bits: 0 };
    ok(sluice_stream_create(dev, 0, 0, &mut s));
    let mut x = sluice_buffer_t { bits: 0 };
    ok(sluice_buffer_alloc(s, N, &mut x));
    let mut rng = sluice_rng_t { bits: 0 };
    ok(sluice_rng_create(s, 1, 16, &mut rng));
    ok(sluice_graph_capture_begin(s, 0));
    ok(sluice_stream_memset(s, x, 0, 3, 64));
    let mut graph = sluice_graph_t { bits: 0 };
    ok(sluice_graph_capture_end(s, &mut graph));
    let env = Env {
        dev,
        s,
        x,
        rng,
        graph,
    };
    let handles0 = sluice_live_handles();
    let warm = (cycles / 10).max(1);
    let mut out = Vec::new();
    for &(name, cycle) in CYCLES {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let t = Instant::now();
        let mut base = 0;
        for i in 0..cycles {
            cycle(&env, i);
            if i % 1024 == 1023 {
                ok(sluice_device_wait_all(dev));
            }
            if i + 1 == warm {
                ok(sluice_device_wait_all(dev));
                base = rss_bytes();
            }
        }
        ok(sluice_device_wait_all(dev));
        let drift = rss_bytes() as i64 - base as i64;
        assert_eq!(sluice_live_handles(), handles0, "{name}: handles left");
        out.push((name, drift, t.elapsed().as_secs_f64()));
    }
    for e in [
        sluice_graph_destroy(graph),
        sluice_rng_destroy(rng),
        sluice_buffer_free(x),
        sluice_stream_destroy(s),
    ] {
        ok(e);
    }
    ok(sluice_device_close(dev));
    out
}

fn check(cycles: u64) {
    let only = std::env::var("SOAK_ONLY").ok();
    for (name, drift, secs) in soak(cycles, only.as_deref()) {
        eprintln!(
            "soak {name}: {cycles} cycles in {secs:.1} s, RSS drift {:+.1} KiB",
            drift as f64 / 1024.0
        );
        assert!(
            drift <= 1 << 20,
            "{name}: RSS grew by {drift} bytes over {cycles} cycles"
        );
    }
}

#[test]
fn handles_cycle_with_flat_memory() {
    let cycles = std::env::var("SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    check(cycles);
}

#[test]
#[ignore = "1M cycles per handle type: minutes; run with --release --ignored"]
fn a_million_cycles_of_each_handle_with_flat_memory() {
    check(1_000_000);
}

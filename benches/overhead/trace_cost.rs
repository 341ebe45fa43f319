//! The table "Trace cost": the cross-stream ping-pong chain (each op reads what the
//! other stream wrote last, so the engine inserts one wait per op) with tracing off,
//! with host spans (`SLUICE_TRACE`), and with device spans sampled 1/N and 1/1
//! (`SLUICE_TRACE_DEVICE=1`, `SLUICE_TRACE_SAMPLE=N`), in the same process, next to
//! the raw-driver chain (wait, op, record) that the ping-pong table's (b) row runs.
//!
//! On CUDA the op is `sluice_add` (the ping-pong table's chain). Without a CUDA
//! device, `run_host` measures the same chain on the host backend, with a 256-byte
//! device-to-device copy as the op and the host backend's own calls as the raw row:
//! a check that the table works and a measure of sluice's own added cost on this
//! CPU, not of a GPU.

use crate::harness::*;
use sluice::backend::{BackendKind, DeviceBackend};
use sluice::ffi::*;
use sluice::trace::{self, TraceOptions};
use std::time::Instant;

/// Device spans every this many ops in the sampled row.
const SAMPLE_N: u32 = 16;

/// One chain: `ops` alternating ops; returns seconds per op.
type Chain<'a> = &'a mut dyn FnMut(usize) -> f64;

struct Row {
    name: String,
    /// Device-span sampling: None (tracing off), Some(0) (host spans only), Some(n).
    trace: Option<u32>,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "tracing off".into(),
            trace: None,
        },
        Row {
            name: "host spans (`SLUICE_TRACE`)".into(),
            trace: Some(0),
        },
        Row {
            name: format!("host + device spans, 1/{SAMPLE_N} (`SLUICE_TRACE_SAMPLE={SAMPLE_N}`)"),
            trace: Some(SAMPLE_N),
        },
        Row {
            name: "host + device spans, 1/1 (`SLUICE_TRACE_DEVICE=1`)".into(),
            trace: Some(1),
        },
    ]
}

/// Measures the rows and the raw chain, rotating, and prints the table. `goals`:
/// where the ≤ 200 ns goal of host spans is checked (None: reported as info, with
/// `info_goal` in the goal column).
#[allow(clippy::too_many_arguments)]
fn table(
    cfg: Cfg,
    ops: usize,
    what: &str,
    raw_what: &str,
    sluice: Chain<'_>,
    raw: Chain<'_>,
    goals: Option<&mut Goals>,
    info_goal: &str,
) {
    if trace::is_tracing() {
        fail("trace cost: a trace is already being written (unset SLUICE_TRACE)");
    }
    let path = std::env::temp_dir().join(format!("sluice-bench-trace-{}.json", std::process::id()));
    let rows = rows();
    let sluice = std::cell::RefCell::new(sluice);
    let mut fns: Vec<Box<dyn FnMut() -> f64 + '_>> = rows
        .iter()
        .map(|r| {
            let (every, path, sluice) = (r.trace, &path, &sluice);
            Box::new(move || {
                if let Some(n) = every {
                    trace::start(path, TraceOptions { device_every: n })
                        .unwrap_or_else(|e| fail(&format!("trace::start: {e}")));
                }
                let t = (sluice.borrow_mut())(ops);
                if every.is_some() {
                    trace::stop().unwrap_or_else(|e| fail(&format!("trace::stop: {e}")));
                }
                t
            }) as Box<dyn FnMut() -> f64>
        })
        .collect();
    fns.push(Box::new(|| raw(ops)));
    let mut refs: Vec<&mut dyn FnMut() -> f64> = fns
        .iter_mut()
        .map(|f| &mut **f as &mut dyn FnMut() -> f64)
        .collect();
    let m = measure(cfg.reps, &mut refs);
    drop(refs);
    drop(fns);
    let _ = std::fs::remove_file(&path);

    println!("## Trace cost ({ops} ops, {what})\n");
    println!("| variant | ns/op | added to tracing off | goal | result |");
    println!("|---|---:|---:|---|---|");
    let off = m[0];
    let mut goals = goals;
    for (i, r) in rows.iter().enumerate() {
        let add = (m[i] - off) * 1e9;
        let (goal, result) = match (r.trace, goals.as_deref_mut()) {
            (Some(0), Some(g)) => ("≤ +200 ns", g.check(add <= 200.0).to_string()),
            (Some(0), None) => (info_goal, "info".to_string()),
            _ => ("—", "info".to_string()),
        };
        let added = if i == 0 {
            "—".to_string()
        } else {
            format!("{add:+.0} ns")
        };
        println!(
            "| sluice, {} | {:.0} | {added} | {goal} | {result} |",
            r.name,
            m[i] * 1e9
        );
    }
    println!(
        "| raw: {raw_what} | {:.0} | — | — | — |",
        m[rows.len()] * 1e9
    );
    println!();
}

/// On CUDA: the ping-pong table's chain (`sluice_add`, one wait per op).
pub fn run(b: &mut Bench) {
    let ops = b.cfg.n(10_000);
    let (sa, sb, ra, rb) = (b.sa, b.sb, b.ra, b.rb);
    let n = 4096usize;
    let bytes = n * 4;
    let grid = (n as u32).div_ceil(256);
    let dm = dims(grid, 256);
    let (x, y) = (SBuf::device(sa, bytes), SBuf::device(sa, bytes));
    let (rx, ry) = (b.r_alloc(bytes), b.r_alloc(bytes));
    let (eva, evb) = (b.r_event(), b.r_event());
    let (sf, rf) = (b.s_add, b.r_add);
    let mut goals = std::mem::take(&mut b.goals);
    // One op of each chain: k even on A (reads y, writes x), odd on B.
    let mut chain = SPingPong::new((sa, sb), sf, dm, (&x, &y), n);
    let mut s_op = |k: usize| chain.op(k, "trace cost");
    let s_settle = || {
        s_sync(sa);
        s_sync(sb);
    };
    let me = &*b;
    let d = me.d;
    let (mut rxa, mut rya, mut rna) = (rx, ry, n as u64);
    let (mut ryb, mut rxb, mut rnb) = (ry, rx, n as u64);
    let mut r_args_a = [arg(&mut rxa), arg(&mut rya), arg(&mut rna)];
    let mut r_args_b = [arg(&mut ryb), arg(&mut rxb), arg(&mut rnb)];
    let mut r_op = |k: usize| {
        let (s, other, args, ev) = if k % 2 == 0 {
            (ra, evb, &mut r_args_a, eva)
        } else {
            (rb, eva, &mut r_args_b, evb)
        };
        // SAFETY: live stream and event (both events were recorded before any chain).
        cu(
            d,
            unsafe { (d.cuStreamWaitEvent)(s, other, 0) },
            "cuStreamWaitEvent",
        );
        me.r_launch(rf, grid, 256, s, args.as_mut_ptr());
        // SAFETY: live event and stream.
        cu(d, unsafe { (d.cuEventRecord)(ev, s) }, "cuEventRecord");
    };
    let r_settle = || {
        me.r_sync(ra);
        me.r_sync(rb);
    };
    // SAFETY: live events and streams: the first waits of each chain find a recording.
    cu(d, unsafe { (d.cuEventRecord)(eva, ra) }, "cuEventRecord");
    cu(d, unsafe { (d.cuEventRecord)(evb, rb) }, "cuEventRecord");
    let op_cell = std::cell::RefCell::new((&mut s_op, &mut r_op));
    // The whole chain: enqueue and run, one sync at the end (GPU and host together).
    let mut s_chain = |ops: usize| {
        let t0 = Instant::now();
        for k in 0..ops {
            (op_cell.borrow_mut().0)(k);
        }
        s_settle();
        secs(t0.elapsed()) / ops as f64
    };
    let mut r_chain = |ops: usize| {
        let t0 = Instant::now();
        for k in 0..ops {
            (op_cell.borrow_mut().1)(k);
        }
        r_settle();
        secs(t0.elapsed()) / ops as f64
    };
    table(
        b.cfg,
        ops,
        "the ping-pong chain: sluice_add alternating between two streams, enqueue and run",
        "cuStreamWaitEvent + cuLaunchKernel + cuEventRecord",
        &mut s_chain,
        &mut r_chain,
        None,
        "— (the goal is the enqueue table below)",
    );
    // The host's enqueue time alone: batches of ENQUEUE_BATCH ops, each timed, the
    // syncs after each untimed. A batch is short enough that the driver never holds
    // the host back for the GPU, so the difference between the rows is what the
    // trace adds to each op's call, not how the GPU's pace absorbs it.
    let mut s_enqueue = |ops: usize| enqueue_cost(ops, |k| (op_cell.borrow_mut().0)(k), s_settle);
    let mut r_enqueue = |ops: usize| enqueue_cost(ops, |k| (op_cell.borrow_mut().1)(k), r_settle);
    table(
        b.cfg,
        ops,
        "the same chain, host enqueue time alone: batches of 100 ops, syncs untimed",
        "cuStreamWaitEvent + cuLaunchKernel + cuEventRecord",
        &mut s_enqueue,
        &mut r_enqueue,
        Some(&mut goals),
        "",
    );
    b.goals = goals;
    x.free();
    y.free();
    s_sync(sa);
    b.r_event_destroy(eva);
    b.r_event_destroy(evb);
    b.r_free(rx);
    b.r_free(ry);
}

/// Ops in one timed batch of the enqueue table.
const ENQUEUE_BATCH: usize = 100;

/// Seconds per op of `ops` calls of `op(k)` in timed batches of [`ENQUEUE_BATCH`],
/// with `settle` run untimed after each batch.
fn enqueue_cost(ops: usize, mut op: impl FnMut(usize), settle: impl Fn()) -> f64 {
    let mut t = std::time::Duration::ZERO;
    let mut k = 0;
    while k < ops {
        let t0 = Instant::now();
        for _ in 0..ENQUEUE_BATCH.min(ops - k) {
            op(k);
            k += 1;
        }
        t += t0.elapsed();
        settle();
    }
    secs(t) / ops as f64
}

fn host_ck<T>(r: sluice::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| fail(&format!("{what}: {e}")))
}

/// Without a CUDA device: the same chain on the host backend, with a 256-byte
/// device-to-device copy as the op; only the enqueue loop is timed (in batches of
/// `BATCH` ops), not the host backend's workers.
pub fn run_host(cfg: Cfg) {
    const LEN: usize = 256;
    let ops = cfg.n(10_000);
    let mut dev = sluice_device_t { bits: 0 };
    ck(
        sluice_device_open(BackendKind::Host as u32, 0, &mut dev),
        "sluice_device_open(host)",
    );
    let stream = || {
        let mut s = sluice_stream_t { bits: 0 };
        ck(
            sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &mut s),
            "sluice_stream_create",
        );
        s
    };
    let (sa, sb) = (stream(), stream());
    let buf = || {
        let mut h = sluice_buffer_t { bits: 0 };
        ck(sluice_buffer_alloc(sa, LEN, &mut h), "sluice_buffer_alloc");
        h
    };
    let (x, y) = (buf(), buf());
    // Host cost only: the host backend's workers run the copies on this machine's
    // cores, so the chain's throughput would measure them; batches of `BATCH` ops
    // are timed, and the syncs after each are not.
    let mut s_chain = |ops: usize| {
        let mut k = 0usize;
        per_call(
            ops.div_ceil(BATCH),
            || {
                let (s, dst, src) = if k % 2 == 0 { (sa, x, y) } else { (sb, y, x) };
                k += 1;
                ck(
                    sluice_stream_copy(s, dst, 0, src, 0, LEN),
                    "sluice_stream_copy",
                );
            },
            || {
                s_sync(sa);
                s_sync(sb);
            },
        )
    };
    // The raw row: the host backend's own calls, on streams of their own.
    let hb = host_ck(DeviceBackend::open(BackendKind::Host, 0), "host backend");
    let rs = [
        host_ck(hb.stream_create(true, 0), "stream_create"),
        host_ck(hb.stream_create(true, 0), "stream_create"),
    ];
    let rev = [
        host_ck(hb.event_create(false), "event_create"),
        host_ck(hb.event_create(false), "event_create"),
    ];
    let rbuf = [
        host_ck(hb.mem_alloc_async(LEN, rs[0]), "mem_alloc_async"),
        host_ck(hb.mem_alloc_async(LEN, rs[0]), "mem_alloc_async"),
    ];
    host_ck(hb.stream_synchronize(rs[0]), "stream_synchronize");
    // Both events recorded once, so the first waits have something to wait on.
    for i in 0..2 {
        host_ck(hb.event_record(rev[i], rs[i]), "event_record");
    }
    let mut r_chain = |ops: usize| {
        let mut k = 0usize;
        per_call(
            ops.div_ceil(BATCH),
            || {
                let i = k % 2;
                k += 1;
                host_ck(hb.stream_wait_event(rs[i], rev[1 - i]), "stream_wait_event");
                host_ck(
                    hb.memcpy_async(rbuf[i], rbuf[1 - i], LEN, rs[i]),
                    "memcpy_async",
                );
                host_ck(hb.event_record(rev[i], rs[i]), "event_record");
            },
            || {
                host_ck(hb.stream_synchronize(rs[0]), "stream_synchronize");
                host_ck(hb.stream_synchronize(rs[1]), "stream_synchronize");
            },
        )
    };
    table(
        cfg,
        ops,
        "HOST BACKEND, not a GPU: host cost of a 256-byte device-to-device copy \
         alternating between two streams, syncs untimed",
        "the host backend's stream wait + copy + event record",
        &mut s_chain,
        &mut r_chain,
        None,
        "≤ +200 ns (GPU)",
    );
    for p in rbuf {
        host_ck(hb.mem_free_async(p, rs[0]), "mem_free_async");
    }
    for s in rs {
        host_ck(hb.stream_synchronize(s), "stream_synchronize");
        hb.stream_destroy(s);
    }
    for e in rev {
        hb.event_destroy(e);
    }
    ck(sluice_buffer_free(x), "sluice_buffer_free");
    ck(sluice_buffer_free(y), "sluice_buffer_free");
    s_sync(sa);
    ck(sluice_stream_destroy(sa), "sluice_stream_destroy");
    ck(sluice_stream_destroy(sb), "sluice_stream_destroy");
    ck(sluice_device_close(dev), "sluice_device_close");
}

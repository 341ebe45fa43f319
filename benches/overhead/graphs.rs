//! The table "Graphs": K empty kernels, eager and as a replayed graph, sluice and
//! raw.

use crate::harness::*;
use cudarc::driver::sys::{CUgraph, CUgraphExec};
use sluice::backend::cuda::Driver;
use sluice::backend::CaptureMode;
use sluice::ffi::*;
use std::ptr::{null, null_mut};
use std::time::Instant;

pub fn run(b: &mut Bench) {
    let rows = b.bench_graphs();
    print_graphs(&rows, &mut b.goals);
}

struct GraphRow {
    k: usize,
    s_eager: f64,
    r_eager: f64,
    s_replay: f64,
    r_replay: f64,
    /// Capture + instantiate, seconds (median of CAPTURE_REPS after a warm-up).
    s_inst: f64,
    r_inst: f64,
}

impl Bench {
    /// Issue 4: K tiny kernels, eager and as a replayed graph, sluice and raw.
    fn bench_graphs(&mut self) -> Vec<GraphRow> {
        let (sa, ra, d) = (self.sa, self.ra, self.d);
        let (sf, rf) = (self.s_empty, self.r_empty);
        let dm = dims(1, 32);
        let mut rows = Vec::new();
        for k in [10usize, 100, 1000] {
            let iters = self.cfg.n((20_000 / k).max(20));
            // Eager: iters x k launches back to back.
            let s_eager = || {
                per_op(
                    iters * k,
                    || {
                        ck(
                            sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                            "sluice_stream_launch",
                        )
                    },
                    || s_sync(sa),
                )
            };
            let me = &*self;
            let r_eager = || {
                per_op(
                    iters * k,
                    || me.r_launch(rf, 1, 32, ra, null_mut()),
                    || me.r_sync(ra),
                )
            };
            // Capture + instantiate, sluice and raw in pairs: a warm-up pair (the
            // process's first capture pays the driver's one-time set-up), then
            // CAPTURE_REPS pairs; the medians are reported. The last pair replays.
            let s_build = || -> (f64, sluice_graph_t, sluice_graph_exec_t) {
                let t0 = Instant::now();
                ck(
                    sluice_graph_capture_begin(sa, CaptureMode::Relaxed as u32),
                    "sluice_graph_capture_begin",
                );
                for _ in 0..k {
                    ck(
                        sluice_stream_launch(sa, sf, &dm, null_mut(), 0, null(), 0, null(), 0),
                        "sluice_stream_launch (captured)",
                    );
                }
                let mut g = sluice_graph_t { bits: 0 };
                ck(
                    sluice_graph_capture_end(sa, &mut g),
                    "sluice_graph_capture_end",
                );
                let mut ex = sluice_graph_exec_t { bits: 0 };
                ck(
                    sluice_graph_instantiate(g, &mut ex),
                    "sluice_graph_instantiate",
                );
                let t = secs(t0.elapsed());
                (t, g, ex)
            };
            let r_build = |me: &Self| -> (f64, CUgraph, CUgraphExec) {
                let t0 = Instant::now();
                // SAFETY: a live stream; relaxed mode (2).
                cu(
                    d,
                    unsafe { (d.cuStreamBeginCapture_v2)(ra, 2) },
                    "cuStreamBeginCapture",
                );
                for _ in 0..k {
                    me.r_launch(rf, 1, 32, ra, null_mut());
                }
                let mut rg: CUgraph = null_mut();
                // SAFETY: ends the capture begun above.
                cu(
                    d,
                    unsafe { (d.cuStreamEndCapture)(ra, &mut rg) },
                    "cuStreamEndCapture",
                );
                let mut rex: CUgraphExec = null_mut();
                // SAFETY: a captured graph; writes one exec handle.
                cu(
                    d,
                    unsafe { (d.cuGraphInstantiateWithFlags)(&mut rex, rg, 0) },
                    "cuGraphInstantiateWithFlags",
                );
                (secs(t0.elapsed()), rg, rex)
            };
            let (mut s_times, mut r_times) = (Vec::new(), Vec::new());
            let mut built = None;
            for rep in 0..=CAPTURE_REPS {
                // Which goes first alternates, so that neither always pays
                // for the driver's clean-up of the pair destroyed just before.
                let ((st, g, ex), (rt, rg, rex)) = if rep % 2 == 0 {
                    let s = s_build();
                    (s, r_build(me))
                } else {
                    let r = r_build(me);
                    (s_build(), r)
                };
                if rep > 0 {
                    s_times.push(st);
                    r_times.push(rt);
                }
                if let Some((g0, ex0, rg0, rex0)) = built.replace((g, ex, rg, rex)) {
                    destroy_pair(d, g0, ex0, rg0, rex0);
                }
            }
            let (g, ex, rg, rex) = built.expect("at least one pair");
            let (s_inst, r_inst) = (median(s_times), median(r_times));
            let mut nodes = 0usize;
            ck(
                sluice_graph_node_count(g, &mut nodes),
                "sluice_graph_node_count",
            );
            if nodes != k {
                fail(&format!("captured graph has {nodes} nodes, expected {k}"));
            }
            ck(sluice_graph_exec_upload(ex, sa), "sluice_graph_exec_upload");
            let s_replay = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    ck(sluice_graph_exec_launch(ex, sa), "sluice_graph_exec_launch");
                }
                s_sync(sa);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            // SAFETY: a live exec and stream.
            cu(d, unsafe { (d.cuGraphUpload)(rex, ra) }, "cuGraphUpload");
            let me = &*self;
            let r_replay = || {
                let t0 = Instant::now();
                for _ in 0..iters {
                    // SAFETY: a live exec and stream.
                    me.cu(unsafe { (me.d.cuGraphLaunch)(rex, ra) }, "cuGraphLaunch");
                }
                me.r_sync(ra);
                secs(t0.elapsed()) / (iters * k) as f64
            };
            let (mut a, mut b, mut c, mut e) = (s_eager, r_eager, s_replay, r_replay);
            let m = measure(self.cfg.reps, &mut [&mut a, &mut b, &mut c, &mut e]);
            rows.push(GraphRow {
                k,
                s_eager: m[0],
                r_eager: m[1],
                s_replay: m[2],
                r_replay: m[3],
                s_inst,
                r_inst,
            });
            destroy_pair(d, g, ex, rg, rex);
        }
        rows
    }
}

/// Capture + instantiate pairs timed per K, after one warm-up pair.
const CAPTURE_REPS: usize = 5;

fn destroy_pair(
    d: &Driver,
    g: sluice_graph_t,
    ex: sluice_graph_exec_t,
    rg: CUgraph,
    rex: CUgraphExec,
) {
    ck(sluice_graph_exec_destroy(ex), "sluice_graph_exec_destroy");
    ck(sluice_graph_destroy(g), "sluice_graph_destroy");
    // SAFETY: destroyed once each.
    cu(
        d,
        unsafe { (d.cuGraphExecDestroy)(rex) },
        "cuGraphExecDestroy",
    );
    // SAFETY: as above.
    cu(d, unsafe { (d.cuGraphDestroy)(rg) }, "cuGraphDestroy");
}

fn print_graphs(rows: &[GraphRow], goals: &mut Goals) {
    println!("## Graphs: K empty kernels, eager vs replay (µs per kernel)\n");
    println!("| K | sluice eager | raw eager | eager ratio (≤ 1.10x) | sluice replay | raw replay | replay ratio (≤ 1.05x) | capture+instantiate sluice / raw (median of 5, after a warm-up) | ratio (≤ 1.20x) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (er, rr) = (r.s_eager / r.r_eager, r.s_replay / r.r_replay);
        println!(
            "| {} | {:.3} | {:.3} | {:.3}x {} | {:.3} | {:.3} | {:.3}x {} | {:.1} µs / {:.1} µs | {:.3}x {} |",
            r.k,
            r.s_eager * 1e6,
            r.r_eager * 1e6,
            er,
            goals.check(er <= 1.10),
            r.s_replay * 1e6,
            r.r_replay * 1e6,
            rr,
            goals.check(rr <= 1.05),
            r.s_inst * 1e6,
            r.r_inst * 1e6,
            r.s_inst / r.r_inst,
            goals.check(r.s_inst <= 1.20 * r.r_inst)
        );
    }
    println!();
}

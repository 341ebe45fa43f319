//! The table "Op bookkeeping without kernels": `sluice_op_begin` + `sluice_op_end`
//! pairs over read sets of 1, 4 and 16 sync objects, on 1, 8 and 16 threads, and
//! the raw `cuEventRecord` throughput of 1, 8 and 16 threads on the same streams.

use crate::harness::*;
use cudarc::driver::sys::{CUcontext, CUevent, CUstream};
use sluice::ffi::*;
use std::ptr::null;
use std::sync::Barrier;

pub fn run(b: &mut Bench) {
    let rows = b.bench_ops();
    print_ops(&rows);
}

struct OpRow {
    /// 0: raw `cuEventRecord` on each thread's stream (no sluice call).
    objects: usize,
    threads: usize,
    shared: bool,
    per_pair: f64,
    worst_thread: f64,
    total_rate: f64,
}

impl Bench {
    fn bench_ops(&mut self) -> Vec<OpRow> {
        const THREADS: usize = 16;
        const MAX_OBJ: usize = 16;
        let batches = self.cfg.n(50);
        let dev = self.dev;

        let streams: Vec<sluice_stream_t> = (0..THREADS)
            .map(|_| {
                let mut s = sluice_stream_t { bits: 0 };
                ck(
                    sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &mut s),
                    "sluice_stream_create",
                );
                s
            })
            .collect();
        let bufs: Vec<Vec<SBuf>> = (0..THREADS)
            .map(|_| (0..MAX_OBJ).map(|_| SBuf::device(self.sa, 256)).collect())
            .collect();
        s_sync(self.sa);
        let syncs: Vec<Vec<sluice_sync_t>> = bufs
            .iter()
            .map(|v| v.iter().map(|b| b.sync).collect())
            .collect();

        let d = self.d;
        // The raw rows' threads bind the context this thread has bound.
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle.
        cu(
            d,
            unsafe { (d.cuCtxGetCurrent)(&mut ctx) },
            "cuCtxGetCurrent",
        );
        let ctx = ctx as usize;
        // One thread's loop: `batches` x BATCH op_begin/op_end pairs reading `objs`,
        // or raw cuEventRecord calls on the stream's CUstream when `objs` is empty.
        let worker = |s: sluice_stream_t, objs: &[sluice_sync_t], barrier: &Barrier| -> f64 {
            if objs.is_empty() {
                // SAFETY: the primary context the bench retained, live until it ends.
                let res = unsafe { (d.cuCtxSetCurrent)(ctx as CUcontext) };
                cu(d, res, "cuCtxSetCurrent");
                let mut r = std::ptr::null_mut();
                ck(sluice_stream_raw(s, &mut r), "sluice_stream_raw");
                let r = r as CUstream;
                let mut e: CUevent = std::ptr::null_mut();
                // SAFETY: writes one event handle.
                cu(
                    d,
                    unsafe { (d.cuEventCreate)(&mut e, CU_EVENT_DISABLE_TIMING) },
                    "cuEventCreate",
                );
                // SAFETY: a live event and stream.
                let rec = || cu(d, unsafe { (d.cuEventRecord)(e, r) }, "cuEventRecord");
                for _ in 0..BATCH {
                    rec();
                }
                raw_sync(d, r);
                barrier.wait();
                let t = per_call(batches, rec, || raw_sync(d, r));
                // SAFETY: created above, destroyed once.
                cu(d, unsafe { (d.cuEventDestroy_v2)(e) }, "cuEventDestroy");
                return t;
            }
            let mut op = sluice_op_t { bits: 0 };
            let pair = |op: &mut sluice_op_t| {
                ck(
                    sluice_op_begin(s, objs.as_ptr(), objs.len(), null(), 0, op),
                    "sluice_op_begin",
                );
                ck(sluice_op_end(*op), "sluice_op_end");
            };
            for _ in 0..BATCH {
                pair(&mut op); // warm-up: binds the context on this thread
            }
            s_sync(s);
            barrier.wait();
            per_call(batches, || pair(&mut op), || s_sync(s))
        };

        let mut rows = Vec::new();
        for &k in &[0usize, 1, 4, 16] {
            let runs: &[(usize, bool)] = if k == 0 {
                &[(1, false), (8, false), (THREADS, false)]
            } else {
                &[
                    (1, true),
                    (8, true),
                    (8, false),
                    (THREADS, true),
                    (THREADS, false),
                ]
            };
            for &(threads, shared) in runs {
                let mut means = Vec::new();
                let mut worsts = Vec::new();
                let mut rates = Vec::new();
                for rep in 0..=self.cfg.reps {
                    let barrier = Barrier::new(threads);
                    let per_thread: Vec<f64> = std::thread::scope(|sc| {
                        let hs: Vec<_> = (0..threads)
                            .map(|t| {
                                let objs = if shared {
                                    &syncs[0][..k]
                                } else {
                                    &syncs[t][..k]
                                };
                                let (s, b, w) = (streams[t], &barrier, &worker);
                                sc.spawn(move || w(s, objs, b))
                            })
                            .collect();
                        hs.into_iter()
                            .map(|h| {
                                h.join()
                                    .unwrap_or_else(|_| fail("op bench thread panicked"))
                            })
                            .collect()
                    });
                    if rep == 0 {
                        continue; // warm-up repetition
                    }
                    let worst = per_thread.iter().copied().fold(0.0, f64::max);
                    means.push(per_thread.iter().sum::<f64>() / threads as f64);
                    worsts.push(worst);
                    rates.push(threads as f64 / worst);
                }
                rows.push(OpRow {
                    objects: k,
                    threads,
                    shared,
                    per_pair: median(means),
                    worst_thread: median(worsts),
                    total_rate: median(rates),
                });
            }
        }

        for v in bufs {
            for b in v {
                b.free();
            }
        }
        s_sync(self.sa);
        for s in streams {
            ck(sluice_stream_destroy(s), "sluice_stream_destroy");
        }
        rows
    }
}

fn print_ops(rows: &[OpRow]) {
    println!("## Op bookkeeping without kernels (sluice_op_begin + sluice_op_end, read sets)\n");
    println!(
        "Rows with 0 sync objects: raw cuEventRecord calls, one thread per stream (ns/record).\n"
    );
    println!("| sync objects | threads | objects | ns/pair (mean per thread) | slowest thread ns/pair | total Mpairs/s |");
    println!("|---:|---:|---|---:|---:|---:|");
    for r in rows {
        let objs = if r.objects == 0 {
            "raw cuEventRecord"
        } else if r.threads == 1 {
            "—"
        } else if r.shared {
            "shared (read-only)"
        } else {
            "disjoint"
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} |",
            r.objects,
            r.threads,
            objs,
            r.per_pair * 1e9,
            r.worst_thread * 1e9,
            r.total_rate / 1e6
        );
    }
    println!();
}
